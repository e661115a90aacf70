"""The hub against a real log writer, without sockets: each record is encoded once and shared, the
handover from the log to live loses nothing under concurrent writes, a stalled subscriber keeps a
bounded buffer and never holds up the writer, and memory per subscriber is bounded."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import tracemalloc
from dataclasses import replace

import pytest

from eventstore.checkpoint import SigningKey
from eventstore.filters import MATCH_ALL, RecordFilter
from eventstore.reader import LogReader
from eventstore.writer import Durability, LogWriter
from streams.fanout.channels.context import REFUSALS, api_error
from streams.fanout.fanout_errors import FanoutError, HubClosed, TooManySubscribers
from streams.fanout.hub import EncodedRecord, Hub
from streams.server.settings import Settings

SEED = bytes(range(32))
SESSIONS = ("s/1", "s:2", "s@3", "s+4")


class Metrics:
    def __init__(self) -> None:
        self.added = self.removed = 0
        self.sources: dict[str, int] = {"log": 0, "live": 0}

    def subscriber_added(self, channel: str) -> None:
        self.added += 1

    def subscriber_removed(self, channel: str) -> None:
        self.removed += 1

    def served(self, channel: str, source: str, n: int) -> None:
        self.sources[source] += n

    def lag(self, channel: str, records: int) -> None:
        assert records >= 0


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "log"


@pytest.fixture
def writer(log_dir):
    key = SigningKey.from_seed("test.local/hub", SEED)
    w = LogWriter.open(log_dir, key, seg_bits=6, durability=Durability.UNSAFE_NO_FSYNC)
    yield w
    w.close()


def make_hub(writer, log_dir, buffer_bytes: int | None = None, **overrides) -> Hub:
    hub = Hub(writer, LogReader(log_dir), replace(Settings(), **overrides), Metrics())
    if buffer_bytes is not None:
        hub.max_bytes = buffer_bytes
    return hub


def entries(n: int, rng: random.Random, size: int = 20) -> list[tuple]:
    return [
        (
            "t",
            rng.choice(SESSIONS),
            rng.choice(("a", "b")),
            rng.choice(("x", "y")),
            {"p": "z" * size},
        )
        for _ in range(n)
    ]


def file_lines(log_dir) -> list[tuple[int, bytes]]:
    return list(LogReader(log_dir).lines())


def matching(log_dir, after: int, where: RecordFilter) -> list[bytes]:
    return [
        line
        for seq, line in file_lines(log_dir)
        if seq > after and (where is MATCH_ALL or where.matches(EncodedRecord.from_line(seq, line)))
    ]


async def drain(subscription, until_seq: int, timeout: float = 20) -> list[EncodedRecord]:
    """Pull until the subscriber has examined everything up to `until_seq`."""
    got: list[EncodedRecord] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while subscription.cursor.position < until_seq or subscription.cursor.buffered:
        assert loop.time() < deadline, "the subscriber did not catch up"
        delivery = await subscription.next(timeout=0.2)
        assert delivery is not None
        got.extend(delivery.items)
    return got


def test_each_record_is_encoded_once_and_shared_by_every_subscriber(writer, log_dir):
    async def main():
        hub = make_hub(writer, log_dir)
        await hub.start()
        subs = [hub.subscribe(hub.head, channel="sse") for _ in range(3)]
        for sub in subs:
            assert (await sub.next()).caught_up == hub.head
        await writer.submit(entries(5, random.Random(1))).wait_async()
        batches = [(await sub.next()).items for sub in subs]
        assert [len(b) for b in batches] == [5, 5, 5]
        for a, b in zip(batches[0], batches[1], strict=True):
            assert a is b  # one object per record, not one per subscriber
            assert a.sse() is b.sse() and a.text() is b.text()
        assert batches[0][0].sse() == b"id: %d\ndata: %s\n\n" % (
            batches[0][0].seq,
            batches[0][0].line,
        )
        await hub.close()

    asyncio.run(main())


def test_catch_up_then_live_under_concurrent_writes_has_no_gap_and_no_duplicate(writer, log_dir):
    rng = random.Random(7)
    writer.append_batch(entries(150, rng))

    async def pull(sub, done: threading.Event, r: random.Random | None = None) -> list[bytes]:
        got: list[EncodedRecord] = []
        while not (
            done.is_set() and sub.cursor.position >= writer.size - 1 and not sub.cursor.buffered
        ):
            delivery = await sub.next(timeout=0.1)
            got.extend(delivery.items)
            if r is not None and r.random() < 0.3:
                await asyncio.sleep(0.01)  # a slow reader: its small buffer may overflow
        sub.close()
        return [item.line for item in got]

    async def subscriber(hub, seed: int, done: threading.Event):
        r = random.Random(seed)
        await asyncio.sleep(r.random() * 0.3)
        after = r.choice((-1, r.randint(-1, hub.head)))
        where = r.choice(
            (MATCH_ALL, RecordFilter.of(session=r.choice(SESSIONS)), RecordFilter.of(type="x"))
        )
        sub = hub.subscribe(after, where, "jsonl")
        got = await pull(sub, done, r)
        return after, where, got, sub.cursor.overflows

    async def stalled(hub, sub, after: int, done: threading.Event):
        # Subscribed before the first write, it reads nothing until every record is written and
        # published to it: at least 120 records against a buffer of 8, so it falls behind by
        # construction, however the machine schedules the writer.
        while not (done.is_set() and hub.head >= writer.size - 1):
            await asyncio.sleep(0.01)
        got = await pull(sub, done)
        return after, MATCH_ALL, got, sub.cursor.overflows

    async def main():
        hub = make_hub(writer, log_dir, subscriber_buffer=8)
        await hub.start()
        done = threading.Event()

        def write():
            w = random.Random(3)
            for _ in range(120):
                writer.append_batch(entries(w.randint(1, 12), w))
            done.set()

        start = hub.head
        behind = hub.subscribe(start, MATCH_ALL, "sse")
        thread = threading.Thread(target=write)
        thread.start()
        results = await asyncio.gather(
            stalled(hub, behind, start, done),
            *(subscriber(hub, seed, done) for seed in range(30)),
        )
        thread.join()
        await hub.close()
        return results, hub.metrics

    results, metrics = asyncio.run(main())
    for after, where, got, _ in results:
        assert got == matching(log_dir, after, where)
    assert results[0][3] > 0, "the stalled subscriber never fell behind"
    # Falling behind sends a subscriber to the log (asserted above); whether any record also went
    # out live depends on how busy the machine is, so only the log is required here.
    assert metrics.sources["log"]
    assert metrics.added == metrics.removed == 31


def test_a_stalled_subscriber_keeps_a_bounded_buffer_and_the_writer_never_waits(writer, log_dir):
    async def main():
        hub = make_hub(writer, log_dir, subscriber_buffer=16)
        await hub.start()
        start = hub.head
        stalled = hub.subscribe(start, channel="sse")
        most = 0
        rng = random.Random(5)
        for _ in range(200):  # the writer goes on while nobody pulls from `stalled`
            await writer.submit(entries(10, rng, size=200)).wait_async()
            most = max(most, stalled.cursor.buffered)
        assert most <= 16
        assert stalled.cursor.buffered_bytes <= hub.max_bytes
        assert stalled.cursor.overflows >= 1
        got = await drain(stalled, writer.size - 1)
        assert [item.line for item in got] == matching(log_dir, start, MATCH_ALL)
        assert stalled.cursor.live
        await hub.close()

    asyncio.run(main())


def test_memory_per_subscriber_is_bounded_however_far_it_falls_behind(writer, log_dir):
    """Stalled subscribers, each on its own session so that no two buffers share a record. What a
    group of them holds is measured as what closing them frees: with a buffer just short of its
    byte bound, and after falling 10 bounds behind (the buffer was dropped at the overflow)."""
    k, record_bytes, max_bytes = 40, 1000, 32 * 1024
    fits = max_bytes // (record_bytes + 100)  # the line holds more than the payload

    def publish(sessions: range, per_session: int):
        payload = {"p": "z" * (record_bytes - 300)}
        batch = [("t", f"k{i}", "a", "x", payload) for i in sessions for _ in range(per_session)]
        return writer.submit(batch).wait_async()

    async def held_by(subs) -> float:
        await writer.submit([("t", "other", "a", "x", {})]).wait_async()  # nothing else holds them
        await asyncio.sleep(0.05)
        gc.collect()
        before, count = tracemalloc.get_traced_memory()[0], len(subs)
        while subs:
            subs.pop().close()
        gc.collect()
        return (before - tracemalloc.get_traced_memory()[0]) / count

    async def main():
        hub = make_hub(writer, log_dir, buffer_bytes=max_bytes, subscriber_buffer=1024)
        await hub.start()
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        full = [hub.subscribe(hub.head, RecordFilter.of(session=f"k{i}")) for i in range(k)]
        idle = (tracemalloc.get_traced_memory()[0] - base) / k
        behind = [
            hub.subscribe(hub.head, RecordFilter.of(session=f"k{i}")) for i in range(k, 2 * k)
        ]
        await publish(range(2 * k), fits)
        assert all(s.cursor.buffered == fits and not s.cursor.overflows for s in full)
        held_full = await held_by(full)
        for _ in range(10):
            await publish(range(k, 2 * k), fits)
        assert all(s.cursor.overflows for s in behind)
        held_behind = await held_by(behind)
        tracemalloc.stop()
        await hub.close()
        return idle, held_full, held_behind

    idle, full, behind = asyncio.run(main())
    print(
        f"memory per subscriber: idle {idle:.0f} B; buffer at its bound ({max_bytes} B of "
        f"records) {full:.0f} B; after falling 10 bounds behind {behind:.0f} B"
    )
    assert idle < 4096
    assert max_bytes / 2 < full < 1.5 * max_bytes  # the records themselves, plus a little
    assert behind < full


def test_the_per_client_limit_answers_429_and_a_closed_subscription_frees_its_place(
    writer, log_dir
):
    async def main():
        hub = make_hub(writer, log_dir, max_subscribers_per_client=2)
        await hub.start()
        a = hub.subscribe(-1, client="10.0.0.1")
        hub.subscribe(-1, client="10.0.0.1")
        hub.subscribe(-1, client="10.0.0.2")
        with pytest.raises(TooManySubscribers) as refused:
            hub.subscribe(-1, client="10.0.0.1")
        assert api_error(refused.value).status == 429
        a.close()
        a.close()  # idempotent: frees one place, once
        hub.subscribe(-1, client="10.0.0.1")
        with pytest.raises(TooManySubscribers):
            hub.subscribe(-1, client="10.0.0.1")
        await hub.close()

    asyncio.run(main())


def test_close_ends_every_subscription(writer, log_dir):
    async def main():
        hub = make_hub(writer, log_dir)
        await hub.start()
        sub = hub.subscribe(hub.head)
        assert (await sub.next()).caught_up is not None
        waiting = asyncio.ensure_future(sub.next())
        await asyncio.sleep(0.01)
        await hub.close()
        assert await asyncio.wait_for(waiting, 5) is None
        with pytest.raises(HubClosed) as refused:
            hub.subscribe(-1)
        assert api_error(refused.value).status == 503

    asyncio.run(main())


def test_the_hub_refuses_with_fanout_errors_that_carry_a_code_and_a_message(writer, log_dir):
    async def main():
        hub = make_hub(writer, log_dir, max_subscribers_per_client=1)
        await hub.start()
        slot = hub.reserve("10.0.0.1")
        with pytest.raises(TooManySubscribers) as full:
            hub.reserve("10.0.0.1")
        await hub.close()
        with pytest.raises(HubClosed) as reserving:
            hub.reserve("10.0.0.2")
        with pytest.raises(HubClosed) as subscribing:
            hub.subscribe(-1, slot=slot)
        return full.value, reserving.value, subscribing.value

    full, reserving, subscribing = asyncio.run(main())
    assert full.code == "too_many_subscribers"
    assert full.message == str(full)
    assert full.message.startswith("10.0.0.1 already holds 1 subscriptions")
    for closed in (reserving, subscribing):
        assert closed.code == "shutting_down"
        assert closed.message == "the service is shutting down; reconnect shortly"


def _refusal_kinds(kind: type[FanoutError]) -> list[type[FanoutError]]:
    return [kind, *(k for sub in kind.__subclasses__() for k in _refusal_kinds(sub))]


def test_every_refusal_of_the_hub_maps_to_an_http_status_and_a_websocket_close_code():
    kinds = _refusal_kinds(FanoutError)
    assert {HubClosed, TooManySubscribers} <= set(kinds)
    assert set(REFUSALS) == set(kinds), "a FanoutError without its own HTTP and WebSocket answer"
    assert REFUSALS[HubClosed] == (503, 1013)
    assert REFUSALS[TooManySubscribers] == (429, 1008)
