"""What the writer does with each answer of a DurabilitySink, and how its waiters are woken.

The sinks here are real implementations of the protocol (MemorySink, with a gate that holds a
commit until the test opens it, and an answer the test picks), standing in for storage whose
commit is a database transaction. Whatever the answer, nobody may wait forever.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from eventstore.checkpoint import SigningKey
from eventstore.errors import WriterClosed
from eventstore.memory_sink import MemorySink
from eventstore.sink import COMMITTED, CommitRefused, CommitUnknown, Refused, Unknown
from eventstore.writer import LogWriter

EVENT = ("acme", "s-1", "messages", "item.added", {"text": "hello"})
WAIT = 10  # seconds: far beyond any honest commit here; reaching it is the failure


class GatedSink(MemorySink):
    """Holds each commit at a gate while `gated`, then answers `answer` (or raises it)."""

    def __init__(self) -> None:
        super().__init__()
        self.gated = False
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.answer: object = COMMITTED
        self.abandoned = 0

    def commit(self, batch):
        if self.gated:
            self.entered.set()
            assert self.gate.wait(WAIT)
        if isinstance(self.answer, BaseException):
            raise self.answer
        if self.answer is not COMMITTED:
            return self.answer
        return super().commit(batch)

    def abandon(self) -> None:
        self.abandoned += 1


@pytest.fixture
def sink():
    return GatedSink()


@pytest.fixture
def writer(sink):
    writer = LogWriter.create_on(sink, SigningKey.generate("test.local/sinks"), seg_bits=3)
    yield writer
    closer = threading.Thread(target=writer.close)
    closer.start()
    closer.join(WAIT)
    assert not closer.is_alive(), "close() hung after the sink's answer"


@pytest.mark.parametrize(
    ("answer", "error"),
    [(Refused("pid 4242 on host-b"), CommitRefused), (Unknown("connection reset"), CommitUnknown)],
)
def test_an_answer_other_than_committed_stops_appends_with_a_typed_error(
    writer, sink, answer, error
):
    writer.append(*EVENT)
    durable = writer.size
    seen: list = []
    writer.add_listener(seen.append)
    sink.answer = answer
    with pytest.raises(error) as raised:
        writer.append(*EVENT)
    assert isinstance(raised.value, WriterClosed)
    if isinstance(answer, Refused):
        assert raised.value.owner == answer.owner
        assert answer.owner in str(raised.value)
    with pytest.raises(error):
        writer.append(*EVENT)  # refused at once, nothing queued
    with pytest.raises(error):
        writer.wait_for(durable, timeout=WAIT)
    assert writer.size == durable
    assert seen == []  # records that were not committed are never published
    assert sink.abandoned == 0  # an answer is not a failed write: nothing to cut back


def test_every_waiter_queued_behind_a_refused_commit_gets_the_error(writer, sink):
    sink.gated = True
    first = writer.submit([EVENT])
    assert sink.entered.wait(WAIT)
    queued = [writer.submit([EVENT]) for _ in range(5)]
    sink.answer = Refused("another writer")
    sink.gate.set()
    for pending in [first, *queued]:
        with pytest.raises(CommitRefused):
            pending.wait(timeout=WAIT)


def test_a_commit_that_raises_is_a_failed_write_and_the_sink_abandons_it(writer, sink):
    sink.answer = OSError(5, "Input/output error")
    with pytest.raises(WriterClosed, match="failed write .*Input/output error"):
        writer.append(*EVENT)
    assert sink.abandoned == 1
    with pytest.raises(WriterClosed):
        writer.append(*EVENT)


# ---- Pending: any number of async waiters, on any loops --------------------------------------


def _waiters_on_two_loops(writer, sink):
    """Two tasks on this thread's loop and one on a loop in another thread await one Pending,
    all registered before the commit ends; returns what each got (records or the exception)."""
    sink.gated = True
    pending = writer.submit([EVENT])
    assert sink.entered.wait(WAIT)
    registered = threading.Event()
    other: list = []

    def other_loop() -> None:
        async def wait() -> None:
            task = asyncio.ensure_future(pending.wait_async())
            await asyncio.sleep(0)  # the task has run up to its future
            registered.set()
            other.append(await asyncio.wait_for(task, WAIT))

        try:
            asyncio.run(wait())
        except Exception as exc:
            other.append(exc)

    thread = threading.Thread(target=other_loop)
    thread.start()

    async def here() -> list:
        tasks = [asyncio.ensure_future(pending.wait_async()) for _ in range(2)]
        await asyncio.sleep(0)
        assert await asyncio.to_thread(registered.wait, WAIT)
        sink.gate.set()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT)

    results = asyncio.run(here())
    thread.join(WAIT)
    return pending, results + other


def test_every_async_waiter_on_any_loop_sees_the_records_once_durable(writer, sink):
    pending, results = _waiters_on_two_loops(writer, sink)
    assert len(results) == 3
    for result in results:
        assert result == pending.records
        assert result[0].seq == pending.records[0].seq


def test_every_async_waiter_on_any_loop_sees_the_error_when_the_write_fails(writer, sink):
    sink.answer = Refused("another writer")
    _, results = _waiters_on_two_loops(writer, sink)
    assert len(results) == 3
    assert all(isinstance(result, CommitRefused) for result in results), results
