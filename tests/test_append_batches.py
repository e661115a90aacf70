"""Appends acknowledged in batches: the append_async calls of one event-loop turn go to the
writer together, each keeping its own records and its own errors; threads share one settlement
per batch; the sequencer's one Merkle range still gives every root the format names."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading

import orjson
import pytest

from eventstore.checkpoint import SigningKey, parse_checkpoint
from eventstore.entry import Entry
from eventstore.errors import StalePosition, WriterClosed
from eventstore.memory_sink import MemorySink
from eventstore.merkle import CompactRange, root
from eventstore.sequencer import Sequencer, SequencerState, StartSegment
from eventstore.writer import LogWriter
from tests.helpers.reproducible import FIXED_NS, CountingSalts

WAIT = 30.0
EVENT = ("acme", "s-1", "messages", "item.added")


@pytest.fixture(scope="module")
def key():
    return SigningKey.generate("test.local/batches")


@pytest.fixture
def sink():
    return MemorySink()


@pytest.fixture
def writer(key, sink):
    log = LogWriter.create_on(sink, key, seg_bits=16)
    yield log
    if not log.closed:
        log.close()


async def _one_turn(writer: LogWriter, calls: list[dict]) -> list[object]:
    """Start every call in the same turn of this loop; what each returned or raised."""
    tasks = [
        asyncio.ensure_future(
            writer.append_async(*EVENT, {"n": n}, expected_size=call.get("expected_size"))
        )
        for n, call in enumerate(calls)
    ]
    return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT)


def test_calls_of_one_turn_are_one_commit_in_call_order(writer, sink):
    commits = len(sink.batches)
    results = asyncio.run(_one_turn(writer, [{}] * 40))
    assert [r.payload for r in results] == [{"n": n} for n in range(40)]
    first = results[0].seq
    assert [r.seq for r in results] == list(range(first, first + 40))
    assert len(sink.batches) == commits + 1  # one submit, one group commit
    assert writer.size == first + 40


def test_a_stale_expected_size_fails_that_call_alone(writer, sink):
    size = writer.next_seq
    calls = [{}, {"expected_size": size}, {"expected_size": size + 1}, {}]
    results = asyncio.run(_one_turn(writer, calls))
    # Call 1 expected the size before call 0 was assigned: stale, nothing of it queued. Call 2
    # expected the size after call 0: it sees the calls of its own turn before it.
    assert isinstance(results[1], StalePosition)
    assert [r.seq for r in (results[0], results[2], results[3])] == [size, size + 1, size + 2]
    assert [r.payload for r in (results[0], results[2], results[3])] == [
        {"n": 0},
        {"n": 2},
        {"n": 3},
    ]
    assert writer.size == size + 3
    lines = [orjson.loads(line) for line in sink.lines[size:]]
    assert [line["payload"] for line in lines] == [{"n": 0}, {"n": 2}, {"n": 3}]


def test_a_cancelled_caller_leaves_the_others_of_its_batch_alone(writer):
    async def main():
        tasks = [asyncio.ensure_future(writer.append_async(*EVENT, {"n": n})) for n in range(5)]
        await asyncio.sleep(0)  # every call has queued its entry
        tasks[2].cancel()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT)
        return done

    results = asyncio.run(main())
    assert isinstance(results[2], asyncio.CancelledError)
    kept = [results[n] for n in (0, 1, 3, 4)]
    assert [r.payload for r in kept] == [{"n": n} for n in (0, 1, 3, 4)]
    writer.wait_for(kept[-1].seq, WAIT)


def test_a_batch_async_call_gets_its_own_consecutive_records(writer):
    async def main():
        entries = [Entry(*EVENT, {"b": n}) for n in range(3)]
        return await asyncio.gather(
            writer.append_async(*EVENT, {"n": 0}),
            writer.append_batch_async(entries),
            writer.append_batch_async([]),
            writer.append_async(*EVENT, {"n": 1}),
        )

    single, batch, empty, other = asyncio.run(main())
    assert empty == []
    assert [r.seq for r in batch] == [single.seq + 1, single.seq + 2, single.seq + 3]
    assert [r.payload for r in batch] == [{"b": 0}, {"b": 1}, {"b": 2}]
    assert other.seq == single.seq + 4


def test_every_call_of_a_turn_gets_the_error_of_a_closed_writer(writer):
    writer.close()
    results = asyncio.run(_one_turn(writer, [{}] * 3))
    assert all(isinstance(r, WriterClosed) for r in results)


def test_tasks_on_several_loops_and_threads_share_batches_and_all_land_once(writer):
    per_worker = 60
    seen: list[int] = []
    writer.add_listener(lambda records: seen.extend(r.seq for r in records))

    def loop_worker(k: int) -> None:
        async def main():
            await asyncio.gather(
                *(writer.append_async(*EVENT, {"k": k, "i": i}) for i in range(per_worker))
            )

        asyncio.run(main())

    def thread_worker(k: int) -> None:
        for i in range(per_worker):
            writer.append(*EVENT, {"k": k, "i": i})

    workers = [threading.Thread(target=loop_worker, args=(k,)) for k in range(3)]
    workers += [threading.Thread(target=thread_worker, args=(k,)) for k in range(3, 8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(WAIT)
    writer.close()
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert writer.size >= 8 * per_worker


# ---- one Merkle range: the roots the format names ----------------------------------------------


def test_the_tail_of_a_compact_range_is_the_range_of_its_last_leaves():
    leaves = [hashlib.sha256(b"%d" % n).digest() for n in range(70)]
    for bits in (2, 3, 4):
        size_s = 1 << bits
        tree = CompactRange()
        for n, leaf in enumerate(leaves):
            tree.append(leaf)
            start = (n + 1 - 1) // size_s * size_s  # the segment the last leaf is in
            if (n + 1) % size_s:  # the segment is not full: its leaves are a tail of the range
                tail = tree.tail(start)
                assert tail.size == n + 1 - start
                assert tail.root() == root(leaves[start : n + 1])
    with pytest.raises(ValueError):
        tree.tail(3)  # not where one of its subtrees begins


def _sealed_state(key, seg_bits: int, segments: int):
    """A sequencer's lines up to the seal of segment `segments - 1`, and the state recovery
    builds when the crash came before the next segment.open (the last segment full)."""
    sequencer = Sequencer(
        key,
        SequencerState.empty(key.origin, seg_bits),
        clock=lambda: FIXED_NS,
        salts=CountingSalts(),
    )
    lines = [sequencer.header(sequencer.now()).line]
    size_s = 1 << seg_bits
    for op in sequencer.assign(
        [Entry(*EVENT, {"n": n}) for n in range(segments * size_s)], sequencer.now()
    )[0]:
        lines += [op.line] if isinstance(op, StartSegment) else op.lines
    lines = lines[: segments * size_s]  # through the last seal: its open is lost
    assert b'"segment.seal"' in lines[-1]
    leaves = [bytes.fromhex(orjson.loads(line)["h"]) for line in lines]
    tree, segment_tree = CompactRange(), CompactRange()
    for leaf in leaves:
        tree.append(leaf)
    for leaf in leaves[-size_s:]:
        segment_tree.append(leaf)
    state = SequencerState(seg_bits, len(leaves), leaves[-1], segments - 1, tree, segment_tree)
    return state, leaves


@pytest.mark.parametrize("segments", [1, 2, 3, 4])
def test_resuming_after_a_full_sealed_segment_opens_the_next_with_its_root(key, segments):
    seg_bits = 2
    state, leaves = _sealed_state(key, seg_bits, segments)
    sequencer = Sequencer(key, state, clock=lambda: FIXED_NS, salts=CountingSalts())
    last = (segments - 1) << seg_bits
    assert sequencer.state().segment_tree.root() == root(leaves[last:])
    ops, _ = sequencer.resume(sequencer.now(), {"clean": False}, None)
    opened = orjson.loads(ops[0].line)["payload"]
    assert base64.b64decode(opened["prev_segment_root"]) == root(leaves[last:])
    assert parse_checkpoint(opened["checkpoint"], key.vkey).root == root(leaves)
    # From here on the segment tree is the tail of the log's range again.
    assert sequencer.state().segment_tree.size == 2  # the open and log.resume
