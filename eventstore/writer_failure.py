"""What the writer does after a failed write: refuse appends with the cause, and reopen in place.

Any sink answer but COMMITTED, and any exception from the sink, stops the writer (sink.py): it
settles every waiter with a typed error and refuses appends, because records after a failed
write could land after a partial line. `FailedWrites` is the part of `LogWriter` (writer.py)
that keeps that state and ends it: `reopen()` runs recovery on the same directory, under the
LOCK the writer still holds, exactly as `LogWriter.open()` does, and starts a new writer thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from . import file_recovery
from .checkpoint import SigningKey
from .errors import WriterClosed
from .file_sink import Durability, FileSink
from .record import Record
from .sequencer import Sequencer
from .sink import (
    CloseLog,
    CommitRefused,
    CommitResult,
    Committed,
    CommitUnknown,
    DurabilitySink,
    Refused,
    Unknown,
)


class FailedWrites:
    """Set up by `LogWriter._assemble`; see eventstore/writer.py for what each attribute holds."""

    log_dir: Path | None
    durability: Durability | None
    key: SigningKey
    seg_bits: int
    last_resume: dict | None
    _sink: DurabilitySink
    _failed: BaseException | CommitResult | None
    _assign: threading.Lock
    _closing: bool
    _closed: bool
    _finished: bool
    _thread: threading.Thread
    _listeners: list[Callable[[list[Record]], None]]
    _clock: Callable[[], int]
    _salts: Callable[[], bytes] | None

    @property
    def failure(self) -> BaseException | None:
        """Why the writer refuses appends after a failed write (None while it takes them):
        the error it will raise, whose `cause` is the storage's own error."""
        return None if self._failed is None else self._stopped_error()

    def reopen(self) -> dict | None:
        """After a failed write: recover the directory and take appends again, in place.

        The failed writer's thread is stopped, the directory is recovered as `open()` does
        (what was not durable is cut off, `log.resume` is appended) and a new thread starts.
        Listeners stay registered and get the `log.resume` batch, so they see no gap: the seqs
        given to records that were never durable are given again. Returns the `log.resume`
        payload, or None when there was nothing to heal. Raises (and stays failed, ready to be
        reopened again) while the cause lasts: the caller retries, with backoff.
        """
        if self.log_dir is None:
            raise WriterClosed("only a writer made by LogWriter.open() can be reopened")
        with self._assign:
            if self._failed is None:
                return None
            if self._closing:
                raise WriterClosed(f"the writer of {self.log_dir} is closed")
            if self._thread.is_alive():
                self._enqueue([CloseLog()])  # a failed writer settles it and stops
                self._thread.join()
                self._finished = self._closed = False  # still failed: close() must still work
            self._sink.close()
            sink = FileSink(self.log_dir, self.seg_bits, self.durability)  # type: ignore[arg-type]
            sink.fsync_observer = self._sink.fsync_observer
            published: list[Record] = []
            try:
                recovered = file_recovery.recover(
                    self.log_dir, self.key, self.seg_bits, False, sink
                )
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
                self._failed = exc
                raise
            finally:
                # Before any new batch, so listeners keep log order; also what a reopen that
                # failed later made durable (a log.resume), which the next one continues after.
                if published:
                    for listener in self._listeners:
                        listener(published)
            self.last_resume = recovered.resume
            self._queue, self._group = [], None
            self._failed = None
            self._finished = self._closed = False
            self._start_thread()
            return recovered.resume

    def _stopped_error(self, prefix: str = "") -> WriterClosed:
        failed = self._failed
        if type(failed) is Refused:
            return CommitRefused(failed.owner)
        if type(failed) is Unknown:
            return CommitUnknown(failed.reason)
        error = WriterClosed(
            f"{prefix}the writer stopped after a failed write ({failed}); reopen the log"
        )
        error.cause = failed if isinstance(failed, BaseException) else None
        return error

    def _check_answer(self, answer: CommitResult) -> None:
        if type(answer) is not Committed:
            raise _NotCommitted(answer)

    def _fail(self, exc: BaseException) -> None:
        """Stop taking appends after a failed commit; the sink drops what is not durable."""
        if isinstance(exc, _NotCommitted):
            self._failed = exc.answer
            return
        refused = getattr(exc, "refused", None)
        if type(refused) is Refused:  # a sink's error that stands for a fencing refusal
            self._failed = refused
            return
        self._failed = exc
        self._sink.abandon()


class _NotCommitted(Exception):
    """A sink's answer other than COMMITTED, on its way out of `_execute`."""

    def __init__(self, answer: CommitResult) -> None:
        super().__init__(answer)
        self.answer = answer
