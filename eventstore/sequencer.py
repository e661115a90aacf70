"""The sequencer: every byte of the log, decided without I/O (docs/format.md sections 3 to 6).

It assigns each entry its seq, prev, pd and h, formats its line, and puts `segment.seal` and
`segment.open` where the spec wants them (the last and first seq of each segment), embedding in
each segment.open a checkpoint of everything before it. Its state is the chain head and the
Merkle compact range of the whole log; it reads a clock and a salt source that are passed in, so
a fixed clock and fixed salts make its output byte-for-byte reproducible. Storage is a sink's job
(sink.py).

Per record it does the format's work and one Merkle append, nothing more: a segment's root (for
the next segment.open) is the tail of the log's compact range, taken just before the seal, plus
the seal's leaf, because segments are aligned subtrees; and each operation carries a copy of the
compact range as it stands after its lines (`tree`), which the writer keeps as its durable tree
once they are durable, instead of appending every leaf a second time.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from .checkpoint import SigningKey, sign_checkpoint
from .entry import Entry
from .merkle import CompactRange
from .record import FORMAT_NAME, SALT_BYTES, Record, genesis, new_record


@dataclass(slots=True)
class AppendLines:
    """Lines for the current segment, in seq order."""

    lines: list[bytes]  # each with its newline
    records: list[Record]
    leaves: list[bytes]
    tree: CompactRange | None = None  # the log's compact range after the last of these lines


@dataclass(frozen=True, slots=True)
class StartSegment:
    """Begin segment `number` with its segment.open line (the lines before are durable first)."""

    number: int
    line: bytes
    record: Record
    leaf: bytes
    checkpoint: str | None  # the embedded checkpoint; segment 0's header has none
    tree: CompactRange  # the log's compact range after this line


Operation = AppendLines | StartSegment


@dataclass(slots=True)
class SequencerState:
    """Where the chain stands: enough to continue it. Recovery rebuilds this from the files."""

    seg_bits: int
    size: int  # records assigned: the next seq
    prev: bytes  # the h of the last record (the genesis hash before seq 0)
    segment: int  # the segment the next record goes into, unless it starts a new one
    tree: CompactRange  # every record assigned: what embedded checkpoints sign
    # The current segment's records: its root goes in the next open. The sequencer derives it
    # from `tree` (see `Sequencer.state`) and reads it only when the segment is full and sealed.
    segment_tree: CompactRange

    @classmethod
    def empty(cls, origin: str, seg_bits: int) -> SequencerState:
        return cls(seg_bits, 0, genesis(origin), 0, CompactRange(), CompactRange())


class RandomSalts:
    """Fresh 16-byte salts, read from the OS a thousand at a time."""

    __slots__ = ("_buffer", "_offset")

    def __init__(self) -> None:
        self._buffer, self._offset = b"", 0

    def __call__(self) -> bytes:
        offset = self._offset
        if offset + SALT_BYTES > len(self._buffer):
            self._buffer, offset = os.urandom(SALT_BYTES * 1024), 0  # one syscall per thousand
        self._offset = offset + SALT_BYTES
        return self._buffer[offset : offset + SALT_BYTES]


class Sequencer:
    """Turns entries into lines and segment boundaries. Not thread-safe: the writer locks it."""

    def __init__(
        self,
        key: SigningKey,
        state: SequencerState,
        *,
        clock: Callable[[], int] = time.time_ns,
        salts: Callable[[], bytes] | None = None,
    ) -> None:
        self.key = key
        self.origin = key.origin
        self.seg_bits = state.seg_bits
        self._seg_size = 1 << state.seg_bits
        self._mask = self._seg_size - 1
        self._clock = clock
        self._salt = salts if salts is not None else RandomSalts()
        self._size, self._segment = state.size, state.segment
        self._prev, self._prev_hex = state.prev, state.prev.hex()
        self._tree = state.tree
        # A state whose segment is full and sealed (a crash came before the next segment.open):
        # the log's compact range may have merged that segment with older ones, so its root,
        # which the missing open names, is kept from the state.
        self._full_segment_root: bytes | None = None
        if state.size == (state.segment + 1) << state.seg_bits:
            self._full_segment_root = state.segment_tree.root()

    @property
    def size(self) -> int:
        """Records assigned so far: the seq the next record gets."""
        return self._size

    def state(self) -> SequencerState:
        """A copy of where the chain stands: a new Sequencer built from it continues it."""
        if self._full_segment_root is not None:
            segment_tree = CompactRange()
            segment_tree.append_subtree(self._seg_size, self._full_segment_root)
        else:
            segment_tree = self._tree.tail(self._segment << self.seg_bits)
        return SequencerState(
            self.seg_bits, self._size, self._prev, self._segment, self._tree.copy(), segment_tree
        )

    def now(self) -> int:
        """The clock in microseconds: what `ts` a record assigned now would carry."""
        return self._clock() // 1000

    def header(self, ts: int) -> StartSegment:
        """Segment 0's segment.open, the header of a new log."""
        if self._size != 0:
            raise ValueError(f"a log holding {self._size} records already has its header")
        header = {
            "first_seq": 0,
            "format": FORMAT_NAME,
            "origin": self.origin,
            "seg_bits": self.seg_bits,
            "segment": 0,
            "vkey": str(self.key.vkey),
        }
        line, record, leaf = self._encode(Entry.control("segment.open", header), ts)
        return StartSegment(0, line, record, leaf, None, self._tree.copy())

    def assign(self, entries: list[Entry], ts: int) -> tuple[list[Operation], list[Record]]:
        """The operations that append `entries`, and the entries' records (seals and opens aside)."""
        ops: list[Operation] = []
        records: list[Record] = []
        lines = AppendLines([], [], [])
        add_line, add_record, add_leaf = (
            lines.lines.append,
            lines.records.append,
            lines.leaves.append,
        )
        mask, tree, salt = self._mask, self._tree, self._salt
        size, prev, prev_hex = self._size, self._prev, self._prev_hex
        for entry in entries:
            if size & mask == mask:
                self._size, self._prev, self._prev_hex = size, prev, prev_hex
                ops.append(lines)
                ops.extend(self._seal_and_open(lines, ts))
                size, prev, prev_hex = self._size, self._prev, self._prev_hex
                lines = AppendLines([], [], [])
                add_line, add_record, add_leaf = (
                    lines.lines.append, lines.records.append, lines.leaves.append
                )  # fmt: skip
            # _encode, inlined: this loop runs once per appended record.
            record, line, prev = new_record(
                prev, size, ts, entry.tenant, entry.session, entry.section, entry.type,
                salt(), entry.payload, entry.jcs, prev_hex,
            )  # fmt: skip
            tree.append(prev)
            prev_hex = record.h
            size += 1
            add_line(line)
            add_record(record)
            add_leaf(prev)
            records.append(record)
        self._size, self._prev, self._prev_hex = size, prev, prev_hex
        if lines.lines or not ops:
            lines.tree = tree.copy()
            ops.append(lines)
        return ops, records

    def resume(
        self, ts: int, payload: dict, sealed_root: bytes | None
    ) -> tuple[list[Operation], Record]:
        """The operations that reopen a recovered log: a segment.open if the last one is missing,
        then `log.resume` with `payload`. `sealed_root` is the root of the segment before the
        current one, needed when a crash came between its seal and the current segment's open."""
        ops: list[Operation] = []
        if self._size == self._segment << self.seg_bits and self._size > 0:
            if sealed_root is None:
                raise ValueError(f"segment {self._segment} has no segment.open: pass sealed_root")
            ops.append(self._segment_open(ts, sealed_root))
        elif self._full_segment_root is not None:
            ops.append(self._next_segment(ts, self._full_segment_root))
        more, records = self.assign([Entry.control("log.resume", payload)], ts)
        ops.extend(more)
        return ops, records[0]

    def _encode(self, entry: Entry, ts: int) -> tuple[bytes, Record, bytes]:
        """The next record's line (with newline), the record and its leaf hash; advances the chain."""
        seq = self._size
        record, line, h = new_record(
            self._prev, seq, ts, entry.tenant, entry.session, entry.section, entry.type,
            self._salt(), entry.payload, entry.jcs, self._prev_hex,
        )  # fmt: skip
        self._tree.append(h)
        self._prev, self._prev_hex = h, record.h
        self._size = seq + 1
        return line, record, h

    def _seal_and_open(self, lines: AppendLines, ts: int) -> list[Operation]:
        """Seal the current segment (its last line joins `lines`) and open the next one."""
        seal = {
            "first_seq": self._segment * self._seg_size,
            "last_seq": self._size,
            "root": base64.b64encode(self._tree.root()).decode(),
            "segment": self._segment,
        }
        # The segment's leaves so far are the tail of the log's range (segments are aligned
        # subtrees); once the seal's leaf is appended the log's range may merge them away.
        segment = self._tree.tail(self._segment << self.seg_bits)
        line, record, leaf = self._encode(Entry.control("segment.seal", seal), ts)
        segment.append(leaf)
        lines.lines.append(line)
        lines.records.append(record)
        lines.leaves.append(leaf)
        lines.tree = self._tree.copy()
        return [self._next_segment(ts, segment.root())]

    def _next_segment(self, ts: int, sealed_root: bytes) -> StartSegment:
        self._segment += 1
        self._full_segment_root = None
        return self._segment_open(ts, sealed_root)

    def _segment_open(self, ts: int, prev_segment_root: bytes) -> StartSegment:
        """The segment.open of the current segment, embedding the checkpoint of all before it."""
        checkpoint = sign_checkpoint(self.key, self._size, self._tree.root())
        header = {
            "checkpoint": checkpoint,
            "first_seq": self._size,
            "format": FORMAT_NAME,
            "origin": self.origin,
            "prev_segment_root": base64.b64encode(prev_segment_root).decode(),
            "segment": self._segment,
        }
        line, record, leaf = self._encode(Entry.control("segment.open", header), ts)
        return StartSegment(self._segment, line, record, leaf, checkpoint, self._tree.copy())
