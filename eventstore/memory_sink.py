"""A sink that keeps the log in memory: for tests, for measuring the writer without a disk,
and as the smallest complete example of the DurabilitySink protocol for new storage.

Nothing here survives the process; never use it where a record must be durable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .errors import InvalidInput
from .record import Record
from .sequencer import StartSegment
from .sink import (
    COMMITTED,
    Batch,
    ChainHead,
    CommitResult,
    RedactionRewrite,
    SignedCheckpoint,
)


class MemorySink:
    def __init__(self) -> None:
        self.fsync_observer: Callable[[float, int], None] | None = None
        self.lines: list[bytes] = []  # every committed line, newline included; index = seq
        self.batches: list[Batch] = []  # every commit, as the writer handed it over
        self.segment_starts: list[int] = []
        self.checkpoints: list[SignedCheckpoint] = []  # every installed one, oldest first
        self.closed = False
        self._head = ChainHead()  # a batch that does not continue it is never kept
        self._mutex = threading.Lock()  # read_record runs on callers' threads

    def commit(self, batch: Batch) -> CommitResult:
        started = time.perf_counter()
        self._head.check(batch.records[0])
        with self._mutex:
            self.batches.append(batch)
            self.lines.extend(batch.lines)
        self._head.advance(batch.records[-1])
        self._observe(started, len(batch.lines))
        return COMMITTED

    def start_segment(self, start: StartSegment) -> CommitResult:
        started = time.perf_counter()
        self._head.check(start.record)
        with self._mutex:
            self.segment_starts.append(start.number)
            self.lines.append(start.line)
        self._head.advance(start.record)
        self._observe(started, 1)
        if start.checkpoint is not None:
            self.install_checkpoint(SignedCheckpoint(start.checkpoint, start.record.seq))
        return COMMITTED

    def install_checkpoint(self, checkpoint: SignedCheckpoint) -> None:
        self.checkpoints.append(checkpoint)

    def read_record(self, seq: int) -> Record:
        with self._mutex:
            if not 0 <= seq < len(self.lines):
                raise InvalidInput(f"seq {seq} is not in the log")
            return Record.from_line(self.lines[seq])

    def rewrite_redacted(self, rewrite: RedactionRewrite) -> None:
        with self._mutex:
            for targets in rewrite.targets.values():
                for seq, redaction_seq in targets.items():
                    record = Record.from_line(self.lines[seq])
                    self.lines[seq] = record.redacted_line(redaction_seq) + b"\n"

    def abandon(self) -> None:
        pass  # nothing is written before a commit succeeds

    def close(self) -> None:
        self.closed = True

    def _observe(self, started: float, lines: int) -> None:
        # Nothing to sync in memory; the observer still hears of every commit, as the protocol says.
        if self.fsync_observer is not None:
            self.fsync_observer(time.perf_counter() - started, lines)
