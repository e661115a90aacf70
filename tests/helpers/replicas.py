"""Service replicas of one shared store, as real `ledgermem serve --store URL` processes.

`make_replicas` runs init_store with a key in DIR/init, adds keys/replica.secret as `ledgermem
init-store --data` does, and copies keys/ into each replica's own data directory (as an operator
would); `as_replica` signs a request as one replica forwarding it to another would, so the
replica it reaches answers it itself (421 when it does not lead) instead of forwarding it; `Replica` is tests/server.py's Server with the store
flags; `leading` reads which partitions a replica leads from its /readyz.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from eventstore.cli_init_store import ensure_replica_secret
from eventstore.layout import DataDir
from eventstore.pg.schema import StoreInfo, init_store
from streams.cluster.replica_secret import load_replica_secret
from streams.cluster.replica_sig import sign
from streams.server.settings import DEFAULT_TENANT, SCOPES
from tests.server import Server


def make_replicas(
    url: str, root: Path, count: int, partitions: int = 1, seg_bits: int = 16
) -> tuple[StoreInfo, list[Path]]:
    info = init_store(url, partitions, root / "init", seg_bits=seg_bits)
    ensure_replica_secret(DataDir(root / "init"))
    dirs = []
    for n in range(count):
        data = root / f"replica{n}"
        data.mkdir(parents=True)
        shutil.copytree(root / "init" / "keys", data / "keys")
        dirs.append(data)
    return info, dirs


def as_replica(data: Path, method: str, path: str, tenant: str = DEFAULT_TENANT) -> dict:
    """Headers of a request forwarded by a replica (streams/cluster/forwarding.py) for `tenant`."""
    secret = load_replica_secret(data, {})
    return sign(secret, method, path, tenant, frozenset(SCOPES), time.time())


def replica(data: Path, url: str, lease_seconds: float = 2.0, *args: str) -> Server:
    return Server(data, "--store", url, "--lease-seconds", str(lease_seconds), *args)


def readiness(server: Server) -> list[dict]:
    return httpx.get(server.url + "/readyz", timeout=5).json()["partitions"]


def leading(server: Server) -> set[int]:
    return {p["partition"] for p in readiness(server) if p["leading"]}


def wait_until(condition: Callable[[], object], timeout: float = 60.0, what: str = "") -> object:
    """Poll `condition` until it returns something true (not a timing assertion: the bound only
    keeps a broken run from hanging)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = condition()
        except (httpx.HTTPError, KeyError, ValueError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.1)
