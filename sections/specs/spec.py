"""A memory command, defined once: its steps, what each is given, and what the caller gets.

A `CommandSpec` names a command's decide function, the idempotency type its key is recorded
under, and how the caller's result is built from the durable record and the `Decision`. The
engine (`run`, `run_async`: sections/runtime/engine.py) is the only code that executes a spec,
so the sync API, its `*_async` twin and the HTTP route of a command cannot disagree on any of
these. The specs themselves are in the command table (sections/specs/command_specs.py).

A spec runs in up to three steps, each given the `CommandContext` (sections/specs/context.py):

- `prepare` (optional), outside the lock, may read files or the search index; it returns the
  arguments the decision needs (the async runner runs it on a worker thread);
- `decide`, under the memory's lock and without I/O, over the state: returns a `Decision` (the
  records to append and what the caller gets besides), or None when no record is needed;
- `result`, once the records are durable: builds what the caller gets. With `result_blocks` it
  does I/O (reads contents back from the log, redacts, summarizes) and the async runner runs it
  on a worker thread; `result_blocks` may instead be a function of the decision that says
  whether this result does (a read whose contents are all inline needs no thread). An
  idempotent retry calls it with the first call's record and no decision, so the result of a
  command with an idempotency type depends on the record alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.errors import IdempotencyConflict
from sections.model.commands import Command, Decision, payload
from sections.model.state import MemoryState
from sections.specs.context import CommandContext


class Call(NamedTuple):
    """One command as its caller asked for it."""

    tenant: str
    session: str | None  # None: a command of the tenant's (search, observe, retention)
    args: tuple  # what the command's argument function made of the caller's arguments
    idem: str | None  # the idempotency key
    expected: int | None  # the session version the caller expects (compare-and-set)

    @property
    def session_id(self) -> str:
        """The session of a command on one session, which always names it."""
        assert self.session is not None, "a command on one session names it"
        return self.session


Decide = Callable[[CommandContext, MemoryState, Call], Decision | None]
Prepare = Callable[[CommandContext, Call], tuple]  # -> the args the decision is given
Result = Callable[[CommandContext, Record | None, Decision | None], Any]


def the_record(_ctx: CommandContext, record: Record | None, _decision: Decision | None) -> Any:
    """A command's result when the caller gets its (first) record."""
    return record


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str
    decide: Decide
    idempotency_type: str | None = None  # None: the command takes no idempotency key
    result: Result = the_record
    prepare: Prepare | None = None
    result_blocks: bool | Callable[[Decision | None], bool] = False
    # The decision reads only the command's own session and its records change only that
    # session: concurrent commands on distinct sessions may then be decided against one state
    # and appended together (sections/runtime/engine.py). Anything else is decided alone.
    session_local: bool = False


def one(command: Command) -> Decision:
    """The decision of a command that appends one record and answers nothing besides."""
    return Decision((command,))


def decided(decision: Decision | None) -> Decision:
    """The decision a result step was given, for a command whose decide always makes one:
    only an idempotent retry (of a command with a key) or a decision of None comes without."""
    assert decision is not None, "this command always decides"
    return decision


def appended(record: Record | None) -> Record:
    """The record a result step was given, for a command that always appends one."""
    assert record is not None, "this command always appends"
    return record


def check_key(key: str | None) -> None:
    """An idempotency key is None (no key) or a non-empty string: an empty one would be a key
    shared by every caller that sends one."""
    if key is not None and (type(key) is not str or not key):
        raise InvalidInput("an idempotency key must be a non-empty string")


def replayed_from(record: Record, section: str, command: str) -> Record:
    """The first call's record of an idempotent retry, which must be one this command makes (a
    record of `section`): a key is remembered per session and record type, so another kind of
    write to the same session under the key (an item added to `_tenant` through /v1, before an
    assertion of facts) is a conflict, never answered as this command's."""
    if record.section != section:
        key = payload(record).get("idem") if record.has_payload else None
        raise IdempotencyConflict(
            f"idempotency key {key!r} was used for another kind of write (seq {record.seq}, "
            f"{record.type} in section {record.section!r}), not a {command}: use a new key"
        )
    return record


def what_was_decided(
    _ctx: CommandContext, _record: Record | None, decision: Decision | None
) -> Any:
    """A command's result when the caller gets what its decision found (a read's views, ...)."""
    return decided(decision).result
