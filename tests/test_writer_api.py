"""The writer's API: durable appends from threads and asyncio, batches, rotation, listeners."""

from __future__ import annotations

import asyncio
import threading

import pytest

from eventstore import layout
from eventstore.checkpoint import SigningKey, parse_checkpoint
from eventstore.errors import InvalidPayload, WriterClosed
from eventstore.reader import LogReader
from eventstore.store import open_log
from eventstore.writer import LogWriter


@pytest.fixture
def key():
    return SigningKey.generate("test.local/api")


@pytest.fixture
def writer(tmp_path, key):
    log = LogWriter.open(tmp_path / "log", key, seg_bits=3)
    yield log
    if not log.closed:
        log.close()


def _event_payloads(reader: LogReader) -> list[object]:
    return [r.payload for r in reader.records() if not r.is_control]


def test_append_returns_the_durable_record_with_the_next_seq(writer):
    before = writer.size
    record = writer.append("acme", "s-1", "messages", "item.added", {"text": "hello"})
    assert record.seq == before
    assert writer.size == before + 1
    assert LogReader(writer.log_dir).get(record.seq).line == record.line


def test_batch_gets_consecutive_seqs_even_across_a_rotation(writer):
    records = writer.append_batch(
        [("acme", "s", "findings", "item.added", {"i": i}) for i in range(10)]
    )
    events = [r.seq for r in records]
    assert events == sorted(events)
    assert [r.payload for r in records] == [{"i": i} for i in range(10)]
    assert _event_payloads(LogReader(writer.log_dir)) == [{"i": i} for i in range(10)]


def test_batch_with_one_bad_entry_appends_nothing(writer):
    before = writer.size
    with pytest.raises(InvalidPayload):
        writer.append_batch(
            [("a", "s", "x", "t", {"ok": 1}), ("a", "s", "x", "t", {"bad": float("nan")})]
        )
    assert writer.size == before


def test_threads_and_tasks_appending_together_all_land_exactly_once(writer):
    def thread_body(n: int) -> None:
        for i in range(40):
            writer.append("acme", f"thread-{n}", "messages", "item.added", {"n": n, "i": i})

    async def task_body(n: int) -> None:
        for i in range(40):
            entry = ("acme", f"task-{n}", "messages", "item.added", {"n": n, "i": i})
            await writer.submit([entry]).wait_async()

    async def tasks() -> None:
        await asyncio.gather(*(task_body(n) for n in range(16)))

    threads = [threading.Thread(target=thread_body, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    asyncio.run(tasks())
    for t in threads:
        t.join()
    records = [r for r in LogReader(writer.log_dir).records() if not r.is_control]
    assert len(records) == 24 * 40
    seen = {(r.session, r.payload["i"]) for r in records}
    assert len(seen) == 24 * 40
    for session in {r.session for r in records}:
        order = [r.payload["i"] for r in records if r.session == session]
        assert order == list(range(40)), "each appender's records are in its own order"


def test_async_batch_and_expected_size(writer):
    async def body():
        size = writer.size
        records = await writer.submit(
            [("a", "s", "x", "t", {"i": 1}), ("a", "s", "x", "t", {"i": 2})], expected_size=size
        ).wait_async()
        return size, records

    size, records = asyncio.run(body())
    assert records[0].seq == size


def test_rotation_keeps_every_segment_at_S_records_with_open_and_seal(writer):
    writer.append_batch([("a", "s", "x", "t", {"i": i}) for i in range(50)])
    writer.close()
    segments = layout.list_segments(writer.log_dir)
    assert len(segments) > 5
    reader = LogReader(writer.log_dir)
    for n, path in segments[:-1]:
        lines = path.read_bytes().splitlines()
        assert len(lines) == 8
        first, last = reader.get(n * 8), reader.get(n * 8 + 7)
        assert (first.type, last.type) == ("segment.open", "segment.seal")


def test_checkpoint_file_signs_everything_at_close(writer, key):
    writer.append("a", "s", "x", "t", {"i": 1})
    writer.close()
    cp = parse_checkpoint((writer.log_dir / "checkpoint").read_text(), key.vkey)
    reader = LogReader(writer.log_dir)
    assert cp.size == reader.head() + 1
    assert cp.root == reader.root(cp.size)
    assert reader.get(reader.head()).type == "log.close"


def test_checkpoint_follows_records_within_the_interval_even_when_they_stop(tmp_path, key):
    log = LogWriter.open(tmp_path / "log", key, seg_bits=4, checkpoint_interval=0.05)
    try:
        log.append("a", "s", "x", "t", {"i": 1})
        size = log.size
        assert log.wait_for(size + 10, timeout=0.5) is False  # nothing else arrives...
        cp = parse_checkpoint((log.log_dir / "checkpoint").read_text(), key.vkey)
        assert cp.size == size  # ...yet the checkpoint caught up
    finally:
        log.close()


def test_listeners_see_each_durable_record_once_in_order(writer):
    seen: list[int] = []
    writer.add_listener(lambda records: seen.extend(r.seq for r in records))
    start = writer.size
    for i in range(20):
        writer.append("a", "s", "x", "t", {"i": i})
    assert seen == list(range(start, writer.size))


def test_closed_writer_refuses_appends(writer):
    writer.close()
    with pytest.raises(WriterClosed):
        writer.append("a", "s", "x", "t", {})


def test_open_log_creates_a_private_key_outside_the_log_directory(tmp_path):
    log, info = open_log(tmp_path / "data")
    try:
        assert info.created
        assert info.path.stat().st_mode & 0o777 == 0o600
        assert (tmp_path / "data" / "log") not in info.path.parents
        assert not any(p.suffix == ".key" for p in (tmp_path / "data" / "log").rglob("*"))
    finally:
        log.close()
    again, info2 = open_log(tmp_path / "data")
    again.close()
    assert not info2.created
    assert str(info2.key.vkey) == str(info.key.vkey)
