"""The single writer of a log: a sequencer, a durability sink, and the thread between them.

Appending has two halves. `submit()` runs on the caller's thread under a short lock that does no
I/O: the sequencer (sequencer.py) assigns seqs, hashes, builds the lines (rotating segments on
the way) and the operations are queued, so the caller knows its records at once and commands
can apply them in seq order. One thread owned by the writer then drains everything queued while
it was busy and hands it to the sink (sink.py) in one commit (group commit) before
acknowledging any of it.

Acknowledgement is per batch too (pending.py): every submit between two drains of the queue
shares one `Settlement`, which the writer thread settles once the batch is durable: threads
waiting on it pass one lock along, asyncio tasks await futures that the writer resolves with
one `call_soon_threadsafe` per event loop, so the event loop never blocks on storage.

`open()` puts a log directory behind it (file_sink.py, recovered by file_recovery.py);
`create_on()` starts a new log on any other sink, `resume_on()` continues one recovered
elsewhere (a PostgreSQL partition). A failed write stops the writer (it holds the cause in a
`WriteFailure`, writer_failure.py) until `reopen()` has recovered the directory in place.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from . import file_recovery, filemodes, layout, redaction
from .checkpoint import SigningKey, sign_checkpoint
from .entry import MAX_PAYLOAD_BYTES, Entry, as_entry
from .errors import InvalidInput, StalePosition, WriterClosed
from .file_sink import Durability, FileSink
from .lockfile import WriterLock
from .merkle import CompactRange
from .pending import Pending, Settlement, settled, wake_waiters
from .record import Record
from .sequencer import AppendLines, Sequencer, SequencerState, StartSegment
from .sink import (
    Batch,
    CloseLog,
    DurabilitySink,
    RedactionRewrite,
    SignedCheckpoint,
    WriteCheckpoint,
)
from .writer_failure import NotCommitted, WriteFailure

__all__ = ["DEFAULT_SEG_BITS", "MAX_PAYLOAD_BYTES", "Durability", "Entry", "LogWriter", "Pending"]

DEFAULT_SEG_BITS = 16


# What the queue holds, in log order; the writer thread executes each against the sink.
Operation = AppendLines | StartSegment | WriteCheckpoint | RedactionRewrite | CloseLog


class LogWriter:
    """Append-only writer of one log. Use `open()` (or `create_on()`); always `close()`."""

    def __init__(self) -> None:
        raise TypeError("use LogWriter.open()")

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        log_dir: str | os.PathLike[str],
        key: SigningKey,
        *,
        seg_bits: int = DEFAULT_SEG_BITS,
        durability: Durability = Durability.FSYNC,
        checkpoint_interval: float = 1.0,
        create: bool = True,
        clock: Callable[[], int] = time.time_ns,
        salts: Callable[[], bytes] | None = None,
    ) -> LogWriter:
        """Open a log directory for writing, creating it or recovering it (docs/format.md section 8).

        `salts` returns each record's 16-byte salt (random by default; fixed ones make the
        bytes reproducible, for tests)."""
        _check_seg_bits(seg_bits)
        log_dir = Path(log_dir)
        filemodes.make_dir(log_dir)
        lock = WriterLock(log_dir / layout.LOCK)
        lock.acquire()
        sink = FileSink(log_dir, seg_bits, durability)
        try:
            recovered = file_recovery.recover(log_dir, key, seg_bits, create, sink)
            self = cls._on(sink, key, seg_bits, recovered, checkpoint_interval, clock, salts)
            self.log_dir, self.durability, self._lock = log_dir, durability, lock
        except BaseException:
            sink.close()
            lock.release()
            raise
        self._start_thread()
        return self

    @classmethod
    def create_on(
        cls,
        sink: DurabilitySink,
        key: SigningKey,
        *,
        seg_bits: int = DEFAULT_SEG_BITS,
        checkpoint_interval: float = 1.0,
        clock: Callable[[], int] = time.time_ns,
        salts: Callable[[], bytes] | None = None,
    ) -> LogWriter:
        """Start a new log on an empty sink (any DurabilitySink; its owner keeps it single-writer)."""
        _check_seg_bits(seg_bits)
        self = cls._on(sink, key, seg_bits, None, checkpoint_interval, clock, salts)
        self._start_thread()
        return self

    @classmethod
    def resume_on(
        cls,
        sink: DurabilitySink,
        key: SigningKey,
        recovered: file_recovery.Recovered,
        *,
        checkpoint_interval: float = 1.0,
        clock: Callable[[], int] = time.time_ns,
        salts: Callable[[], bytes] | None = None,
    ) -> LogWriter:
        """Continue a recovered log on any other sink (eventstore/pg/recovery.py recovers a
        partition): appends `log.resume` (and a missing segment.open) and a checkpoint, as
        `open()` does for a directory."""
        seg_bits = recovered.state.seg_bits
        self = cls._on(sink, key, seg_bits, recovered, checkpoint_interval, clock, salts)
        self._start_thread()
        return self

    @classmethod
    def _on(
        cls,
        sink: DurabilitySink,
        key: SigningKey,
        seg_bits: int,
        recovered: file_recovery.Recovered | None,
        checkpoint_interval: float,
        clock: Callable[[], int],
        salts: Callable[[], bytes] | None,
    ) -> LogWriter:
        """A writer on `sink` whose first records are durable: a new log's header, or what
        continues a recovered one (`log.resume`, and a missing segment.open); then a checkpoint."""
        state = SequencerState.empty(key.origin, seg_bits) if recovered is None else recovered.state
        self = object.__new__(cls)  # __init__ refuses: the class methods above are the way in
        self._setup(sink, key, state, checkpoint_interval, clock, salts)
        if recovered is None:
            with self._answers_raised():
                self._execute([self._sequencer.header(self.now())])
        else:
            self._cp_size = recovered.checkpoint_size
            ops, _ = self._sequencer.resume(self.now(), recovered.resume, recovered.sealed_root)
            with self._answers_raised():
                self._execute(ops)
            self.last_resume = recovered.resume
        self._write_checkpoint()
        return self

    def _setup(
        self,
        sink: DurabilitySink,
        key: SigningKey,
        state: SequencerState,
        checkpoint_interval: float,
        clock: Callable[[], int],
        salts: Callable[[], bytes] | None,
    ) -> None:
        self.key = key
        self.origin = key.origin
        self.seg_bits = state.seg_bits
        self.checkpoint_interval = checkpoint_interval
        # A directory's writer only (open()): what reopen() recovers.
        self.log_dir: Path | None = None
        self.durability: Durability | None = None
        self.last_resume: dict | None = None  # the log.resume payload of the last (re)open
        self._lock: WriterLock | None = None
        self._sink = sink
        self._durable = state.tree.copy()  # the durable tree: what checkpoint files sign
        self._durable_size = state.size
        self._clock, self._salts = clock, salts
        self._sequencer = Sequencer(key, state, clock=clock, salts=salts)
        self._listeners: list[Callable[[list[Record]], None]] = []
        # _assign guards the sequencer (callers' threads, no I/O); _cond guards the queue.
        self._assign = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Operation] = []
        self._group: Settlement | None = None  # what the queued operations' callers wait on
        self._redacting = threading.Lock()
        self._closing = False
        self._closed = False
        self._finished = False
        self._failure = WriteFailure()  # why a failed write stopped it (writer_failure.py)
        self._cp_size = 0
        self._cp_time = time.monotonic()
        self._thread: threading.Thread  # started by _start_thread, again by each reopen

    @contextlib.contextmanager
    def _answers_raised(self) -> Iterator[None]:
        """While opening: a sink's refusal surfaces as CommitRefused/CommitUnknown."""
        try:
            yield
        except NotCommitted as exc:
            self._failure.stop(exc)
            raise self._failure.error() from None

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ledgermem-writer", daemon=True)
        self._thread.start()

    # ---- after a failed write --------------------------------------------------------------

    @property
    def failure(self) -> BaseException | None:
        """Why the writer refuses appends after a failed write (None while it takes them):
        the error it will raise, whose `cause` is the storage's own error."""
        return self._failure.error() if self._failure.stopped else None

    def reopen(self) -> dict | None:
        """After a failed write: recover the directory and take appends again, in place.

        The failed writer's thread is stopped, the directory is recovered as `open()` does
        (what was not durable is cut off, `log.resume` is appended) and a new thread starts.
        Listeners stay registered and get the `log.resume` batch, so they see no gap: the seqs
        given to records that were never durable are given again. Returns the `log.resume`
        payload, or None when there was nothing to heal. Raises (and stays failed, ready to be
        reopened again) while the cause lasts: the caller retries, with backoff.
        """
        if self.log_dir is None or self.durability is None:
            raise WriterClosed("only a writer made by LogWriter.open() can be reopened")
        with self._assign:
            if not self._failure.stopped:
                return None
            if self._closing:
                raise WriterClosed(f"the writer of {self.log_dir} is closed")
            if self._thread.is_alive():
                self._enqueue([CloseLog()])  # a failed writer settles it and stops
                self._thread.join()
                self._finished = self._closed = False  # still failed: close() must still work
            self._sink.close()
            sink = FileSink(self.log_dir, self.seg_bits, self.durability)
            sink.fsync_observer = self._sink.fsync_observer
            published: list[Record] = []
            try:
                recovered = file_recovery.recover(
                    self.log_dir, self.key, self.seg_bits, False, sink
                )
                assert recovered is not None  # create=False: no log raises CorruptLog
                state = recovered.state
                self._sink = sink
                self._durable, self._durable_size = state.tree.copy(), state.size
                self._cp_size = recovered.checkpoint_size
                self._sequencer = Sequencer(self.key, state, clock=self._clock, salts=self._salts)
                # A checkpoint first, as a probe: while the cause lasts (no descriptor, no space)
                # this fails before anything is appended, so retries do not pile up resumes.
                self._write_checkpoint()
                ops, _ = self._sequencer.resume(self.now(), recovered.resume, recovered.sealed_root)
                self._execute(ops, published)
                self._write_checkpoint()
            except BaseException as exc:
                sink.abandon()
                sink.close()
                self._failure.stop(exc)
                raise
            finally:
                # Before any new batch, so listeners keep log order; also what a reopen that
                # failed later made durable (a log.resume), which the next one continues after.
                if published:
                    for listener in self._listeners:
                        listener(published)
            self.last_resume = recovered.resume
            self._queue, self._group = [], None
            self._failure.clear()
            self._finished = self._closed = False
            self._start_thread()
            return recovered.resume

    # ---- appending -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Records durable in the log."""
        return self._durable_size

    @property
    def next_seq(self) -> int:
        """The seq the next submitted record gets (records in flight included)."""
        return self._sequencer.size

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fsync_observer(self) -> Callable[[float, int], None] | None:
        """Called on the writer thread with (seconds, lines) after each durable commit."""
        return self._sink.fsync_observer

    @fsync_observer.setter
    def fsync_observer(self, observer: Callable[[float, int], None] | None) -> None:
        self._sink.fsync_observer = observer

    def now(self) -> int:
        """The writer's clock in microseconds: what `ts` a record submitted now would carry."""
        return self._sequencer.now()

    def submit(
        self,
        entries: Iterable[Entry | Sequence],
        *,
        expected_size: int | None = None,
        ts: int | None = None,
    ) -> Pending:
        """Assign seqs to the entries and queue them; returns at once, without I/O.

        `expected_size` is compared with the log's size including records in flight: a stale
        one raises StalePosition and nothing is queued. `ts` stamps the records with a time the
        caller read from `now()` before deciding them (a decision that depends on the time, such
        as a dedup window, then agrees with the record); by default the clock is read here.
        """
        batch = [as_entry(e) for e in entries]
        if not batch:
            return Pending([], settled())
        sequencer = self._sequencer
        with self._assign:
            self._check_open()
            if expected_size is not None and expected_size != sequencer.size:
                raise StalePosition(expected_size, sequencer.size)
            ops, records = sequencer.assign(batch, sequencer.now() if ts is None else ts)
            return Pending(records, self._enqueue(ops))

    def append(
        self, tenant: str, session: str, section: str, type_: str, payload: object,
        *, expected_size: int | None = None,
    ) -> Record:  # fmt: skip
        """Append one record; return it once it is durable."""
        entry = Entry(tenant, session, section, type_, payload)
        return self.submit([entry], expected_size=expected_size).wait()[0]

    def append_batch(
        self, entries: Iterable[Entry | Sequence], *, expected_size: int | None = None
    ) -> list[Record]:
        """Append records with consecutive seqs (rotation records aside); return them once durable."""
        return self.submit(entries, expected_size=expected_size).wait()

    def redact(self, seqs: Iterable[int], reason: str, request: str | None = None) -> Record:
        """Erase the payloads of `seqs` (docs/format.md section 9); return the redaction record.

        The redaction record is made durable and a checkpoint covering it is written before the
        segments are rewritten; the writer thread does the rewrite, so no append can land in a
        segment while it is being replaced.
        """
        seqs = sorted(set(seqs))
        payload: dict = {"reason": reason}
        if request is not None:
            payload["request"] = request
        # One redaction at a time, held until its rewrite is done: a second redaction of the
        # same target must find the payload gone, not queue a second redaction record.
        with self._redacting:
            self._check_open()
            for seq in seqs:
                if type(seq) is not int or not 0 <= seq < self._sequencer.size:
                    raise InvalidInput(
                        f"cannot redact seq {seq!r}: the log holds seqs "
                        f"0..{self._sequencer.size - 1}"
                    )
            if not seqs:
                raise InvalidInput("a redaction needs at least one target seq")
            self.wait_for(seqs[-1])
            payload["targets"] = [redaction.target_of(self._sink.read_record(s)) for s in seqs]
            entry = Entry.control("redaction", payload)
            with self._assign:
                self._check_open()
                ops, records = self._sequencer.assign([entry], self.now())
                targets = redaction.targets_by_segment(seqs, records[0].seq, self.seg_bits)
                pending = Pending(records, self._enqueue([*ops, RedactionRewrite(targets)]))
            return pending.wait()[0]

    def checkpoint(self) -> None:
        """Write a signed checkpoint of everything durable now."""
        with self._assign:
            self._check_open()
            pending = Pending([], self._enqueue([WriteCheckpoint()]))
        pending.wait()

    def add_listener(self, listener: Callable[[list[Record]], None]) -> None:
        """Call `listener(records)` on the writer thread after each durable batch. Keep it quick."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[list[Record]], None]) -> None:
        self._listeners.remove(listener)

    def wait_for(self, seq: int, timeout: float | None = None) -> bool:
        """Block until record `seq` is durable (the log holds more than `seq` records); False on
        timeout. Raises WriterClosed when a failed write means it never will be."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._durable_size > seq or self._finished or self._failure.stopped,
                timeout,
            )
            if self._durable_size <= seq and self._failure.stopped:
                raise self._failure.error(f"record {seq} will never be durable: ")
            return done

    def close(self) -> None:
        """Append `log.close`, write the final checkpoint, release the storage and the lock."""
        with self._assign:
            already, self._closing = self._closing, True
            if not already:
                ops: list[Operation] = [CloseLog()]
                if not self._failure.stopped:
                    entry = Entry.control("log.close", {})
                    ops[:0] = self._sequencer.assign([entry], self.now())[0]
                self._enqueue(ops)
        self._thread.join()
        self._closed = True  # also when a failed reopen had stopped the thread already
        if not already:
            self._sink.close()
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._failure.stopped:
            raise self._failure.error()
        if self._closing:
            raise WriterClosed(f"the writer of {self.log_dir} is closed")

    def _enqueue(self, ops: Sequence[Operation]) -> Settlement:
        """Queue `ops` for the writer thread; returns the settlement their callers wait on."""
        with self._cond:
            if not self._queue:
                self._cond.notify()  # the writer thread only ever waits on an empty queue
            self._queue += ops
            group = self._group
            if group is None:
                group = self._group = Settlement()
            return group

    # ---- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._finished:
            with self._cond:
                while not self._queue:
                    if not self._cond.wait(self._checkpoint_wait()):
                        break
                ops, self._queue = self._queue, []
                group, self._group = self._group, None
            if ops:
                self._process(ops, group)
            if not self._failure.stopped and not self._finished:
                self._checkpoint_if_due()

    def _process(self, ops: list[Operation], group: Settlement | None) -> None:
        published: list[Record] = []
        error: BaseException | None = None
        if not self._failure.stopped:
            try:
                self._execute(ops, published)
            except Exception as exc:  # an I/O error, or a bug: never leave a caller waiting
                self._fail(exc)
        if self._failure.stopped:
            error = self._failure.error()
            published = []
            if any(type(op) is CloseLog for op in ops):
                self._finished = True
        with self._cond:
            if self._finished:
                self._closed = True
            self._cond.notify_all()  # wake wait_for() callers
        if published:
            for listener in self._listeners:
                listener(published)
        if group is not None:
            waiters = group.settle(error)
            if waiters:
                wake_waiters(waiters)

    def _execute(self, ops: Sequence[Operation], published: list[Record] | None = None) -> None:
        """Commit the ops in order through the sink; every line is durable when this returns."""
        lines: list[bytes] = []
        records: list[Record] = []
        leaves: list[bytes] = []
        tree = None  # the log's compact range after the lines gathered so far
        for op in ops:
            if isinstance(op, AppendLines):
                lines += op.lines
                records += op.records
                leaves += op.leaves
                tree = op.tree
                continue
            if lines:
                self._commit(Batch(lines, records, leaves), tree, published)
                lines, records, leaves = [], [], []
            if isinstance(op, StartSegment):
                WriteFailure.check(self._sink.start_segment(op))
                self._made_durable([op.record], op.tree, published)
                if op.checkpoint is not None:
                    self._checkpoint_installed(op.record.seq)
            elif isinstance(op, WriteCheckpoint):
                self._write_checkpoint()
            elif isinstance(op, RedactionRewrite):
                self._write_checkpoint()  # it must cover the redaction record
                self._sink.rewrite_redacted(op)
            elif isinstance(op, CloseLog):
                self._write_checkpoint()
                self._finished = True
        if lines:
            self._commit(Batch(lines, records, leaves), tree, published)

    def _commit(
        self, batch: Batch, tree: CompactRange | None, published: list[Record] | None
    ) -> None:
        assert tree is not None  # every run of lines carries the range after it (sequencer.py)
        WriteFailure.check(self._sink.commit(batch))
        self._made_durable(batch.records, tree, published)

    def _made_durable(
        self, records: list[Record], tree: CompactRange, published: list[Record] | None
    ) -> None:
        # The sequencer's copy of its range after these lines: never changed after, so it can
        # stand as the durable tree that checkpoints sign.
        self._durable = tree
        self._durable_size = tree.size
        if published is not None:
            published += records

    # ---- checkpoints -----------------------------------------------------------------------

    def _checkpoint_wait(self) -> float | None:
        if self._durable_size <= self._cp_size or self._failure.stopped:
            return None
        return max(0.0, self._cp_time + self.checkpoint_interval - time.monotonic())

    def _checkpoint_if_due(self) -> None:
        if (
            self._durable_size > self._cp_size
            and time.monotonic() - self._cp_time >= self.checkpoint_interval
        ):
            try:
                self._write_checkpoint()
            except OSError as exc:
                self._fail(exc)

    def _write_checkpoint(self) -> None:
        """Sign everything durable and install it as the newest checkpoint."""
        size = self._durable_size
        text = sign_checkpoint(self.key, size, self._durable.root())
        self._sink.install_checkpoint(SignedCheckpoint(text, size))
        self._checkpoint_installed(size)

    def _fail(self, exc: BaseException) -> None:
        """Stop taking appends after a failed commit; the sink drops what is not durable."""
        if self._failure.stop(exc):
            self._sink.abandon()

    def _checkpoint_installed(self, size: int) -> None:
        self._cp_size = max(size, self._cp_size)
        self._cp_time = time.monotonic()


def _check_seg_bits(seg_bits: int) -> None:
    if not 2 <= seg_bits <= 40:
        raise InvalidInput(f"seg_bits {seg_bits} is outside 2..40")
