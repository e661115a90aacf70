"""Issue 14, test 5: two service replicas over one shared store, and the leader killed; run on
PostgreSQL and on Redis (issue 31: the same test holds both stores).

Two `ledgermem serve --store` processes on different ports share one store with P = 2 and
the same keys (`ledgermem init-store --data` made them, the replica secret among them, and the
second replica's keys/ is a copy). Writers hit both ports for the same sessions (half
of their requests are forwarded to the leader); SSE, WebSocket, JSONL and long-poll subscribers
follow each tenant on each replica. Mid-load the replica leading one partition is killed with
SIGKILL. Subscribers reconnect to the other replica with their cursor; writers retry there with
the same Idempotency-Key. Then:

- every acknowledged write is in the store, byte for byte, and the records are gap-free;
- `export-log` of each partition gives a directory the unchanged verifier accepts, holding the
  store's lines byte for byte;
- every subscriber got every record of its tenant exactly once, in seq order (the survivor's
  log, read once more at the end, is the reference);
- the survivor took the partition over within the lease plus one second of the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

from eventstore.partitions import partition_of
from tests import stream_clients as sc
from tests.helpers.stores import export_and_verify, store_url, stored_lines  # noqa: F401
from tests.server import ROOT, Server

LEASE = 2.0  # seconds: short, so the takeover bound is tight and the test quick
PARTITIONS = 2
WRITERS_PER_TENANT = 3
LOAD_BEFORE_KILL = 2.0  # seconds of load before the kill
LOAD_AFTER_TAKEOVER = 2.0


def _tenants() -> dict[int, str]:
    """One tenant per partition."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < PARTITIONS:
        tenant = f"tenant{n}"
        found.setdefault(partition_of(tenant, PARTITIONS), tenant)
        n += 1
    return found


TENANTS = _tenants()
TOKENS = {p: f"token-{tenant}" for p, tenant in TENANTS.items()}
OPERATOR = "token-operator"  # reads the log-wide figures (/metrics): the `log` scope
ENV_TOKENS = ",".join(
    [f"{TOKENS[p]}:{t}:read+write+admin" for p, t in TENANTS.items()]
    + [f"{OPERATOR}:{TENANTS[0]}:read+log"]
)


def _init_store(url: str, data: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ledgermem_cli", "init-store", url, "--partitions", str(PARTITIONS),
         "--data", str(data)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _replica(data: Path, url: str) -> Server:
    # No LEDGERMEM_REPLICA_SECRET: the replicas share keys/replica.secret, which init-store made
    # beside the signing key and which came along when keys/ was copied.
    env = {"LEDGERMEM_TOKENS": ENV_TOKENS, "LEDGERMEM_LEASE_SECONDS": str(LEASE)}
    return Server(data, "--store", url, "--unsafe-no-fsync", env=env)


def _leaders(url: str) -> dict[int, bool]:
    """Which partitions the replica at `url` leads now (its /readyz lists them)."""
    answer = httpx.get(url + "/readyz", timeout=5).json()
    return {p["partition"]: bool(p["leading"]) for p in answer["partitions"]}


def _wait_balanced(urls: list[str], limit: float) -> dict[int, str]:
    deadline = time.monotonic() + limit
    while True:
        leaders: dict[int, str] = {}
        for url in urls:
            with contextlib.suppress(httpx.HTTPError, KeyError):
                for partition, leading in _leaders(url).items():
                    if leading:
                        leaders[partition] = url
        if len(leaders) == PARTITIONS and len(set(leaders.values())) == len(urls):
            return leaders
        assert time.monotonic() < deadline, f"no balance within {limit} s: {leaders}"
        time.sleep(0.1)


# ---- writers -----------------------------------------------------------------------------------


class Acks:
    """What the service acknowledged: per partition, seq -> the record's exact bytes."""

    def __init__(self) -> None:
        self.records: dict[int, dict[int, bytes]] = {p: {} for p in TENANTS}
        self.retries = 0


async def _write_until(stop: asyncio.Event, urls: list[str], partition: int, n: int, acks: Acks):
    tenant_auth = {"Authorization": f"Bearer {TOKENS[partition]}"}
    session = f"s{n}"
    turn = n  # which replica this writer asks first; it alternates
    async with httpx.AsyncClient(timeout=10) as client:

        async def send(method: str, path: str, body: dict | None, key: str) -> httpx.Response:
            nonlocal turn
            deadline = time.monotonic() + 30
            while True:
                url = urls[turn % len(urls)]
                turn += 1
                try:
                    answer = await client.request(
                        method,
                        url + path,
                        json=body,
                        headers={**tenant_auth, "Idempotency-Key": key},
                    )
                except httpx.TransportError:
                    answer = None
                if answer is not None and answer.status_code < 500 and answer.status_code != 421:
                    return answer
                acks.retries += 1
                assert time.monotonic() < deadline, "a write found no leader for 30 s"
                await asyncio.sleep(0.05)

        created = await send("PUT", f"/v1/sessions/{session}", None, f"create-{n}")
        assert created.status_code in (200, 201), created.text
        count = 0
        while not stop.is_set():
            count += 1
            body = {"content": f"{TENANTS[partition]} {session} write {count}"}
            path = f"/v1/sessions/{session}/sections/findings/items"
            answer = await send("POST", path, body, f"{session}-{count}")
            assert answer.status_code == 201, answer.text
            record = _record_bytes(answer.content)
            acks.records[partition][orjson.loads(record)["seq"]] = record


def _record_bytes(body: bytes) -> bytes:
    """The `record` member of an answer, as the exact bytes the service sent (its line)."""
    start = body.index(b'"record":') + len(b'"record":')
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(body)):
        c = body[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return body[start : i + 1]
    raise AssertionError(f"no record in {body[:200]!r}")


# ---- subscribers -------------------------------------------------------------------------------


def _channel(channel: str, url: str, after: int, token: str):
    if channel == "ws":

        async def ws():
            headers = {"Authorization": f"Bearer {token}"}
            async for message in sc.ws_messages(url, after, None, headers=headers):
                if not message.startswith(b'{"control"'):
                    yield message

        return ws()
    filters = {"token": [token]}
    if channel == "sse":
        return sc.sse_records(url, after, filters)
    if channel == "jsonl":
        return sc.jsonl_records(url, after, filters)
    return sc.longpoll_records(url, after, filters, wait=1, limit=50)


class Follower:
    """One subscriber: follows from the start, reconnects to the other replica on any failure."""

    def __init__(self, channel: str, partition: int, urls: list[str], first: int) -> None:
        self.channel, self.partition = channel, partition
        self.urls, self.turn = urls, first
        self.records: list[bytes] = []
        self.cursor = -1
        self.reconnects = 0

    async def run(self) -> None:
        while True:
            url = self.urls[self.turn % len(self.urls)]
            try:
                async for record in _channel(
                    self.channel, url, self.cursor, TOKENS[self.partition]
                ):
                    self.records.append(record)
                    self.cursor = sc.seq_of(record)
            except (OSError, sc.HttpError, asyncio.IncompleteReadError, ValueError) as exc:
                del exc
            except Exception as exc:  # websockets' ConnectionClosed and the like
                if type(exc).__module__.split(".")[0] != "websockets":
                    raise
            self.turn += 1
            self.reconnects += 1
            await asyncio.sleep(0.05)


# ---- the test ----------------------------------------------------------------------------------


def test_two_replicas_survive_the_leader_s_kill(tmp_path, store_url):  # noqa: F811
    first, second = tmp_path / "a", tmp_path / "b"
    _init_store(store_url, first)
    assert (first / "keys" / "replica.secret").is_file()
    shutil.copytree(first / "keys", second / "keys")
    a = _replica(first, store_url).start()
    b = _replica(second, store_url).start()
    replicas = {a.url: a, b.url: b}
    try:
        asyncio.run(_scenario(replicas, store_url))
    finally:
        for server in replicas.values():
            server.kill()
    for partition in range(PARTITIONS):
        exported = export_and_verify(store_url, partition, tmp_path / f"export-p{partition}")
        assert exported == [line for _, line in stored_lines(store_url, partition)]


async def _scenario(replicas: dict[str, Server], store_url: str) -> None:  # noqa: F811
    urls = list(replicas)
    leaders = await asyncio.to_thread(_wait_balanced, urls, 10 * LEASE)
    victim_partition = 0
    victim_url = leaders[victim_partition]
    survivor = next(u for u in urls if u != victim_url)
    # One write through the replica that does not lead partition 0, before any load: it can
    # only succeed by forwarding (the load's writers may meet a 503 there and go elsewhere).
    await _forwarded_write(survivor, victim_partition)
    assert (await asyncio.to_thread(_forwarded, survivor))["answered"] >= 1
    acks = Acks()
    followers = [
        Follower(channel, partition, urls, first)
        for channel in sc.CHANNELS
        for partition in TENANTS
        for first in range(len(urls))
    ]
    following = [asyncio.create_task(f.run()) for f in followers]
    stop = asyncio.Event()
    writers = [
        asyncio.create_task(_write_until(stop, urls, p, p * 100 + n, acks))
        for p in TENANTS
        for n in range(WRITERS_PER_TENANT)
    ]
    await asyncio.sleep(LOAD_BEFORE_KILL)

    killed_at = time.monotonic()
    replicas[victim_url].kill()  # SIGKILL
    while not (await asyncio.to_thread(_leaders, survivor)).get(victim_partition):
        assert time.monotonic() - killed_at < 10 * LEASE, "no takeover at all"
        await asyncio.sleep(0.02)
    takeover = time.monotonic() - killed_at
    print(f"takeover after kill -9: {takeover:.3f} s (lease {LEASE} s)")

    await asyncio.sleep(LOAD_AFTER_TAKEOVER)
    stop.set()
    await asyncio.gather(*writers)
    assert all(acks.records[p] for p in TENANTS), "every partition took writes"

    # The reference: each tenant's records as the survivor's log holds them now.
    reference: dict[int, list[bytes]] = {}
    for partition in TENANTS:
        reference[partition] = [
            r
            async for r in sc.jsonl_records(
                survivor, -1, {"token": [TOKENS[partition]]}, follow=False
            )
        ]
    deadline = time.monotonic() + 30
    for follower in followers:
        last = sc.seq_of(reference[follower.partition][-1])
        while follower.cursor < last:
            assert time.monotonic() < deadline, (
                f"{follower.channel} p{follower.partition} stuck at {follower.cursor} < {last}"
            )
            await asyncio.sleep(0.05)
    for task in following:
        task.cancel()
    await asyncio.gather(*following, return_exceptions=True)

    for partition, records in reference.items():
        seqs = [sc.seq_of(r) for r in records]
        assert seqs == sorted(set(seqs)), "the reference itself is in seq order, once each"
        held = dict(zip(seqs, records, strict=True))
        for seq, record in acks.records[partition].items():
            assert held.get(seq) == record, f"acknowledged p{partition} seq {seq} is missing"
    for follower in followers:
        last = sc.seq_of(reference[follower.partition][-1])
        got = [r for r in follower.records if sc.seq_of(r) <= last]
        assert got == reference[follower.partition], (
            f"{follower.channel} on p{follower.partition}: not every record exactly once in order"
        )
    forwarded = await asyncio.to_thread(_forwarded, survivor)
    print(
        "acknowledged per partition:",
        {p: len(r) for p, r in acks.records.items()},
        "write retries:",
        acks.retries,
        "records per partition:",
        {p: len(r) for p, r in reference.items()},
        "forwarded by the survivor:",
        forwarded,
        "reconnects:",
        sorted((f.channel, f.partition, f.reconnects) for f in followers),
    )
    assert any(f.reconnects for f in followers), "subscribers of the killed replica reconnected"
    _assert_table_holds(store_url, acks)
    assert takeover <= LEASE + 1.0, f"takeover took {takeover:.3f} s, lease {LEASE} s"


async def _forwarded_write(url: str, partition: int) -> None:
    headers = {"Authorization": f"Bearer {TOKENS[partition]}", "Idempotency-Key": "through"}
    deadline = time.monotonic() + 10 * LEASE
    async with httpx.AsyncClient(timeout=10) as client:
        while True:  # a replica's route cache may lag the balance by a tick: 503, retry
            answer = await client.put(url + "/v1/sessions/through", headers=headers)
            if answer.status_code in (200, 201):
                return
            assert answer.status_code == 503 and time.monotonic() < deadline, answer.text
            await asyncio.sleep(0.1)


def _forwarded(url: str) -> dict[str, float]:
    """ledgermem_forwarded_requests_total by outcome, from the replica's /metrics."""
    found = {}
    headers = {"Authorization": f"Bearer {OPERATOR}"}  # log-wide figures need the `log` scope
    for line in httpx.get(url + "/metrics", headers=headers, timeout=5).text.splitlines():
        if line.startswith("ledgermem_forwarded_requests_total{"):
            labels, _, value = line.partition("} ")
            found[labels.split('outcome="')[1].split('"')[0]] = float(value)
    return found


def _assert_table_holds(store_url: str, acks: Acks) -> None:  # noqa: F811
    for partition, acked in acks.records.items():
        rows = stored_lines(store_url, partition)
        seqs = [seq for seq, _ in rows]
        assert seqs == list(range(len(seqs))), f"p{partition}: records are not gap-free"
        lines = dict(rows)
        for seq, record in acked.items():
            assert lines[seq] == record + b"\n", f"p{partition} seq {seq} differs in the store"
