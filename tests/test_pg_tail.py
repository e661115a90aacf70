"""The store tail: rows committed by another connection reach every partition's mirror and its
listeners exactly once, in seq order, with LISTEN, without it, and across lost wake-ups.

The rows come from tests/helpers/pgseed.py (a real writer's lines, loaded by a test-only
connection that also NOTIFYs as the sink does).
"""

from __future__ import annotations

import time

import pytest

from eventstore.mirror import Mirror
from eventstore.pg.schema import connect
from eventstore.pg.tail import StoreTail
from eventstore.verify import verify_log
from eventstore.verify.report import VALID_LOCAL
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pgseed import seeded_store

WAIT = 20.0  # seconds: generous; nothing here asserts speed


class Seen:
    """What one mirror's listener got, as seqs."""

    def __init__(self, mirror: Mirror) -> None:
        self.seqs: list[int] = []
        mirror.add_listener(lambda records: self.seqs.extend(r.seq for r in records))


def mirrors_for(tmp_path, info) -> dict[int, Mirror]:
    return {
        n: Mirror.open(tmp_path / f"replica/p{n}/log", f"{info.origin}/p{n}", info.seg_bits)
        for n in range(info.partitions)
    }


def wait_size(mirror: Mirror, size: int) -> None:
    assert mirror.wait_for(size - 1, timeout=WAIT), f"mirror stuck at {mirror.size}, want {size}"


def test_committed_rows_reach_mirrors_and_listeners_once_in_order(pg_url, tmp_path):  # noqa: F811
    info, seeds = seeded_store(pg_url, tmp_path / "data", partitions=2, seg_bits=3)
    seeds[0].append(5)
    seeds[0].publish()  # before the tail starts: found by its first sync
    mirrors = mirrors_for(tmp_path, info)
    seen = {n: Seen(m) for n, m in mirrors.items()}
    # A poll far longer than the test: only the NOTIFY wake-ups can deliver in time.
    tail = StoreTail(pg_url, mirrors, poll_interval=600.0)
    tail.start()
    try:
        wait_size(mirrors[0], len(seeds[0].lines))
        for round_ in range(8):
            for seed in seeds:
                seed.append(3 + round_, session=f"s{round_}")
                size = seed.publish()
                wait_size(mirrors[seed.partition], size)
    finally:
        tail.stop()
    for n, seed in enumerate(seeds):
        assert seen[n].seqs == list(range(len(seed.lines)))
        mirror_bytes = b"".join(
            p.read_bytes() for p in sorted(mirrors[n].log_dir.glob("seg-*.jsonl"))
        )
        assert mirror_bytes == b"".join(seed.lines)
        report = verify_log(mirrors[n].log_dir, vkey=info.vkeys[n])
        assert report.verdict == VALID_LOCAL, report.error
    assert not tail.failed


@pytest.mark.parametrize("lose", ["terminate-listener", "notify-off"])
def test_lost_wake_ups_are_covered_by_the_poll(pg_url, tmp_path, lose):  # noqa: F811
    info, seeds = seeded_store(pg_url, tmp_path / "data", partitions=1, seg_bits=3)
    seed = seeds[0]
    mirrors = mirrors_for(tmp_path, info)
    seen = Seen(mirrors[0])
    listen = lose != "notify-off"
    tail = StoreTail(pg_url, mirrors, poll_interval=0.2, listen=listen)
    tail.start()
    admin = connect(pg_url)
    try:
        killed_pids: set[int] = set()
        for round_ in range(6):
            if lose == "terminate-listener":
                pid = _wait_new_pid(tail, killed_pids)
                killed_pids.add(pid)
                killed = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
                assert killed
            seed.append(4, session=f"s{round_}")
            # The wake-up goes nowhere: its listener is dead, or no one listens.
            size = seed.publish(notify=not listen)
            wait_size(mirrors[0], size)
    finally:
        admin.close()
        tail.stop()
    assert seen.seqs == list(range(len(seed.lines)))
    assert not tail.failed


def _wait_new_pid(tail: StoreTail, killed: set[int]) -> int:
    """The backend of the tail's listening connection, once it is not one killed before."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        pid = tail.backend_pid
        if pid is not None and pid not in killed and tail._fed:
            return pid
        time.sleep(0.02)
    raise AssertionError("the tail never reconnected")


def test_sync_is_blocking_and_deleted_rows_stop_the_partition(pg_url, tmp_path):  # noqa: F811
    info, seeds = seeded_store(pg_url, tmp_path / "data", partitions=1, seg_bits=3)
    seed = seeds[0]
    seed.append(20)
    size = seed.publish()
    mirrors = mirrors_for(tmp_path, info)
    tail = StoreTail(pg_url, mirrors)
    assert tail.sync(0) == size
    assert (mirrors[0].log_dir / "checkpoint").exists()
    seed.append(5)
    seed.publish()
    conn = connect(pg_url)
    try:
        conn.execute("DELETE FROM lm_record WHERE partition = 0 AND seq = %s", (size + 1,))
    finally:
        conn.close()
    tail.start()
    try:
        deadline = time.monotonic() + WAIT
        while 0 not in tail.failed and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        tail.stop()
    assert "rows missing" in str(tail.failed[0])
    assert mirrors[0].size == size + 1  # up to the hole, nothing beyond it


def test_a_hub_fed_by_a_mirror_delivers_every_record_once_in_order(pg_url, tmp_path):  # noqa: F811
    """The mirror stands where the hub had a LogWriter: catch-up reads its files, live records
    come from its listener, and the handover loses and repeats nothing."""
    import asyncio
    from dataclasses import replace

    from eventstore.reader import LogReader
    from streams.fanout.hub import Hub
    from streams.server.settings import Settings

    info, seeds = seeded_store(pg_url, tmp_path / "data", partitions=1, seg_bits=3)
    seed = seeds[0]
    seed.append(30)
    seed.publish()
    mirrors = mirrors_for(tmp_path, info)
    tail = StoreTail(pg_url, mirrors, poll_interval=0.3)
    tail.sync(0)
    mirror = mirrors[0]

    async def main() -> list[int]:
        hub = Hub(mirror, LogReader(mirror.log_dir), replace(Settings(), subscriber_buffer=16))
        await hub.start()
        sub = hub.subscribe(-1, channel="jsonl")
        tail.start()
        loop = asyncio.get_running_loop()
        publisher = loop.run_in_executor(None, publish_rounds)
        got: list[int] = []
        deadline = loop.time() + WAIT
        while (
            not publisher.done() or sub.cursor.position < len(seed.lines) - 1 or sub.cursor.buffered
        ):
            assert loop.time() < deadline, "the subscriber did not catch up"
            delivery = await sub.next(timeout=0.2)
            got.extend(item.seq for item in delivery.items)
        await publisher
        await hub.close()
        return got

    def publish_rounds() -> None:
        for round_ in range(10):
            seed.append(5, session=f"s{round_}")
            seed.publish()
            time.sleep(0.02)

    try:
        got = asyncio.run(main())
    finally:
        tail.stop()
    assert got == list(range(len(seed.lines)))


def test_stop_ends_the_thread_while_it_waits_for_a_wake_up(pg_url, tmp_path):  # noqa: F811
    import threading

    info, _ = seeded_store(pg_url, tmp_path / "data", partitions=1)
    tail = StoreTail(pg_url, mirrors_for(tmp_path, info), poll_interval=600.0)
    tail.start()
    _wait_new_pid(tail, set())  # listening, with no poll due for ten minutes
    stopper = threading.Thread(target=tail.stop)
    stopper.start()
    stopper.join(WAIT)
    assert not stopper.is_alive(), "stop() hung while the tail waited for a NOTIFY"
