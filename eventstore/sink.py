"""The durability seam: what the writer hands to storage, and the answers storage gives.

The sequencer decides every byte; a sink only makes those bytes durable. The writer thread
drains what callers queued and gives the sink one `Batch` per run of lines (group commit), a
`StartSegment` where a segment begins, and the control operations below. A sink whose commit is
a database transaction maps `commit(batch)` onto one transaction and answers:

- `COMMITTED`: every line of the batch is durable;
- `Refused(owner)`: nothing was written, because someone else owns the log (a fencing check);
- `Unknown(reason)`: the outcome is not known (a connection lost mid-commit): check the head.

A batch (or segment start) that does not continue what the storage holds, by its first seq and
`prev`, is never written, whatever the storage: a fenced store answers Refused, a single-owner
one (a directory under its LOCK, memory) raises `BrokenChain`. Either stops the writer; it is
what a second writer, or a writer whose state went wrong, would send. tests/helpers/
sink_contract.py states the whole protocol as tests every sink passes.

Any answer but COMMITTED, and any exception, stops the writer: it refuses further appends with
a typed error and settles every waiter with it, until the log is reopened: `LogWriter.reopen()`
(writer.py) recovers a log directory in place, and the service retries it with backoff.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .errors import LedgerError, WriterClosed
from .record import Record
from .sequencer import StartSegment


@dataclass(slots=True)
class Batch:
    """Consecutive lines of one segment, to be made durable together, in order."""

    lines: list[bytes]  # each with its newline
    records: list[Record]
    leaves: list[bytes]  # each record's h: the Merkle leaves

    @property
    def first_seq(self) -> int:
        return self.records[0].seq

    @property
    def last_seq(self) -> int:
        return self.records[-1].seq

    @property
    def first_prev(self) -> str:
        """The hex `prev` of the first record: the h the storage's head must hold now."""
        return self.records[0].prev

    @property
    def last_h(self) -> str:
        """The hex `h` of the last record: the storage's head after the commit."""
        return self.records[-1].h


@dataclass(frozen=True, slots=True)
class Committed:
    pass


@dataclass(frozen=True, slots=True)
class Refused:
    owner: str  # who holds the log instead, as the storage names it


@dataclass(frozen=True, slots=True)
class Unknown:
    reason: str


COMMITTED = Committed()
CommitResult = Committed | Refused | Unknown


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A checkpoint text (docs/format.md section 6) to store as the log's newest."""

    text: str
    size: int


@dataclass(frozen=True, slots=True)
class RedactionRewrite:
    """Remove payloads after a durable redaction record: {segment: {target seq: redaction seq}}."""

    targets: dict[int, dict[int, int]]


@dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Sign everything durable and install it as the newest checkpoint."""


@dataclass(frozen=True, slots=True)
class CloseLog:
    """Install the final checkpoint; the writer stops after it and closes the sink."""


class BrokenChain(LedgerError):
    """A batch that does not continue the storage's head: nothing of it was written."""


@dataclass(slots=True)
class ChainHead:
    """Where a single-owner storage's chain ends: what the next line must continue.

    `h` is None before the first record: the storage does not know the log's genesis hash, and
    the sequencer gives seq 0 its `prev`."""

    size: int = 0  # records held: the seq the next one must have
    h: str | None = None  # the hex `h` of the last record held

    def check(self, first: Record) -> None:
        """Raise BrokenChain unless `first` is the next record of this chain."""
        if first.seq != self.size or (self.h is not None and first.prev != self.h):
            raise BrokenChain(
                f"seq {first.seq} (prev {first.prev[:16]}...) does not continue the log's head "
                f"(seq {self.size - 1}, h {(self.h or '')[:16]}...): nothing was written; "
                "reopen the log, which reads its head from the storage"
            )

    def advance(self, last: Record) -> None:
        self.size, self.h = last.seq + 1, last.h


class CommitRefused(WriterClosed):
    """The sink refused a commit because someone else owns the log: reopen after checking."""

    def __init__(self, owner: str) -> None:
        super().__init__(
            f"the log's storage refused a commit: it is owned by {owner}; "
            "the writer stopped taking appends, reopen the log once it is ours again"
        )
        self.owner = owner


class CommitUnknown(WriterClosed):
    """The sink cannot tell whether a commit happened: reopen, which reads the head."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the outcome of a commit is unknown ({reason}); the writer stopped taking "
            "appends: reopen the log, which reads its head"
        )
        self.reason = reason


class DurabilitySink(Protocol):
    """Storage for one log's lines. The writer calls it from one thread at a time, except
    `read_record`, which callers' threads use while commits go on."""

    # Called with (seconds, lines) after each durable commit: for metrics.
    fsync_observer: Callable[[float, int], None] | None

    def commit(self, batch: Batch) -> CommitResult:
        """Make the batch's lines durable after everything committed before; never write a
        batch that does not continue the head (Refused, or BrokenChain raised)."""
        ...

    def start_segment(self, start: StartSegment) -> CommitResult:
        """Begin segment `start.number` with its segment.open line, durably, and keep its
        embedded checkpoint (if any) as the newest checkpoint; it continues the head as a
        batch does."""
        ...

    def install_checkpoint(self, checkpoint: SignedCheckpoint) -> None:
        """Store `checkpoint` as the newest, replacing the previous one all or nothing."""
        ...

    def read_record(self, seq: int) -> Record:
        """A durable record, for a redaction's targets; InvalidInput if there is none."""
        ...

    def rewrite_redacted(self, rewrite: RedactionRewrite) -> None:
        """Remove the targets' payloads and salts (docs/format.md section 9), crash-safely."""
        ...

    def abandon(self) -> None:
        """After a failed commit: drop whatever is not durable (best effort, never raises)."""
        ...

    def close(self) -> None:
        """Release the storage. Nothing is called after it."""
        ...
