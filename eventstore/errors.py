"""Typed errors of the log. Every refusal appends nothing."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class for every error raised by ledgermem."""


class InvalidInput(LedgerError, ValueError):
    """Input the log refuses: nothing was appended."""


class InvalidIdentifier(InvalidInput):
    """A tenant, session, section or type that is not `[A-Za-z0-9._:@/+-]{1,128}`."""


class InvalidPayload(InvalidInput):
    """A payload that is not I-JSON (docs/format.md section 4)."""


class StalePosition(LedgerError):
    """The caller's expected log size no longer matches: nothing was appended."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"expected log size {expected}, but the log holds {actual} records: nothing was appended"
        )
        self.expected = expected
        self.actual = actual


class LockHeld(LedgerError):
    """Another writer holds the log's LOCK. `holder` is what the holder wrote into it
    (`pid=... host=... since=...`), or "holder unknown"."""

    def __init__(self, message: str, holder: str = "holder unknown") -> None:
        super().__init__(message)
        self.holder = holder


class CorruptLog(LedgerError):
    """The files are damaged in a way that is not a crash leftover: the writer refuses to open."""


class WriterClosed(LedgerError):
    """The writer was closed, or stopped taking appends after a failed write.

    `cause` is the storage's error that stopped it (an OSError with its errno: ENOSPC, EMFILE,
    EIO...), or None when it was closed or refused for another reason."""

    cause: BaseException | None = None


class BadKey(LedgerError):
    """A signing or verifier key that cannot be read, is malformed, or does not match the log."""


class InvalidProof(LedgerError):
    """An inclusion or consistency proof that does not verify."""
