"""The engine under a `Memory`: the runner of its commands over one log's live state.

It holds the `LiveState` (sections/runtime/live_state.py: the log, the state folded from it and
the search index) and the settings the memory was opened with; it runs the command table
(sections/specs/command_specs.py) and is the `CommandContext` (sections/specs/context.py) every
spec function is given. `Memory` (sections/runtime/memory.py) is the public face on it.

`run` (threads) and `run_async` (asyncio; the HTTP service awaits it) take a spec through its
steps; `append` is the primitive under both. Callers do not take the lock for themselves: they
file tickets, decided in batches under one acquisition of the lock, appended group by group in
one submit each, and acknowledged once durable (sections/runtime/batching.py says how). The lock
is never held while waiting for the disk, so concurrent callers share each fsync, state changes
in exactly log order, and a caller returns only once its records are durable (fdatasync).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from eventstore.errors import InvalidInput, WriterClosed
from eventstore.record import Record
from eventstore.writer import Entry, Pending
from sections.errors import IdempotencyConflict, NeedsPreparation, NotFound
from sections.model import commands
from sections.model.commands import Decision
from sections.model.compaction import Summarizer, checked_summarizer
from sections.model.config import MemoryConfig, load_config
from sections.model.item import Item
from sections.model.state import MemoryState, SessionState
from sections.model.tokens import DEFAULT_COUNTER, TokenCounter, counter_named
from sections.retrieval import summaries
from sections.retrieval.search import Hit, Query
from sections.retrieval.views import ItemView
from sections.runtime.batching import Group, Ticket
from sections.runtime.live_state import LiveState
from sections.runtime.tracing import Tracing
from sections.specs import session_specs
from sections.specs.retention_specs import ERASE_DELETED
from sections.specs.spec import Call, CommandSpec, check_key

T = TypeVar("T")
Decide = Callable[[MemoryState], Decision | None]


class Engine:
    """The runner of a memory's commands over its `LiveState`; the specs' `CommandContext`."""

    def __init__(
        self,
        live: LiveState,
        *,
        config: MemoryConfig,
        counter: TokenCounter,
        tenant: str,
        summarizer: Summarizer,
        dedup_window_us: int,
    ) -> None:
        self.live = live
        self.config = config
        self.counter = counter
        self._counters = {counter.name: counter}
        self.tenant = tenant
        self.summarizer = summarizer
        self.dedup_window_us = dedup_window_us
        # A tracer (sections/runtime/tracing.py), or None: then nothing is traced, at the cost of
        # one attribute test per command and per group. Set it before commands run.
        self.tracing: Tracing | None = None
        self._decision_ts = 0  # the ts of the records being decided: valid under the lock
        self._filed: collections.deque[Ticket] = collections.deque()  # threads' tickets
        self._loop_batches: dict[asyncio.AbstractEventLoop, list[Ticket]] = {}
        self._acknowledging: set[asyncio.Task] = set()  # the event loop keeps only weak ones
        # With tracing: each appended group's Pending to the end of its span, taken once by
        # whoever sees the group durable first (dict.pop is atomic)
        self.append_spans: dict[Pending, Callable[[BaseException | None], None]] = {}

    def recover(self) -> None:
        """What a crash may have left undone: the redactions of erases appended before it, the
        erases of retention's deletions, the records a restart appends (process-lifetime items
        cleared, uncommitted commit-lifetime ones reverted) and the summaries of sessions that
        ended just before it."""
        self._finish_erasures()
        state = self.live.state
        for command in commands.restart(state):
            self.append(partial(_decided, Decision((command,))))
        for session in summaries.unsummarized(state):
            summarize = session_specs.summarize
            self.append(partial(summarize, self, tenant=session.tenant, session_id=session.id))

    def heal(self) -> bool:
        """After a failed write: the live state loaded from the reopened log (`Memory.heal`)."""
        if not self.live.heal():
            return False
        self.erase_retained()  # a retention erase the failure kept from being appended
        return True

    def _finish_erasures(self) -> None:
        self.live.finish_redactions()
        self.erase_retained()  # a retention erase a crash kept from being appended

    # ---- running a command ---------------------------------------------------------------------

    def run(self, spec: CommandSpec, tenant: str, session: str | None = None, args: tuple = (),
            idempotency_key: str | None = None, expected_version: int | None = None) -> Any:  # fmt: skip
        """Run one command of the table (sections/specs/command_specs.py); returns once durable."""
        check_key(idempotency_key)
        tracing = self.tracing
        if tracing is None:
            return self._run(spec, Call(tenant, session, args, idempotency_key, expected_version))
        with tracing.command(spec.name, tenant, session) as span:
            result = self._run(spec, Call(tenant, session, args, idempotency_key, expected_version))
            span.done(result)
            return result

    def _run(self, spec: CommandSpec, call: Call) -> Any:
        if spec.prepare is not None:
            call = call._replace(args=spec.prepare(self, call))
        while True:
            ticket = self._ticket(spec, call)
            filed = self._filed
            filed.append(ticket)
            with self.live.lock:
                if not ticket.decided:  # nobody took it yet: decide everything filed meanwhile
                    self._decide_batch([filed.popleft() for _ in range(len(filed))])
            error = ticket.error
            if type(error) is NeedsPreparation:  # slow work first, outside the lock
                error.prepare()
                continue
            if error is not None:
                raise error
            break
        outcome = ticket.outcome
        if type(outcome) is Pending:
            self._wait(outcome)
            self.live.maybe_snapshot()
        return self._finish(spec, ticket)

    async def run_async(self, spec: CommandSpec, tenant: str, session: str | None = None,
                        args: tuple = (), idempotency_key: str | None = None,
                        expected_version: int | None = None) -> Any:  # fmt: skip
        """`run` for asyncio: the same steps; those that read files go to a worker thread."""
        check_key(idempotency_key)
        call = Call(tenant, session, args, idempotency_key, expected_version)
        tracing = self.tracing
        if tracing is None:
            return await self._run_async(spec, call)
        with tracing.command(spec.name, tenant, session) as span:
            result = await self._run_async(spec, call)
            span.done(result)
            return result

    async def _run_async(self, spec: CommandSpec, call: Call) -> Any:
        if spec.prepare is not None:
            call = call._replace(args=await asyncio.to_thread(spec.prepare, self, call))
        loop = asyncio.get_running_loop()
        while True:
            ticket = self._ticket(spec, call)
            future = ticket.future = loop.create_future()
            batch = self._loop_batches.get(loop)
            if batch is None:
                batch = self._loop_batches[loop] = []
                loop.call_soon(self._decide_loop_batch, loop)
            batch.append(ticket)
            try:
                await future  # decided, and durable if it appended (raises its error)
            except NeedsPreparation as needs:  # slow work first, outside the lock
                await asyncio.to_thread(needs.prepare)
                continue
            break
        outcome = ticket.outcome
        if type(outcome) is Pending or outcome is None:
            decision = ticket.decision
            if outcome is None and decision is not None and decision.durable_at is not None:
                await asyncio.to_thread(self.live.writer.wait_for, decision.durable_at)
            return await self._result_async(spec, ticket.record, decision)
        assert type(outcome) is int  # an idempotent retry: the first call's record
        replayed = await asyncio.to_thread(self._replayed, outcome)
        return await self._result_async(spec, replayed, None)

    def append(self, decide: Decide) -> Record | None:
        """The primitive under every command: run `decide(state)` under the lock, append the
        records of its Decision and apply them, and return the first once durable (None when the
        decision needs no record). Commands go through `run`; this is for the memory's own
        records (restart clears, summaries) and for tests that write what a crash leaves."""
        ticket = Ticket(decide, None, None, False)
        with self.live.lock:
            self._decide_batch([ticket])
        if ticket.error is not None:
            raise ticket.error
        outcome = ticket.outcome
        if outcome is None:
            return None
        assert type(outcome) is Pending  # no idempotency key: never a retry's seq
        self._wait(outcome)
        self.live.maybe_snapshot()
        return ticket.record

    # ---- deciding a batch (sections/runtime/batching.py) ---------------------------------------

    def _ticket(self, spec: CommandSpec, call: Call) -> Ticket:
        decide = spec.decide
        idem = None
        if call.idem is not None and spec.idempotency_type is not None:
            idem = (call.tenant, call.session, call.idem, spec.idempotency_type)
        key = (call.tenant, call.session)
        return Ticket(lambda state: decide(self, state, call), idem, key, spec.session_local)

    def _decide_batch(self, tickets: list[Ticket]) -> list[tuple[Pending, list[Ticket]]]:
        """Under the lock: decide the tickets in order, appending their records group by group.
        Each ticket ends with its outcome or its error; returns the groups appended, in log
        order, with their pending appends."""
        appended: list[tuple[Pending, list[Ticket]]] = []
        try:
            self._decide_each(tickets, appended)
        except BaseException as exc:  # not one command's error: no ticket may be left unanswered
            for ticket in tickets:
                if ticket.outcome is None and ticket.error is None and not ticket.answered:
                    ticket.decided, ticket.error = True, exc
        return appended

    def _decide_each(self, tickets: list[Ticket], appended: list) -> None:
        live = self.live
        group = Group()
        for ticket in tickets:
            if group.entries and not group.admits(ticket):
                self._append_group(group, appended)
                group = Group()
            ticket.decided = True
            try:
                live.refuse_if_failed()
                if ticket.idem is not None and self._replay_seq(ticket, ticket.idem):
                    continue
                if not group.entries:  # the records of one group share one ts
                    self._decision_ts = group.ts = live.writer.now()
                decision = ticket.decide(live.state)
                ticket.decision = decision
                if decision is None or not decision.records:
                    continue
                entries = [
                    Entry(c.tenant, c.session, c.section, c.type, c.payload)
                    for c in decision.records
                ]
            except BaseException as exc:  # this command fails alone; nothing of it is appended
                ticket.error = exc
                continue
            group.add(ticket, entries)
            if not ticket.session_local:
                self._append_group(group, appended)
                group = Group()
        if group.entries:
            self._append_group(group, appended)

    def _replay_seq(self, ticket: Ticket, idem: tuple) -> bool:
        """An idempotency key seen before: the ticket's outcome is the seq of the record the
        first call made (True), or IdempotencyConflict for another command under the key."""
        tenant, session_id, key, type_ = idem
        session = self.live.state.sessions.get((tenant, session_id))
        if session is None or key not in session.idempotency:
            return False
        seq, _, made = session.idempotency[key]
        if made != type_:
            raise IdempotencyConflict(
                f"idempotency key {key!r} was used for a {made} (seq {seq}), not a {type_}: "
                "use a new key for a different command"
            )
        ticket.outcome = seq
        return True

    def _append_group(self, group: Group, appended: list) -> None:
        """Submit the group's entries in one append and apply them in log order. A failed submit
        fails the group's tickets; a failed apply stops the memory (heal() rebuilds it)."""
        try:
            pending = self.live.submit(group.entries, group.ts)
        except BaseException as exc:
            for ticket in group.tickets:
                ticket.error = exc
            return
        records = pending.records
        tracing = self.tracing
        if tracing is not None:  # from the submit until a waiter sees the group durable
            self.append_spans[pending] = tracing.append(records, len(group.tickets))
        try:
            self.live.apply(records, group.entries)
        except WriterClosed as error:  # the log has records the projections do not
            for ticket in group.tickets:
                ticket.error = error
            self._end_append_span(pending, error)  # nobody waits for this group
            return
        for ticket, first in zip(group.tickets, group.firsts, strict=True):
            ticket.outcome = pending
            ticket.record = records[first]
        appended.append((pending, group.tickets))

    def _decide_loop_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop's turn after tickets were filed: decide them all, then settle each ticket's
        future: at once when it appended nothing, after its group is durable when it did."""
        batch = self._loop_batches.pop(loop)
        tickets = [t for t in batch if t.future is not None and not t.future.cancelled()]
        with self.live.lock:
            appended = self._decide_batch(tickets)
        waiting: set[int] = set()
        for _, group in appended:
            waiting.update(map(id, group))
        for ticket in tickets:
            if id(ticket) not in waiting:
                ticket.settle()
        if appended:
            task = loop.create_task(self._durable(appended))
            self._acknowledging.add(task)
            task.add_done_callback(self._acknowledging.discard)

    async def _durable(self, appended: list[tuple[Pending, list[Ticket]]]) -> None:
        """Wait for each group's append in log order, then acknowledge its tickets."""
        live = self.live
        for pending, tickets in appended:
            try:
                await pending.wait_async()
            except WriterClosed as exc:
                live.failed = exc  # the state holds records the log will never have
                for ticket in tickets:
                    ticket.error = exc
                self._end_append_span(pending, exc)
            else:
                self._end_append_span(pending, None)
                if live.since_snapshot >= live.snapshot_every:
                    try:
                        await asyncio.to_thread(live.maybe_snapshot)
                    except BaseException as exc:  # durable, but the caller hears of it
                        for ticket in tickets:
                            ticket.error = exc
            for ticket in tickets:
                ticket.settle()

    # ---- after the decision --------------------------------------------------------------------

    async def _result_async(
        self, spec: CommandSpec, record: Record | None, decision: Decision | None
    ) -> Any:
        """The spec's result step, on a worker thread when it does I/O."""
        blocks = spec.result_blocks
        if blocks if isinstance(blocks, bool) else blocks(decision):
            return await asyncio.to_thread(spec.result, self, record, decision)
        return spec.result(self, record, decision)

    def _finish(self, spec: CommandSpec, ticket: Ticket) -> Any:
        """The caller's result once the ticket's records are durable (threads)."""
        outcome = ticket.outcome
        if type(outcome) is Pending:
            return spec.result(self, ticket.record, ticket.decision)
        if outcome is None:
            decision = ticket.decision
            if decision is not None and decision.durable_at is not None:
                self.live.writer.wait_for(decision.durable_at)  # show only durable state
            return spec.result(self, None, decision)
        assert type(outcome) is int  # an idempotent retry: the first call's record
        return spec.result(self, self._replayed(outcome), None)

    def _wait(self, pending: Pending) -> None:
        try:
            pending.wait()
        except WriterClosed as exc:
            self.live.failed = exc  # the state holds a record the log will never have
            self._end_append_span(pending, exc)
            raise
        self._end_append_span(pending, None)

    def _end_append_span(self, pending: Pending, error: BaseException | None) -> None:
        if self.append_spans:  # empty unless tracing
            end = self.append_spans.pop(pending, None)
            if end is not None:
                end(error)

    def _replayed(self, seq: int) -> Record:
        """An idempotent retry: the original record, once it is durable."""
        self.live.writer.wait_for(seq)
        record = self.live.reader.get(seq)
        if not record.has_payload:
            raise NotFound(f"the record this idempotency key made (seq {seq}) was erased")
        return record

    # ---- the CommandContext (sections/specs/context.py): what the specs use -------------------

    @property
    def decision_ts(self) -> int:
        """The ts of the records being decided: valid only inside a decide function."""
        return self._decision_ts

    def counter_for(self, config: MemoryConfig) -> TokenCounter:
        """The counter a session created with `config` counts with."""
        name = config.token_counter
        return self.counter if name is None else counter_named(name, self._counters)

    def counter_of(self, session: SessionState) -> TokenCounter:
        """The counter a session was created with (its `session.created` names it), so a log
        written with one counter goes on counting with it, whatever this memory's default."""
        return counter_named(session.counter["name"], self._counters)

    def content_of(self, item: Item) -> object:
        return self.live.content_of(item)

    def read(self, fn: Callable[[MemoryState], T]) -> T:
        return self.live.read(fn)

    def search(self, tenant: str, query: Query) -> list[Hit]:
        return self.live.search(tenant, query)

    def similar(
        self, tenant: str, text: str, sessions: tuple[str, ...] | None, top_k: int
    ) -> list[tuple[str, str, str, float]]:
        return self.live.similar(tenant, text, sessions, top_k)

    def state_at(self, seq: int) -> MemoryState:
        if self.live.writer.closed:
            raise WriterClosed("the memory is closed")
        return self.live.history.state_at(seq)

    def record_at(self, seq: int) -> Record:
        return self.live.record_at(seq)

    def payload_of(self, record: Record) -> dict | None:
        return self.live.history.payload_of(record)

    def session_records(self, tenant: str, session: str) -> tuple[list[Record], int]:
        return self.live.session_records(tenant, session)

    def fill(self, views: list[ItemView]) -> list[ItemView]:
        return self.live.fill(views)

    def redact_erased(self, seqs: list[int], reason: str, request: str) -> None:
        self.live.redact_erased(seqs, reason, request)

    def erase_retained(self) -> int:
        """Append the erase of every retention deletion with `erase` whose erase is not in the
        log yet, and redact (the commands that delete call this once their records are durable;
        open and heal, for what a crash interrupted). Returns how many were erased."""
        by_reason: dict[str, list[tuple[int, str, str]]] = {}
        for seq, (tenant, session_id, reason) in sorted(
            self.live.read(lambda state: list(state.pending_retention.items()))
        ):
            by_reason.setdefault(reason, []).append((seq, tenant, session_id))
        # One redaction per reason (a redaction record has one), of all its sessions at once.
        return sum(
            self.run(ERASE_DELETED, self.tenant, None, (deletions,))
            for deletions in by_reason.values()
        )


def engine_settings(
    config: MemoryConfig | str | Path | None,
    counter: TokenCounter | str | None,
    tenant: str,
    dedup_window_us: int,
    summarizer: Summarizer,
) -> dict[str, Any]:
    """What an engine is given (`Engine(live, **settings)`) from what a memory is opened with,
    checked before the log is opened."""
    if not isinstance(config, MemoryConfig):
        config = load_config(config) if config else MemoryConfig()
    # New sessions count with `counter` (an instance, or a built-in's name), else with the
    # config's `token_counter`, else o200k_base; a session keeps the one it was created with.
    if counter is None:
        counter = config.token_counter or DEFAULT_COUNTER
    if type(dedup_window_us) is not int or dedup_window_us < 0:
        raise InvalidInput("dedup_window_us must be a non-negative integer of microseconds")
    return {
        "config": config,
        "counter": counter_named(counter) if isinstance(counter, str) else counter,
        "tenant": tenant,
        "summarizer": checked_summarizer(summarizer),
        "dedup_window_us": dedup_window_us,
    }


def _decided(decision: Decision, _state: MemoryState) -> Decision:
    """A decision made already (what a restart clears), whatever the state."""
    return decision
