"""How the engine (sections/runtime/engine.py) decides commands in batches: a caller's `Ticket`,
and the `Group` of tickets whose records go to the writer in one submit. No I/O and no locking
here.

A caller does not take the lock for itself: it files a `Ticket` and the tickets filed meanwhile
are decided together, one after another, under ONE acquisition of the lock:

- asyncio: the tickets filed during one turn of the event loop; the first one schedules the
  batch's decision for the loop's next turn (`call_soon`), the others join it;
- threads: the tickets filed while another thread held the lock; whichever thread takes the
  lock next decides every ticket waiting then (its own among them), so a thread that gets the
  lock after that finds its ticket decided and only waits for the disk.

Within a batch, consecutive `session_local` commands on distinct sessions form a group: each is
decided against the state as it is, its records encoded (`Entry`, the JCS bytes), and the whole
group goes to the writer in ONE `submit` and is then applied in log order. A command that is not
session-local, or a second command on a session already in the group, closes the group first
(submit, apply), so it sees every earlier command's records applied: expected_version checks,
idempotency keys and eviction choices stay exact. Decisions of distinct sessions that read only
their own session commute, so the state after the group equals the state after applying the
records one by one, which is what replay does (rebuild == live). Each ticket keeps exactly its
own records and its own error: a decision that raises fails that ticket alone, with nothing of
it appended; a group whose submit fails fails its tickets alone.

Durability is waited for once per batch, not per command: asyncio awaits each group's `Pending`
in one task and then resolves every ticket's future (one wake-up of each waiting coroutine);
threads wait on their group's `Pending`, which every thread of the group shares.
"""

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

    @property
    def answered(self) -> bool:
        """Decided, and its decision appends nothing: answered already."""
        return self.decided and (self.decision is None or not self.decision.records)

    def settle(self) -> None:
        """Wake an asyncio caller: with its error, or to collect its outcome."""
        future = self.future
        if future is None or future.done():  # a caller that was cancelled meanwhile
            return
        if self.error is not None:
            future.set_exception(self.error)
        else:
            future.set_result(None)


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
