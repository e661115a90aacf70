"""Why the writer stopped after a failed write, and the typed error it refuses with.

Any sink answer but COMMITTED, and any exception from the sink, stops the writer (sink.py): it
settles every waiter with a typed error and refuses appends, because records after a failed
write could land after a partial line. `WriteFailure` is that state, held by the writer
(writer.py): a failed commit sets it, every later call reads the refusal from it, and
`LogWriter.reopen()` clears it once recovery has healed the directory. It does no I/O: whether
the sink must drop what is not durable is its answer to the writer, which calls the sink.
"""

from __future__ import annotations

from .errors import WriterClosed
from .sink import CommitRefused, CommitResult, Committed, CommitUnknown, Refused, Unknown


class NotCommitted(Exception):
    """A sink's answer other than COMMITTED, on its way out of the writer's commit loop."""

    def __init__(self, answer: Refused | Unknown) -> None:
        super().__init__(answer)
        self.answer = answer


class WriteFailure:
    """The cause that stops a writer (None while it takes appends), as the typed error."""

    __slots__ = ("_cause",)

    def __init__(self) -> None:
        # A sink's answer (Refused, Unknown) or the exception of a failed write.
        self._cause: BaseException | Refused | Unknown | None = None

    @property
    def stopped(self) -> bool:
        return self._cause is not None

    def error(self, prefix: str = "") -> WriterClosed:
        """The refusal every waiter and every later call gets: CommitRefused or CommitUnknown
        for a sink's answer, else WriterClosed whose `cause` is the storage's own error."""
        cause = self._cause
        if type(cause) is Refused:
            return CommitRefused(cause.owner)
        if type(cause) is Unknown:
            return CommitUnknown(cause.reason)
        error = WriterClosed(
            f"{prefix}the writer stopped after a failed write ({cause}); reopen the log"
        )
        error.cause = cause if isinstance(cause, BaseException) else None
        return error

    @staticmethod
    def check(answer: CommitResult) -> None:
        """Raise NotCommitted unless the sink answered COMMITTED."""
        if not isinstance(answer, Committed):
            raise NotCommitted(answer)

    def stop(self, exc: BaseException) -> bool:
        """Stop on `exc`; True when the sink must drop what is not durable (a failed write, not
        an answer: a refused or unknown commit wrote nothing the sink could cut back)."""
        if isinstance(exc, NotCommitted):
            self._cause = exc.answer
            return False
        refused = getattr(exc, "refused", None)
        if type(refused) is Refused:  # a sink's error that stands for a fencing refusal
            self._cause = refused
            return False
        self._cause = exc
        return True

    def clear(self) -> None:
        """The log was recovered: appends are taken again."""
        self._cause = None
