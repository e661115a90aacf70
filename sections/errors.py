"""Typed errors of the memory model. A refused command appends nothing."""

from __future__ import annotations

from eventstore.errors import InvalidInput, LedgerError


class MemoryError_(LedgerError):  # noqa: N801 - `MemoryError` is a builtin
    """Base class of the memory model's errors."""


class NeedsPreparation(Exception):  # noqa: N818 - a request to the runner, not a failure
    """Raised by a decision, under the memory's lock, that needs slow work done first (a
    runtime's summarizer, which may call a model): the runner calls `prepare()` outside the
    lock, then decides the command again. It never reaches the caller."""

    def __init__(self, prepare) -> None:
        super().__init__("work to do outside the memory's lock first")
        self.prepare = prepare


class ConfigError(InvalidInput):
    """A section configuration that cannot work, e.g. policy `none` on a bounded section."""


class FactConflict(InvalidInput):
    """A well-formed fact command the memory's state refuses: a source that is not a live item,
    a retraction of a fact not valid at that time. Still InvalidInput to the Python API; HTTP
    answers 409, as for any request its target's current state refuses."""


class UserConflict(InvalidInput):
    """A well-formed call its sessions' users refuse: an observation for the user of a session
    that has none (scope "user"), an MCP connection naming a user its session does not belong
    to. Still InvalidInput to the Python API; HTTP answers 409 `user_conflict`."""


class ConflictingSettings(ConfigError):
    """Settings each valid that cannot work together (policy `none` on a bounded mutable
    section, `compact_at_tokens` over `budget_tokens`): over HTTP a 422, like a budget that
    seed items exceed, rather than the 400 of a malformed setting."""


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


class SummarizerFailed(MemoryError_):
    """A compaction's summarizer raised or returned bad output: the command that needed the
    summary is refused and nothing is appended (docs/compaction.md)."""


class CannotCompact(Refused):
    """`compact_for_payload_error` found no compaction that makes the context fit the bytes
    asked for (what is left is protected, or not compactable): nothing is appended."""
