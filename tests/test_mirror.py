"""The mirror: a partition's log as spec segment files, fed from committed lines.

The source is a real LogWriter on a MemorySink (the lines a sink would commit); the mirror must
hold exactly those bytes in exactly the spec's files, whatever pieces they arrive in.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from eventstore import layout
from eventstore.checkpoint import SigningKey
from eventstore.errors import InvalidInput, LockHeld
from eventstore.memory_sink import MemorySink
from eventstore.mirror import Mirror, MirrorDiverged
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.verify import verify_log
from eventstore.verify.report import VALID_LOCAL
from eventstore.writer import LogWriter
from tests.helpers.reproducible import FIXED_NS, CountingSalts

SEG_BITS = 3
ORIGIN = "test.example/mirror/p0"


@pytest.fixture
def source():
    key = SigningKey.generate(ORIGIN)
    sink = MemorySink()
    writer = LogWriter.create_on(
        sink, key, seg_bits=SEG_BITS, checkpoint_interval=3600.0, clock=lambda: FIXED_NS,
        salts=CountingSalts(),
    )  # fmt: skip
    yield writer, sink, key
    writer.close()


def append(writer: LogWriter, count: int, session: str = "s1") -> None:
    writer.append_batch([("t1", session, "notes", "note", {"n": i}) for i in range(count)])


def files_bytes(log_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for _, path in layout.list_segments(log_dir))


def install_newest(mirror: Mirror, sink: MemorySink) -> None:
    covering = [c for c in sink.checkpoints if c.size <= mirror.size]
    mirror.install_checkpoint(max(covering, key=lambda c: c.size).text)


def test_extend_in_pieces_equals_the_source_and_verifies(tmp_path, source):
    writer, sink, key = source
    append(writer, 30)
    writer.checkpoint()
    lines = list(sink.lines)
    mirror = Mirror.open(tmp_path / "log", ORIGIN, SEG_BITS)
    got: list[Record] = []
    mirror.add_listener(got.extend)
    for start, stop in ((0, 1), (1, 7), (7, 8), (8, 20), (20, len(lines))):
        mirror.extend(lines[start:stop])
    assert files_bytes(mirror.log_dir) == b"".join(lines)
    assert [r.seq for r in got] == list(range(len(lines)))
    assert mirror.size == len(lines)
    # Segments are the spec's: segment n holds seqs n*8 .. n*8+7.
    for n, path in layout.list_segments(mirror.log_dir):
        first = Record.from_line(path.read_bytes().split(b"\n")[0])
        assert first.seq == n << SEG_BITS and first.type == "segment.open"
    install_newest(mirror, sink)
    assert [line for _, line in LogReader(mirror.log_dir).lines()] == [x[:-1] for x in lines]
    report = verify_log(mirror.log_dir, vkey=str(key.vkey))
    assert report.verdict == VALID_LOCAL, report.error
    assert report.records == len(lines)


def test_duplicates_are_skipped_and_a_gap_or_fork_changes_nothing(tmp_path, source):
    writer, sink, _ = source
    append(writer, 12)
    lines = list(sink.lines)
    mirror = Mirror.open(tmp_path / "log", ORIGIN, SEG_BITS)
    got: list[Record] = []
    mirror.add_listener(got.extend)
    mirror.extend(lines[:10])
    assert mirror.extend(lines[:10]) == []
    new = mirror.extend(lines[5:])  # overlapping: only the tail is new
    assert [r.seq for r in new] == list(range(10, len(lines)))
    assert [r.seq for r in got] == list(range(len(lines)))
    before = files_bytes(mirror.log_dir)

    append(writer, 4)
    more = list(sink.lines)[len(lines) :]
    with pytest.raises(MirrorDiverged, match="gap"):
        mirror.extend(more[1:])
    # A fork: another writer's log of the same origin (another record at a held seq, and new
    # lines that do not chain).
    other_key = SigningKey.generate(ORIGIN)
    other_sink = MemorySink()
    other = LogWriter.create_on(
        other_sink, other_key, seg_bits=SEG_BITS, clock=lambda: FIXED_NS + 1,
        salts=CountingSalts(),
    )  # fmt: skip
    append(other, 20)
    with pytest.raises(MirrorDiverged, match="fork"):
        mirror.extend(list(other_sink.lines)[3:5])
    with pytest.raises(MirrorDiverged, match="does not continue"):
        mirror.extend(list(other_sink.lines)[len(lines) : len(lines) + 2])
    other.close()
    # A batch whose good head is followed by a damaged line is refused whole.
    damaged = more[1].replace(b'"ts":', b'"ts":1')
    with pytest.raises(MirrorDiverged):
        mirror.extend([more[0], damaged])
    assert files_bytes(mirror.log_dir) == before
    assert mirror.size == len(lines)
    assert [r.seq for r in got] == list(range(len(lines)))
    mirror.extend(more)
    assert files_bytes(mirror.log_dir) == b"".join(sink.lines)


def test_a_torn_tail_is_cut_on_open_and_refilled(tmp_path, source):
    writer, sink, _ = source
    append(writer, 10)  # 11 lines: segment 1 holds seqs 8..10
    lines = list(sink.lines)
    log_dir = tmp_path / "log"
    with Mirror.open(log_dir, ORIGIN, SEG_BITS) as mirror:
        mirror.extend(lines)
    last = log_dir / layout.segment_name(1)
    with open(last, "ab") as f:
        f.write(lines[5][:40])  # a partial line, as a crash mid-write leaves it
    mirror = Mirror.open(log_dir, ORIGIN, SEG_BITS)
    assert mirror.size == len(lines)
    assert files_bytes(log_dir) == b"".join(lines)
    # A complete line that is not the chain's continuation (damage) is cut too.
    with open(last, "ab") as f:
        f.write(lines[4])
    mirror.close()
    mirror = Mirror.open(log_dir, ORIGIN, SEG_BITS)
    assert (mirror.size, files_bytes(log_dir)) == (len(lines), b"".join(lines))
    # Cut back to a segment boundary: the empty file goes, and extend continues.
    mirror.close()
    last.write_bytes(b'{"v":1,"se')
    mirror = Mirror.open(log_dir, ORIGIN, SEG_BITS)
    assert mirror.size == 8 and not last.exists()
    mirror.extend(lines)
    assert files_bytes(log_dir) == b"".join(lines)
    mirror.close()


def test_checkpoints_only_move_forward_and_a_stale_one_goes_on_open(tmp_path, source):
    writer, sink, _ = source
    append(writer, 3)
    writer.checkpoint()
    small = sink.checkpoints[-1]
    append(writer, 3)
    writer.checkpoint()
    big = sink.checkpoints[-1]
    log_dir = tmp_path / "log"
    with Mirror.open(log_dir, ORIGIN, SEG_BITS) as mirror:
        mirror.extend(list(sink.lines))
        mirror.install_checkpoint(big.text)
        mirror.install_checkpoint(small.text)  # late, from a slower feeder: ignored
        assert (log_dir / "checkpoint").read_text() == big.text
    last = layout.list_segments(log_dir)[-1][1]
    last.write_bytes(last.read_bytes()[:-5])  # cut below the checkpoint's size
    with Mirror.open(log_dir, ORIGIN, SEG_BITS) as mirror:
        assert mirror.size < big.size and not (log_dir / "checkpoint").exists()
        mirror.extend(list(sink.lines))
        mirror.install_checkpoint(big.text)
        assert mirror.checkpoint_size == big.size


def test_another_logs_directory_is_refused(tmp_path, source):
    writer, sink, _ = source
    append(writer, 3)
    with Mirror.open(tmp_path / "log", ORIGIN, SEG_BITS) as mirror:
        mirror.extend(list(sink.lines))
    with pytest.raises(MirrorDiverged, match="origin"):
        Mirror.open(tmp_path / "log", "test.example/mirror/p1", SEG_BITS)


def test_a_second_mirror_on_one_directory_is_refused_before_it_touches_the_files(tmp_path, source):
    """Two replicas given one data directory fed one mirror twice (issue 30, item 6)."""
    writer, sink, _ = source
    append(writer, 3)
    lines = list(sink.lines)
    log_dir = tmp_path / "log"
    with Mirror.open(log_dir, ORIGIN, SEG_BITS) as mirror:
        mirror.extend(lines[:-1])
        with open(log_dir / layout.segment_name(0), "ab") as f:
            f.write(lines[-1][:10])  # a torn tail that a second open would cut
        before = files_bytes(log_dir)
        with pytest.raises(LockHeld, match="another mirror") as refused:
            Mirror.open(log_dir, ORIGIN, SEG_BITS)
        assert "pid=" in refused.value.holder
        assert files_bytes(log_dir) == before  # nothing cut, nothing written
    # Closed, the directory opens again.
    with Mirror.open(log_dir, ORIGIN, SEG_BITS) as again:
        assert again.size == len(lines) - 1


def test_a_redaction_rewrites_its_targets(tmp_path, source):
    writer, sink, key = source
    append(writer, 10)
    mirror = Mirror.open(tmp_path / "log", ORIGIN, SEG_BITS)
    mirror.extend(list(sink.lines))
    # The mirror gets the redaction record before the table's rows are rewritten.
    held = len(sink.lines)
    record = writer.redact([2, 9], "test")
    mirror.extend([record.line + b"\n"])
    assert files_bytes(mirror.log_dir) == b"".join(sink.lines)  # the sink rewrote them too
    reader = LogReader(mirror.log_dir)
    assert reader.get(2).redacted == record.seq and not reader.get(9).has_payload
    assert reader.get(3).has_payload
    append(writer, 3)
    mirror.extend(list(sink.lines)[held:])  # duplicates (rewritten lines keep their h) skipped
    writer.checkpoint()
    install_newest(mirror, sink)
    report = verify_log(mirror.log_dir, vkey=str(key.vkey))
    assert report.verdict == VALID_LOCAL, report.error
    assert [r.seq for r in report.redactions] == [record.seq]

    # A fresh mirror fed the already-rewritten rows ends with the same bytes.
    fresh = Mirror.open(tmp_path / "fresh", ORIGIN, SEG_BITS)
    fresh.extend(list(sink.lines))
    assert files_bytes(fresh.log_dir) == files_bytes(mirror.log_dir)


def test_a_redaction_interrupted_before_its_rewrite_is_finished_on_open(tmp_path, source):
    writer, sink, _ = source
    append(writer, 5)
    before = list(sink.lines)
    record = writer.redact([3], "test")
    log_dir = tmp_path / "log"
    with Mirror.open(log_dir, ORIGIN, SEG_BITS) as mirror:
        mirror.extend(before)
    # As a crash between the redaction line's write and the rewrite leaves it.
    with open(log_dir / layout.segment_name(0), "ab") as f:
        f.write(record.line + b"\n")
    with Mirror.open(log_dir, ORIGIN, SEG_BITS):
        pass
    assert files_bytes(log_dir) == b"".join(sink.lines)


def test_listeners_see_each_record_once_in_order_from_racing_feeders(tmp_path, source):
    writer, sink, _ = source
    append(writer, 300)
    lines = list(sink.lines)
    mirror = Mirror.open(tmp_path / "log", ORIGIN, SEG_BITS)
    got: list[int] = []

    def broken(records: list[Record]) -> None:
        raise RuntimeError("a listener with a bug")

    mirror.add_listener(broken)  # it must cost the others nothing
    mirror.add_listener(lambda records: got.extend(r.seq for r in records))

    def feed(step: int) -> None:
        for start in range(0, len(lines), step):
            mirror.extend(lines[: start + step][-2 * step :] if start else lines[:step])

    threads = [threading.Thread(target=feed, args=(step,)) for step in (3, 7, 11)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == list(range(len(lines)))
    assert mirror.wait_for(len(lines) - 1, timeout=0)
    assert not mirror.wait_for(len(lines), timeout=0.01)
    assert files_bytes(mirror.log_dir) == b"".join(lines)


def test_the_sinks_own_records_skip_the_line_check_but_not_the_chain(tmp_path, source):
    """The leader's sink may hand the sequencer's Records with the lines: same files, same
    listener calls, and a gap or a line that does not chain is still refused."""
    writer, sink, key = source
    append(writer, 20)
    mirror = Mirror.open(tmp_path / "log", ORIGIN, SEG_BITS)
    got: list[int] = []
    mirror.add_listener(lambda records: got.extend(r.seq for r in records))
    for line in sink.lines:
        record = Record.from_line(line)
        mirror.extend([line], [record])
        assert mirror.extend([line], [record]) == []  # a duplicate, as the tail would send
    assert files_bytes(mirror.log_dir) == b"".join(sink.lines)
    assert got == list(range(len(sink.lines)))

    append(writer, 3)
    lines = list(sink.lines)[mirror.size :]
    records = [Record.from_line(line) for line in lines]
    with pytest.raises(MirrorDiverged, match="gap"):
        mirror.extend(lines[1:], records[1:])
    stranger = replace(records[0], prev="0" * 64)
    with pytest.raises(MirrorDiverged, match="does not continue"):
        mirror.extend(lines[:1], [stranger])
    with pytest.raises(InvalidInput):
        mirror.extend(lines[:2], records[1:3])
    mirror.extend(lines, records)
    writer.checkpoint()
    install_newest(mirror, sink)
    assert verify_log(mirror.log_dir, vkey=str(key.vkey)).verdict == VALID_LOCAL
