"""Readers while redactions rewrite segments (issue 30, item 1): every read equals the file.

A redaction replaces a segment file with one whose lines after the first target sit at other
offsets. Every kind of reader (get by seq, ranges of lines, leaf hashes and proofs, a fresh
reader with a saved index) must then read bytes that are a line's start in the file it reads:
never a 500 from a line cut in the middle, never "seq N is not in the log" for a durable seq.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from eventstore import layout, segfile
from eventstore import reader as reader_module
from eventstore.checkpoint import SigningKey
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.writer import Durability, LogWriter

SEED = bytes(range(32))


@pytest.fixture
def small_stride(monkeypatch):
    monkeypatch.setattr(reader_module, "INDEX_STRIDE", 4)


def _writer(path: Path, seg_bits: int = 6) -> LogWriter:
    key = SigningKey.from_seed("test.local/rewrites", SEED)
    return LogWriter.open(path, key, seg_bits=seg_bits, durability=Durability.UNSAFE_NO_FSYNC)


def _final_lines(log_dir: Path) -> dict[int, bytes]:
    return {seq: line for seq, line in LogReader(log_dir).lines()}


def _check_line(seq: int, line: bytes, final: dict[int, bytes]) -> str | None:
    """None if `line` is seq's line as the file held it at some moment: its final bytes, or the
    bytes it had before a redaction (which gives the final bytes when redacted again)."""
    want = final[seq]
    if line == want:
        return None
    try:
        record = Record.from_line(line)
    except Exception as exc:  # noqa: BLE001  # why: any parse failure is the defect being looked for
        return f"seq {seq}: not a line ({exc!r}): {line[:60]!r}"
    if record.seq != seq:
        return f"seq {seq}: got the line of seq {record.seq}"
    done = Record.from_line(want)
    if done.redacted is None or record.redacted_line(done.redacted) != want:
        return f"seq {seq}: bytes the file never held: {line[:60]!r}"
    return None


def test_every_reader_kind_reads_the_file_while_appends_and_rewrites_interleave(
    tmp_path, small_stride
):
    log_dir, index_dir = tmp_path / "log", tmp_path / "index"
    writer = _writer(log_dir)
    for i in range(40):
        writer.append("a", f"s{i % 3}", "m", "item.added", {"i": i, "pad": "x" * (i % 50)})
    shared = LogReader(log_dir, index_dir=index_dir)
    seen: list[tuple[int, bytes]] = []  # (seq, line) as read
    hashes: list[tuple[int, list[bytes]]] = []  # (lo, leaf hashes from lo) as read
    errors: list[str] = []
    done = threading.Event()
    lock = threading.Lock()

    def read(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            head = writer.size
            kind = rng.randrange(5)
            reader = shared if kind < 4 else LogReader(log_dir, index_dir=index_dir)
            lo = rng.randrange(head)
            hi = min(head, lo + rng.randrange(1, 70))
            try:
                if kind == 0 or kind == 4:
                    got = [(lo, reader.get(lo).line)]
                elif kind == 1:
                    got = list(reader.lines(lo - 1, hi))
                    if [s for s, _ in got] != list(range(lo, hi)):
                        errors.append(f"lines({lo - 1}, {hi}) gave seqs {[s for s, _ in got]}")
                elif kind == 2:
                    leaves = reader.leaf_hashes(lo, hi)
                    with lock:
                        hashes.append((lo, leaves))
                    got = []
                else:
                    reader.inclusion_proof(lo, head)
                    got = []
            except Exception as exc:  # noqa: BLE001  # why: every failure is reported
                errors.append(f"kind {kind} [{lo}, {hi}) of {head}: {exc!r}")
                continue
            with lock:
                seen.extend(got)

    threads = [threading.Thread(target=read, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    events: list[int] = []
    try:
        for i in range(500):
            record = writer.append(
                "a", f"s{i % 3}", "m", "item.added", {"i": i, "pad": "y" * rng.randrange(80)}
            )
            events.append(record.seq)
            if i % 4 == 0 and len(events) > 2:
                # Mostly the open segment (its readers index it as it grows), sometimes older.
                pick = events[-rng.randrange(1, min(len(events), 40))]
                if rng.random() < 0.2:
                    pick = rng.choice(events)
                events.remove(pick)
                writer.redact([pick], "test")
    finally:
        done.set()
        for t in threads:
            t.join()
        writer.close()
    final = _final_lines(log_dir)
    for seq, line in seen:
        problem = _check_line(seq, line, final)
        if problem:
            errors.append(problem)
    for lo, leaves in hashes:
        want = [segfile.leaf_hash_of(final[lo + k]) for k in range(len(leaves))]
        if leaves != want:
            errors.append(f"leaf hashes from {lo} differ from the file's")
    assert errors == [], f"{len(errors)} wrong reads, first: {errors[:5]}"


def test_a_rewrite_between_the_seek_and_the_read_is_not_read_at_the_old_offsets(
    tmp_path, small_stride, monkeypatch
):
    """The window the threaded test hits by chance, made certain: the index gives an offset in
    the old file, the rewrite lands, then the bytes are read."""
    log_dir = tmp_path / "log"
    writer = _writer(log_dir, seg_bits=8)
    seqs = [writer.append("a", "s", "m", "t", {"i": i, "pad": "z" * 200}).seq for i in range(60)]
    reader = LogReader(log_dir)
    assert reader.get(seqs[-1]).seq == seqs[-1]  # the index covers the segment
    real_open = open
    fired = []

    def open_after_a_rewrite(path, *args, **kwargs):
        if not fired and str(path).endswith(".jsonl") and "r" in (args[0] if args else "r"):
            fired.append(path)
            writer.redact(seqs[:10], "test")  # the bytes after them move
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", open_after_a_rewrite)
    try:
        got = reader.get(seqs[50])
    finally:
        monkeypatch.setattr("builtins.open", real_open)
        writer.close()
    assert fired
    assert got.seq == seqs[50]
    assert got.line == _final_lines(log_dir)[seqs[50]]


def test_a_reused_inode_does_not_revive_an_old_index(tmp_path, small_stride):
    """Two rewrites can give the segment its first inode number back (the file system reuses a
    freed inode); with the file grown past the old index's size, the old index must not be used."""
    log_dir = tmp_path / "log"
    writer = _writer(log_dir, seg_bits=10)
    seqs = [writer.append("a", "s", "m", "t", {"i": i, "pad": "p" * 100}).seq for i in range(30)]
    reader = LogReader(log_dir)
    assert reader.get(seqs[-1]).seq == seqs[-1]
    segment = log_dir / layout.segment_name(0)
    first_inode = segment.stat().st_ino
    targets = iter(seqs[:20])
    for _ in range(20):  # ext4 and tmpfs give it back within a few (unless a reader holds it)
        writer.redact([next(targets)], "test")
        if segment.stat().st_ino == first_inode:
            break
    for i in range(30):
        writer.append("a", "s", "m", "t", {"i": i, "pad": "q" * 100})
    final = _final_lines(log_dir)
    writer.close()
    for seq in range(len(final)):
        assert reader.get(seq).line == final[seq]


def test_an_index_that_let_its_file_go_is_checked_before_it_is_used_again(
    tmp_path, small_stride, monkeypatch
):
    """Only a few indexes hold their file open (descriptors are budgeted). The open segment's
    index lets go of its file while another segment is read; rewrites then may give its inode
    number to the new file, grown by appends past the index: it is checked, not trusted (fails
    with the checks removed when the file system reuses the inode, as ext4 mostly does)."""
    monkeypatch.setattr(reader_module, "HELD_INDEXES", 1, raising=False)
    log_dir = tmp_path / "log"
    writer = _writer(log_dir, seg_bits=7)
    seqs = [writer.append("a", "s", "m", "t", {"i": i, "pad": "r" * 90}).seq for i in range(160)]
    reader = LogReader(log_dir)
    assert reader.get(seqs[-1]).seq == seqs[-1]  # the open segment (1) indexed
    assert reader.get(seqs[50]).seq == seqs[50]  # segment 0 indexed: segment 1 lets go
    segment = log_dir / layout.segment_name(1)
    first_inode = segment.stat().st_ino
    for target in [s for s in seqs if s >> 7 == 1][:20]:
        writer.redact([target], "test")
        if segment.stat().st_ino == first_inode:
            break
    for i in range(40):
        writer.append("a", "s", "m", "t", {"i": i, "pad": "s" * 90})
    final = _final_lines(log_dir)
    writer.close()
    for seq in sorted(final, reverse=True):
        assert reader.get(seq).line == final[seq]
    open_fds = len(os.listdir("/proc/self/fd"))
    del reader
    assert len(os.listdir("/proc/self/fd")) == open_fds - 1  # one index held its file
