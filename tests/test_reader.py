"""Reading: from any seq across segments, via the sparse index, and tailing a live writer process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventstore import merkle
from eventstore import reader as reader_module
from eventstore.checkpoint import SigningKey, parse_checkpoint
from eventstore.filters import RecordFilter
from eventstore.reader import LogReader
from eventstore.writer import LogWriter
from tests.helpers.child import readline_within

HELPERS = Path(__file__).parent / "helpers"
SEED = bytes(range(32))


@pytest.fixture
def small_stride(monkeypatch):
    # A stride of 4 makes tiny test segments hold many index slots.
    monkeypatch.setattr(reader_module, "INDEX_STRIDE", 4)


@pytest.fixture
def log_dir(tmp_path):
    key = SigningKey.from_seed("test.local/tail", SEED)
    with LogWriter.open(tmp_path / "log", key, seg_bits=5) as writer:
        for i in range(200):
            writer.append(
                "acme", f"s-{i % 4}", ("messages", "findings")[i % 2], "item.added", {"i": i}
            )
    return tmp_path / "log"


def test_reading_from_every_cursor_gives_exactly_the_records_after_it(log_dir, small_stride):
    everything = [seq for seq, _ in LogReader(log_dir).lines()]
    assert everything == list(range(len(everything)))
    reader = LogReader(log_dir)
    for after in range(-1, len(everything) + 2):
        assert [seq for seq, _ in reader.lines(after)] == everything[after + 1 :]


def test_until_bounds_the_range(log_dir):
    reader = LogReader(log_dir)
    assert [seq for seq, _ in reader.lines(10, 20)] == list(range(11, 20))


def test_filter_keeps_only_matching_records(log_dir):
    where = RecordFilter.of(session=["s-1", "s-2"], section="messages")
    got = list(LogReader(log_dir).records(where=where))
    assert got and all(r.session in ("s-1", "s-2") and r.section == "messages" for r in got)
    expected = [r for r in LogReader(log_dir).records() if where.matches(r)]
    assert [r.seq for r in got] == [r.seq for r in expected]


def test_saved_index_is_rebuilt_when_lost_or_wrong(log_dir, tmp_path, small_stride):
    index_dir = tmp_path / "index"
    expected = [seq for seq, _ in LogReader(log_dir).lines()]
    assert [seq for seq, _ in LogReader(log_dir, index_dir).lines(40)] == expected[41:]
    saved = sorted(index_dir.iterdir())
    assert saved, "full segments get a saved index"
    for path in saved:
        path.write_bytes(path.read_bytes()[:16] + b"\x07" * (path.stat().st_size - 16))  # garbage
    assert [seq for seq, _ in LogReader(log_dir, index_dir).lines(70)] == expected[71:]
    for path in saved:
        path.unlink()
    assert [seq for seq, _ in LogReader(log_dir, index_dir).lines(100)] == expected[101:]


def test_a_partial_last_line_is_never_returned(log_dir):
    reader = LogReader(log_dir)
    head = reader.head()
    last_segment = sorted(log_dir.glob("seg-*.jsonl"))[-1]
    with open(last_segment, "ab") as f:
        f.write(b'{"v":1,"seq":%d,"ts":1,"tenant":"acme"' % (head + 1))
    assert [seq for seq, _ in LogReader(log_dir).lines(head - 2)] == [head - 1, head]


def test_proofs_from_the_files_verify_against_the_signed_checkpoint(log_dir):
    key = SigningKey.from_seed("test.local/tail", SEED)
    reader = LogReader(log_dir)
    cp = parse_checkpoint((log_dir / "checkpoint").read_text(), key.vkey)
    leaves = reader.leaf_hashes(0, cp.size)
    assert reader.root(cp.size) == cp.root
    for seq in (0, 1, 31, 32, 77, cp.size - 1):
        merkle.verify_inclusion(
            seq, cp.size, leaves[seq], reader.inclusion_proof(seq, cp.size), cp.root
        )
    for first in (1, 32, 64, 100, cp.size):
        proof = reader.consistency_proof(first, cp.size)
        merkle.verify_consistency(first, cp.size, merkle.root(leaves[:first]), cp.root, proof)


def test_follow_tails_a_writer_in_another_process_exactly_once_in_order(tmp_path):
    log_dir = tmp_path / "live"
    count = 120
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HELPERS / "slow_writer.py"),
            str(log_dir),
            SEED.hex(),
            str(count),
            "0.002",
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    try:
        assert readline_within(proc.stdout, 60, "the slow writer").strip() == b"ready"
        seen = []
        for record in LogReader(log_dir).follow(poll=0.01, stop=lambda: proc.poll() is not None):
            if not record.is_control:
                seen.append(record.payload["i"])
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert seen == list(range(count))


def test_follow_yields_a_record_made_durable_just_before_stop_is_set(tmp_path):
    """The order that once lost a record (the follower saw [0, 1, 2] while the log held
    [0, 1, 2, 3]): the follower has read everything, then record 3 becomes durable, then stop is
    set, all before the follower's next look at the files. `stop` itself does the append, so the
    order is fixed by the code, not by timing."""
    key = SigningKey.from_seed("test.local/tail", SEED)
    with LogWriter.open(tmp_path / "log", key, seg_bits=5) as writer:
        for i in range(3):
            writer.append("acme", "s", "messages", "item.added", {"i": i})
        seen: list[int] = []
        stopped: list[bool] = []

        def stop() -> bool:
            if len(seen) < 3:
                return False  # not caught up yet: keep following
            if not stopped:
                writer.append("acme", "s", "messages", "item.added", {"i": 3})  # durable now
                stopped.append(True)
            return True

        for record in LogReader(tmp_path / "log").follow(poll=0, stop=stop):
            if not record.is_control:
                seen.append(record.payload["i"])

    assert seen == [0, 1, 2, 3]


def test_one_reader_shared_by_threads_returns_the_right_records_while_the_log_grows(tmp_path):
    import random
    import threading

    from eventstore.writer import Durability

    key = SigningKey.from_seed("test.local/tail", SEED)
    writer = LogWriter.open(
        tmp_path / "log", key, seg_bits=8, durability=Durability.UNSAFE_NO_FSYNC
    )
    reader = LogReader(tmp_path / "log")
    wrong: list[tuple[int, int]] = []
    done = threading.Event()

    def read_randomly(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            head = writer.size - 1
            if head > 0:
                seq = rng.randrange(head)
                got = reader.get(seq).seq
                if got != seq:
                    wrong.append((seq, got))

    threads = [threading.Thread(target=read_randomly, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for i in range(5000):
        writer.append("a", "s", "x", "t", {"i": i})
    done.set()
    for t in threads:
        t.join()
    writer.close()
    assert wrong == []
