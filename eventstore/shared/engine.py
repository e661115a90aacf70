"""A shared store as the service uses it, whatever the engine: `eventstore.stores.open_engine`
picks eventstore/pg/ for postgresql:// and eventstore/redis/ for redis://, rediss:// and unix://.

The cluster (streams/cluster/), the embedded store (sections/runtime/store_memory.py) and the
CLI speak only to these protocols; each engine's `engine.py` implements them over its own I/O.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from . import StoreError, StoreInfo, redact_url
from .lease import Head, Lease, Replica

if TYPE_CHECKING:
    from ..checkpoint import SigningKey
    from ..mirror import Mirror
    from ..writer import LogWriter
    from .export import Exported

POSTGRESQL_SCHEMES = ("postgresql", "postgres")
REDIS_SCHEMES = ("redis", "rediss", "unix")


class StoreSession(Protocol):
    """One connection's worth of leadership and registry calls (each one fenced write or read)."""

    def take(self, partition: int, owner: str, seconds: float) -> Lease | None: ...
    def renew(self, lease: Lease) -> bool: ...
    def release(self, lease: Lease) -> None: ...
    def heads(self) -> list[Head]: ...
    def heartbeat(self, replica_id: str, url: str) -> None: ...
    def replicas(self, live_seconds: float) -> list[Replica]: ...
    def leave(self, replica_id: str) -> None: ...
    def prune(self) -> None: ...
    def close(self) -> None: ...


class MirrorTail(Protocol):
    """Feeds every partition's mirror from the store (pg/tail.py, redis/tail.py)."""

    failed: dict[int, Any]

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def sync(self, partition: int) -> int: ...


class StoreEngine(Protocol):
    url: str
    name: str  # "PostgreSQL", "Redis": for messages

    def session(self) -> StoreSession: ...
    def read_store(self) -> StoreInfo: ...
    def init_store(
        self,
        partitions: int,
        data_dir: str | os.PathLike[str],
        *,
        seg_bits: int,
        origin: str | None,
    ) -> StoreInfo: ...
    def open_partition_writer(
        self,
        info: StoreInfo,
        key: SigningKey,
        partition: int,
        lease: Lease,
        mirror: Mirror | None = None,
        **writer_options: Any,
    ) -> LogWriter: ...
    def tail(self, mirrors: dict[int, Mirror]) -> MirrorTail: ...
    def sync_mirror(self, partition: int, mirror: Mirror) -> int: ...
    def export_log(self, partition: int, out: str | os.PathLike[str]) -> Exported: ...
    def store_vkey(self, partition: int) -> str: ...


def check_store_url(url: str) -> None:
    """StoreError unless `url` names a store engine ledgermem has (one line, for the CLI)."""
    scheme = urlsplit(url).scheme
    if scheme not in POSTGRESQL_SCHEMES + REDIS_SCHEMES:
        raise StoreError(
            f"the store must be a postgresql:// or redis:// (rediss://, unix://) URL, not "
            f"{redact_url(url)!r} (docs/scale-out.md)"
        )
    if scheme in REDIS_SCHEMES[:2] and not urlsplit(url).hostname:
        raise StoreError(f"the Redis URL {redact_url(url)!r} names no host")
