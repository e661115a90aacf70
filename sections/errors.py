"""Typed errors of the memory model. A refused command appends nothing."""

from __future__ import annotations

from eventstore.errors import InvalidInput, LedgerError


class MemoryError_(LedgerError):  # noqa: N801 - `MemoryError` is a builtin
    """Base class of the memory model's errors."""


class ConfigError(InvalidInput):
    """A section configuration that cannot work, e.g. policy `none` on a bounded section."""


class NotFound(MemoryError_, LookupError):
    """Unknown tenant/session, section or item. Another tenant's session is also 'not found'."""


class SessionNotFound(NotFound):
    pass


class SectionNotFound(NotFound):
    pass


class ItemNotFound(NotFound):
    pass


class SessionExists(MemoryError_):
    pass


class Refused(MemoryError_):
    """A write that the section's rules refuse: immutable, policy `refuse`, or too large."""


class ImmutableSection(Refused):
    pass


class BudgetExceeded(Refused):
    pass


class ItemTooLarge(Refused):
    pass


class NotAdmitted(BudgetExceeded):
    """Under the `priority` policy the incoming item competes with the residents and ranked
    lowest: it is not admitted and nothing is appended (docs/sections.md, Policies)."""


class SessionEnded(MemoryError_):
    """A write to a session after its `session.ended` record (docs/sections.md, Ending)."""


class IdempotencyConflict(MemoryError_):
    """An idempotency key reused for a different command."""


class VersionConflict(MemoryError_):
    """The caller's expected session version is stale."""

    def __init__(self, session: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session!r} is at version {actual}, not {expected}: reload and retry"
        )
        self.expected = expected
        self.actual = actual
