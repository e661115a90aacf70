"""What the runner (sections/runtime/runner.py) decides in batches: a caller's `Ticket`, and the `Group`
of tickets whose records go to the writer in one submit. No I/O and no locking here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from eventstore.record import Record
from eventstore.writer import Entry, Pending
from sections.model.commands import Decision
from sections.model.state import MemoryState


class Ticket:
    """One command waiting to be decided, then its outcome: a Pending (its records are in a
    group's append, the first at `record`), a seq (an idempotent retry: the record the first
    call made), or None (no record needed); or the `error` its caller gets instead."""

    __slots__ = (
        "decide", "idem", "key", "session_local", "decided", "decision", "outcome", "record",
        "error", "future",
    )  # fmt: skip

    def __init__(
        self,
        decide: Callable[[MemoryState], Decision | None],
        idem: tuple | None,
        key: tuple | None,
        session_local: bool,
    ) -> None:
        self.decide = decide
        self.idem = idem
        self.key = key  # (tenant, session): what a session-local decision reads and changes
        self.session_local = session_local
        self.decided = False  # set under the memory's lock by whoever decides it
        self.decision: Decision | None = None
        self.outcome: Pending | int | None = None
        self.record: Record | None = None
        self.error: BaseException | None = None
        self.future: asyncio.Future | None = None  # asyncio callers: settled once acknowledged


class Group:
    """Tickets decided against one state whose records are appended in one submit, with one ts:
    session-local commands on distinct sessions (they commute), or one command alone."""

    __slots__ = ("tickets", "firsts", "entries", "keys", "ts")

    def __init__(self) -> None:
        self.tickets: list[Ticket] = []
        self.firsts: list[int] = []  # each ticket's first entry in `entries`
        self.entries: list[Entry] = []
        self.keys: set[tuple | None] = set()
        self.ts = 0

    def admits(self, ticket: Ticket) -> bool:
        """Whether `ticket` may be decided before this group's records are applied."""
        return ticket.session_local and ticket.key not in self.keys

    def add(self, ticket: Ticket, entries: list[Entry]) -> None:
        self.tickets.append(ticket)
        self.firsts.append(len(self.entries))
        self.entries.extend(entries)
        self.keys.add(ticket.key)
