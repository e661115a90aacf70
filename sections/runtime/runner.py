"""How a command runs: decided with its concurrent neighbours under one lock, appended in one
submit, acknowledged once durable.

`CommandRunner` is the part of `Memory` (sections/runtime/memory.py) that executes the command table
(sections/specs/command_specs.py): `run` (threads) and `run_async` (asyncio; the HTTP service awaits
it) take a spec through its steps, `append` is the primitive under both.

Batches. A caller does not take the lock for itself: it files a `Ticket` (sections/runtime/batching.py)
and the tickets filed meanwhile are decided together, one after another, under ONE acquisition
of the lock:

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
threads wait on their group's `Pending`, which every thread of the group shares. The lock is
never held while waiting for the disk, so concurrent callers share each fsync, state changes in
exactly log order, and a caller returns only once its records are durable (fdatasync).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable

import orjson

from eventstore.errors import WriterClosed
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.writer import Entry, LogWriter, Pending
from sections.errors import IdempotencyConflict, NeedsPreparation, NotFound
from sections.model.commands import Decision
from sections.model.item import Item
from sections.model.projection import apply
from sections.model.state import MemoryState
from sections.retrieval.search import SearchIndex
from sections.runtime.batching import Group, Ticket
from sections.runtime.history import History
from sections.runtime.tracing import Tracing
from sections.specs.command_specs import CommandSpec

Decide = Callable[[MemoryState], Decision | None]


class CommandRunner:
    """Set up by `Memory.open`; see sections/runtime/memory.py for what each attribute holds."""

    _lock: threading.Lock
    _state: MemoryState
    _writer: LogWriter
    _reader: LogReader
    _failed: BaseException | None
    _decision_ts: int
    _since_snapshot: int
    snapshot_every: int
    history: History
    search_index: SearchIndex
    content_of: Callable[[Item], object]  # Memory's methods, used here
    snapshot: Callable[[], object]
    # A tracer (sections/runtime/tracing.py), or None: then nothing below is traced, at the cost of one
    # attribute test per command and per group. Set it before commands run.
    tracing: Tracing | None = None

    def _init_batches(self) -> None:
        """Called by Memory._configure: where tickets wait to be decided."""
        self._filed: collections.deque[Ticket] = collections.deque()  # threads' tickets
        self._loop_batches: dict[asyncio.AbstractEventLoop, list[Ticket]] = {}
        self._acknowledging: set[asyncio.Task] = set()  # the event loop keeps only weak ones
        # With tracing: each appended group's Pending to the end of its span, taken once by
        # whoever sees the group durable first (dict.pop is atomic)
        self._append_spans: dict[Pending, Callable[[BaseException | None], None]] = {}

    def run(
        self,
        spec: CommandSpec,
        tenant: str,
        session: str | None = None,
        args: tuple = (),
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ):
        """Run one command of the table (sections/specs/command_specs.py); returns once durable."""
        tracing = self.tracing
        if tracing is None:
            return self._run(spec, tenant, session, args, idempotency_key, expected_version)
        with tracing.command(spec.name, tenant, session) as span:
            result = self._run(spec, tenant, session, args, idempotency_key, expected_version)
            span.done(result)
            return result

    def _run(self, spec, tenant, session, args, idempotency_key, expected_version):
        if spec.prepare is not None:
            args = spec.prepare(self, tenant, session, args)
        while True:
            ticket = self._ticket(spec, tenant, session, args, idempotency_key, expected_version)
            filed = self._filed
            filed.append(ticket)
            with self._lock:
                if not ticket.decided:  # nobody took it yet: decide everything filed meanwhile
                    self._decide_batch([filed.popleft() for _ in range(len(filed))])
            if type(ticket.error) is NeedsPreparation:  # slow work first, outside the lock
                ticket.error.prepare()
                continue
            if ticket.error is not None:
                raise ticket.error
            break
        outcome = ticket.outcome
        if type(outcome) is Pending:
            self._wait(outcome)
            self._maybe_snapshot()
        return self._finish(spec, ticket)

    async def run_async(
        self,
        spec: CommandSpec,
        tenant: str,
        session: str | None = None,
        args: tuple = (),
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ):
        """`run` for asyncio: the same steps; those that read files go to a worker thread."""
        tracing = self.tracing
        if tracing is None:
            return await self._run_async(
                spec, tenant, session, args, idempotency_key, expected_version
            )
        with tracing.command(spec.name, tenant, session) as span:
            result = await self._run_async(
                spec, tenant, session, args, idempotency_key, expected_version
            )
            span.done(result)
            return result

    async def _run_async(self, spec, tenant, session, args, idempotency_key, expected_version):
        if spec.prepare is not None:
            args = await asyncio.to_thread(spec.prepare, self, tenant, session, args)
        loop = asyncio.get_running_loop()
        while True:
            ticket = self._ticket(spec, tenant, session, args, idempotency_key, expected_version)
            ticket.future = loop.create_future()
            batch = self._loop_batches.get(loop)
            if batch is None:
                batch = self._loop_batches[loop] = []
                loop.call_soon(self._decide_loop_batch, loop)
            batch.append(ticket)
            try:
                await ticket.future  # decided, and durable if it appended (raises its error)
            except NeedsPreparation as needs:  # slow work first, outside the lock
                await asyncio.to_thread(needs.prepare)
                continue
            break
        outcome = ticket.outcome
        if type(outcome) is Pending or outcome is None:
            if (
                outcome is None
                and ticket.decision is not None
                and ticket.decision.durable_at is not None
            ):
                await asyncio.to_thread(self._writer.wait_for, ticket.decision.durable_at)
            return await self._result_async(spec, ticket.record, ticket.decision)
        return await self._result_async(
            spec, await asyncio.to_thread(self._replayed, outcome), None
        )

    def append(self, decide: Decide) -> Record | None:
        """The primitive under every command: run `decide(state)` under the lock, append the
        records of its Decision and apply them, and return the first once durable (None when the
        decision needs no record). Commands go through `run`; this is for the memory's own
        records (restart clears, summaries) and for tests that write what a crash leaves."""
        ticket = Ticket(decide, None, None, False)
        with self._lock:
            self._decide_batch([ticket])
        if ticket.error is not None:
            raise ticket.error
        if ticket.outcome is None:
            return None
        self._wait(ticket.outcome)  # type: ignore[arg-type]
        self._maybe_snapshot()
        return ticket.record

    # ---- deciding a batch ----------------------------------------------------------------------

    def _ticket(self, spec: CommandSpec, tenant, session, args, key, expected) -> Ticket:
        return Ticket(
            lambda state: spec.decide(self, state, tenant, session, args, key, expected),
            _idem(spec, tenant, session, key),
            (tenant, session),
            spec.session_local,
        )

    def _decide_batch(self, tickets: list[Ticket]) -> list[tuple[Pending, list[Ticket]]]:
        """Under the lock: decide the tickets in order, appending their records group by group
        (see the module's docstring). Each ticket ends with its outcome or its error; returns
        the groups appended, in log order, with their pending appends."""
        appended: list[tuple[Pending, list[Ticket]]] = []
        try:
            self._decide_each(tickets, appended)
        except BaseException as exc:  # not one command's error: no ticket may be left unanswered
            for ticket in tickets:
                if ticket.outcome is None and ticket.error is None and not _needs_no_record(ticket):
                    ticket.decided, ticket.error = True, exc
        return appended

    def _decide_each(self, tickets: list[Ticket], appended: list) -> None:
        group = Group()
        for ticket in tickets:
            if group.entries and not group.admits(ticket):
                self._append_group(group, appended)
                group = Group()
            ticket.decided = True
            try:
                self._refuse_if_failed()
                if ticket.idem is not None and self._replay_seq(ticket):
                    continue
                if not group.entries:  # the records of one group share one ts
                    self._decision_ts = group.ts = self._writer.now()
                decision = ticket.decide(self._state)
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

    def _replay_seq(self, ticket: Ticket) -> bool:
        """An idempotency key seen before: the ticket's outcome is the seq of the record the
        first call made (True), or IdempotencyConflict for another command under the key."""
        tenant, session_id, key, type_ = ticket.idem  # type: ignore[misc]
        session = self._state.sessions.get((tenant, session_id))
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
            pending = self._writer.submit(group.entries, ts=group.ts)
        except BaseException as exc:
            for ticket in group.tickets:
                ticket.error = exc
            return
        records = pending.records
        tracing = self.tracing
        if tracing is not None:  # from the submit until a waiter sees the group durable
            self._append_spans[pending] = tracing.append(records, len(group.tickets))
        try:
            for n, entry in enumerate(group.entries):
                # Apply what was logged, parsed back from its JCS bytes, exactly as replay will
                # see it: not the caller's object (key order, 1.0 vs 1, later mutation).
                logged = _logged(records[n], orjson.loads(entry.jcs))
                records[n] = logged
                apply(self._state, logged, self.history.restate)
                self.search_index.follow(self._state, logged, self.content_of)
        except BaseException as exc:  # the log has records the projections do not
            self._failed = exc
            error = WriterClosed(f"memory stopped: applying a logged record failed ({exc!r})")
            error.__cause__ = exc
            for ticket in group.tickets:
                ticket.error = error
            self._end_append_span(pending, error)  # nobody waits for this group
            return
        self._since_snapshot += len(group.entries)
        for ticket, first in zip(group.tickets, group.firsts, strict=True):
            ticket.outcome = pending
            ticket.record = records[first]
        appended.append((pending, group.tickets))

    def _decide_loop_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop's turn after tickets were filed: decide them all, then settle each ticket's
        future: at once when it appended nothing, after its group is durable when it did."""
        tickets = [t for t in self._loop_batches.pop(loop) if not t.future.cancelled()]
        with self._lock:
            appended = self._decide_batch(tickets)
        waiting = set()
        for _, group in appended:
            waiting.update(map(id, group))
        for ticket in tickets:
            if id(ticket) not in waiting:
                _settle(ticket)
        if appended:
            task = loop.create_task(self._durable(appended))
            self._acknowledging.add(task)
            task.add_done_callback(self._acknowledging.discard)

    async def _durable(self, appended: list[tuple[Pending, list[Ticket]]]) -> None:
        """Wait for each group's append in log order, then acknowledge its tickets."""
        for pending, tickets in appended:
            try:
                await pending.wait_async()
            except WriterClosed as exc:
                self._failed = exc  # the state holds records the log will never have
                for ticket in tickets:
                    ticket.error = exc
                self._end_append_span(pending, exc)
            else:
                self._end_append_span(pending, None)
                if self._since_snapshot >= self.snapshot_every:
                    try:
                        await asyncio.to_thread(self._maybe_snapshot)
                    except BaseException as exc:  # durable, but the caller hears of it
                        for ticket in tickets:
                            ticket.error = exc
            for ticket in tickets:
                _settle(ticket)

    # ---- after the decision --------------------------------------------------------------------

    async def _result_async(self, spec: CommandSpec, record: Record | None, decision):
        """The spec's result step, on a worker thread when it does I/O."""
        blocks = spec.result_blocks
        if blocks if type(blocks) is bool else blocks(decision):  # type: ignore[operator]
            return await asyncio.to_thread(spec.result, self, record, decision)
        return spec.result(self, record, decision)

    def _finish(self, spec: CommandSpec, ticket: Ticket):
        """The caller's result once the ticket's records are durable (threads)."""
        outcome = ticket.outcome
        if type(outcome) is Pending:
            return spec.result(self, ticket.record, ticket.decision)
        if outcome is None:
            decision = ticket.decision
            if decision is not None and decision.durable_at is not None:
                self._writer.wait_for(decision.durable_at)  # show only durable state
            return spec.result(self, None, decision)
        return spec.result(self, self._replayed(outcome), None)

    @property
    def failure(self) -> BaseException | None:
        """Why commands and reads are refused, or None. A failed write leaves records in the live
        state that the log will never have, so nothing answers from that state until `heal()`
        (sections/runtime/memory.py) has rebuilt it from the log."""
        return self._failed or self._writer.failure

    def _refuse_if_failed(self) -> None:
        """Under the lock: raise WriterClosed, naming the storage's error, while failed."""
        failure = self.failure
        if failure is None:
            return
        if self._failed is None:
            self._failed = failure  # in-flight records may be in the state: heal() rebuilds it
        error = WriterClosed(
            f"memory stopped after a failed write ({failure}); it reloads its state from the "
            "log once the log is reopened (heal)"
        )
        error.cause = failure.cause if isinstance(failure, WriterClosed) else failure
        raise error

    def _wait(self, pending: Pending) -> None:
        try:
            pending.wait()
        except WriterClosed as exc:
            self._failed = exc  # the state holds a record the log will never have
            self._end_append_span(pending, exc)
            raise
        self._end_append_span(pending, None)

    def _end_append_span(self, pending: Pending, error: BaseException | None) -> None:
        if self._append_spans:  # empty unless tracing
            end = self._append_spans.pop(pending, None)
            if end is not None:
                end(error)

    def _replayed(self, seq: int) -> Record:
        """An idempotent retry: the original record, once it is durable."""
        self._writer.wait_for(seq)
        record = self._reader.get(seq)
        if not record.has_payload:
            raise NotFound(f"the record this idempotency key made (seq {seq}) was erased")
        return record

    def _maybe_snapshot(self) -> None:
        if self._since_snapshot >= self.snapshot_every:
            self.snapshot()


def _logged(record: Record, payload: object) -> Record:
    """`record` with the payload as parsed back from the log (positional: `dataclasses.replace`
    costs several times as much, and this runs once per appended record)."""
    return Record(
        record.seq, record.ts, record.tenant, record.session, record.section, record.type,
        record.prev, record.h, record.pd, record.salt, payload, record.redacted, record.line,
    )  # fmt: skip


def _needs_no_record(ticket: Ticket) -> bool:
    """Decided, and its decision appends nothing: answered already."""
    return ticket.decided and (ticket.decision is None or not ticket.decision.records)


def _settle(ticket: Ticket) -> None:
    future = ticket.future
    if future is None or future.done():  # a caller that was cancelled meanwhile
        return
    if ticket.error is not None:
        future.set_exception(ticket.error)
    else:
        future.set_result(None)


def _idem(spec: CommandSpec, tenant: str, session: str | None, key: str | None) -> tuple | None:
    if key is None or spec.idempotency_type is None:
        return None
    return (tenant, session, key, spec.idempotency_type)
