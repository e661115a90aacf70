"""The DurabilitySink protocol (eventstore/sink.py) as one class of tests every sink passes.

As eventsourcing ships `AggregateRecorderTestCase` for its recorders, this module states what
the writer may rely on from any storage behind it; a sink's test module subclasses
`DurabilitySinkContract` and supplies one factory, `open_storage()`: a fresh, empty storage with
its sink, and a way to look at what the storage holds from outside the sink (as a reader after a
restart would). The operations come from the real sequencer, handed over as the writer hands
them (a `Batch` per run of lines, a `StartSegment` where a segment begins), so every byte is one
the sink would get in production. Each test asserts one promise of the protocol, never how a
sink keeps it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from eventstore.checkpoint import SigningKey, sign_checkpoint
from eventstore.entry import Entry
from eventstore.errors import InvalidInput
from eventstore.merkle import CompactRange
from eventstore.record import Record
from eventstore.redaction import target_of, targets_by_segment
from eventstore.sequencer import AppendLines, Sequencer, SequencerState, StartSegment
from eventstore.sink import (
    COMMITTED,
    Batch,
    CommitResult,
    DurabilitySink,
    RedactionRewrite,
    SignedCheckpoint,
)

SEG_BITS = 2  # four records a segment: a handful of appends crosses several segment starts
FIXED_NS = 1_765_000_000_000_000_000


@dataclass
class Storage:
    """A fresh, empty storage behind `sink`, and how to read it without the sink."""

    sink: DurabilitySink
    key: SigningKey  # the log's key (for a shared store, the partition's)
    stored_lines: Callable[[], list[bytes]]  # every line held, newline included, in seq order
    newest_checkpoint: Callable[[], str | None]  # the text of the newest checkpoint held


class _Salts:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> bytes:
        self.n += 1
        return self.n.to_bytes(16, "big")


class Log:
    """The sequencer's side of one log: the operations the writer would hand to the sink."""

    def __init__(self, key: SigningKey, sequencer: Sequencer | None = None) -> None:
        self.key = key
        self.sequencer = sequencer or Sequencer(
            key,
            SequencerState.empty(key.origin, SEG_BITS),
            clock=lambda: FIXED_NS,
            salts=_Salts(),
        )

    def header(self) -> StartSegment:
        """Segment 0's segment.open: the first line of a new log."""
        start = self.sequencer.header(self.sequencer.now())
        self.header_line = start.line
        return start

    def append(self, count: int, section: str = "messages") -> list[AppendLines | StartSegment]:
        entries = [Entry("acme", "s-1", section, "item.added", {"n": n}) for n in range(count)]
        return self.sequencer.assign(entries, self.sequencer.now())[0]

    def control(self, type_: str, payload: dict) -> list[AppendLines | StartSegment]:
        return self.sequencer.assign([Entry.control(type_, payload)], self.sequencer.now())[0]

    def fork(self) -> Log:
        """Another sequencer continuing the same chain: what a second writer would make."""
        return Log(
            self.key,
            Sequencer(self.key, self.sequencer.state(), clock=lambda: FIXED_NS, salts=_Salts()),
        )


def hand_over(sink: DurabilitySink, ops: list[AppendLines | StartSegment]) -> list[CommitResult]:
    """Give the sink each operation as the writer thread does; the answers, in order."""
    answers = []
    for op in ops:
        if isinstance(op, StartSegment):
            answers.append(sink.start_segment(op))
        elif op.lines:
            answers.append(sink.commit(Batch(op.lines, op.records, op.leaves)))
    return answers


def lines_of(ops: list[AppendLines | StartSegment]) -> list[bytes]:
    found: list[bytes] = []
    for op in ops:
        found += [op.line] if isinstance(op, StartSegment) else op.lines
    return found


def records_of(ops: list[AppendLines | StartSegment]) -> list[Record]:
    found: list[Record] = []
    for op in ops:
        found += [op.record] if isinstance(op, StartSegment) else op.records
    return found


def tree_after(ops: list[AppendLines | StartSegment]) -> CompactRange:
    """The log's Merkle compact range after the last of `ops`."""
    tree = ops[-1].tree
    assert tree is not None
    return tree


class DurabilitySinkContract:
    """Subclass it and define `open_storage(tmp_path)`: a context manager yielding a `Storage`."""

    def open_storage(self, tmp_path: Path) -> contextlib.AbstractContextManager[Storage]:
        raise NotImplementedError

    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[Storage]:
        with self.open_storage(tmp_path) as storage:
            try:
                yield storage
            finally:
                storage.sink.close()

    @pytest.fixture
    def log(self, storage: Storage) -> Log:
        """A log whose header (segment 0's segment.open) the storage holds already."""
        log = Log(storage.key)
        assert storage.sink.start_segment(log.header()) == COMMITTED
        return log

    # ---- commits ---------------------------------------------------------------------------

    def test_a_new_log_begins_with_its_header_made_durable_as_segment_zero(self, storage):
        header = Log(storage.key).header()
        assert storage.sink.start_segment(header) == COMMITTED
        assert storage.stored_lines() == [header.line]

    def test_each_committed_batch_is_durable_in_seq_order_after_everything_before(
        self, storage, log
    ):
        first, second = log.append(1), log.append(1)  # two batches within segment 0
        assert hand_over(storage.sink, first) == [COMMITTED]
        assert hand_over(storage.sink, second) == [COMMITTED]
        assert storage.stored_lines() == [log.header_line, *lines_of(first + second)]

    def test_a_durable_record_reads_back_as_it_was_committed(self, storage, log):
        ops = log.append(3)
        hand_over(storage.sink, ops)
        for record in records_of(ops):
            assert storage.sink.read_record(record.seq).line == record.line

    def test_reading_a_seq_the_log_does_not_hold_raises_invalid_input(self, storage, log):
        hand_over(storage.sink, log.append(1))
        with pytest.raises(InvalidInput):
            storage.sink.read_record(2)

    def test_the_fsync_observer_hears_of_each_durable_commit_with_its_line_count(
        self, storage, log
    ):
        heard: list[tuple[float, int]] = []
        storage.sink.fsync_observer = lambda seconds, lines: heard.append((seconds, lines))
        ops = log.append(2)
        hand_over(storage.sink, ops)
        assert [lines for _, lines in heard] == [2]
        assert all(seconds >= 0 for seconds, _ in heard)

    # ---- a batch that does not continue the log -------------------------------------------

    def test_a_batch_whose_prev_is_not_the_head_is_never_made_durable(self, storage, log):
        fork = log.fork()
        ours = log.append(2)
        hand_over(storage.sink, ours)
        before = storage.stored_lines()
        theirs = fork.append(1)  # seq 1 again, chained to the header: the head is seq 2 now
        try:
            answers = hand_over(storage.sink, theirs)
        except Exception:  # a failed write: the writer stops, as for a refusal
            answers = []
        assert COMMITTED not in answers
        storage.sink.abandon()
        assert storage.stored_lines() == before
        assert storage.sink.read_record(records_of(theirs)[0].seq).h != records_of(theirs)[0].h

    def test_abandon_after_a_failed_commit_keeps_everything_committed_before(self, storage, log):
        ops = log.append(3)
        hand_over(storage.sink, ops)
        with contextlib.suppress(Exception):
            hand_over(storage.sink, ops)  # the same batch again: it does not continue the head
        storage.sink.abandon()
        storage.sink.abandon()  # best effort, never raises: the writer may call it again
        assert storage.stored_lines() == [log.header_line, *lines_of(ops)]

    # ---- segments and checkpoints ----------------------------------------------------------

    def test_a_segment_start_is_durable_and_its_embedded_checkpoint_is_the_newest(
        self, storage, log
    ):
        ops = log.append(3)  # seqs 1 and 2, the seal at 3, segment 1's open at 4, then seq 5
        starts = [op for op in ops if isinstance(op, StartSegment)]
        assert [start.number for start in starts] == [1]
        assert hand_over(storage.sink, ops) == [COMMITTED] * len(ops)
        assert storage.stored_lines() == [log.header_line, *lines_of(ops)]
        assert storage.newest_checkpoint() == starts[0].checkpoint

    def test_an_installed_checkpoint_replaces_the_previous_as_the_newest(self, storage, log):
        first = log.append(1)
        hand_over(storage.sink, first)
        older = sign_checkpoint(log.key, 2, tree_after(first).root())
        storage.sink.install_checkpoint(SignedCheckpoint(older, 2))
        assert storage.newest_checkpoint() == older
        second = log.append(1)
        hand_over(storage.sink, second)
        newer = sign_checkpoint(log.key, 3, tree_after(second).root())
        storage.sink.install_checkpoint(SignedCheckpoint(newer, 3))
        assert storage.newest_checkpoint() == newer

    # ---- redaction -------------------------------------------------------------------------

    def test_a_redaction_rewrite_removes_the_targets_payloads_and_keeps_every_other_line(
        self, storage, log
    ):
        events = log.append(6)  # records in segments 0, 1 and 2
        hand_over(storage.sink, events)
        targets = [r for r in records_of(events) if not r.is_control][1::3]
        payload = {"reason": "contract", "targets": [target_of(r) for r in targets]}
        redaction = log.control("redaction", payload)
        hand_over(storage.sink, redaction)
        size = records_of(redaction)[-1].seq + 1
        checkpoint = sign_checkpoint(log.key, size, tree_after(redaction).root())
        storage.sink.install_checkpoint(SignedCheckpoint(checkpoint, size))  # covers it first
        before = storage.stored_lines()
        redaction_seq = records_of(redaction)[-1].seq
        seqs = [r.seq for r in targets]
        assert len({seq >> SEG_BITS for seq in seqs}) == 2, "targets in two segments"

        storage.sink.rewrite_redacted(
            RedactionRewrite(targets_by_segment(seqs, redaction_seq, SEG_BITS))
        )

        after = storage.stored_lines()
        for seq, line in enumerate(after):
            if seq in seqs:
                erased = Record.from_line(before[seq]).redacted_line(redaction_seq) + b"\n"
                assert line == erased
                assert not storage.sink.read_record(seq).has_payload
            else:
                assert line == before[seq]

    # ---- closing ---------------------------------------------------------------------------

    def test_what_was_committed_stays_durable_after_close_and_closing_again_is_harmless(
        self, storage, log
    ):
        ops = log.append(3)
        hand_over(storage.sink, ops)
        storage.sink.close()
        storage.sink.close()  # a failed reopen closes a sink the writer closes again later
        assert storage.stored_lines() == [log.header_line, *lines_of(ops)]
