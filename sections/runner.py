"""How a command runs: decide under the lock, submit, apply; then wait for durability.

`CommandRunner` is the part of `Memory` (sections/memory.py) that executes the command table
(sections/command_specs.py): `run` and `run_async` take a spec through its steps, `append` is
the primitive under both. The lock is held from the decision to the projection's apply, never
while waiting for the disk, so concurrent callers share each fsync and state changes in exactly
log order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace

import orjson

from eventstore.errors import WriterClosed
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.writer import Entry, LogWriter, Pending

from .command_specs import CommandSpec
from .commands import Decision
from .errors import IdempotencyConflict, NotFound
from .history import History
from .projection import apply
from .search import SearchIndex
from .state import Item, MemoryState

Decide = Callable[[MemoryState], Decision | None]


class CommandRunner:
    """Set up by `Memory.open`; see sections/memory.py for what each attribute holds."""

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

    def run(
        self,
        spec: CommandSpec,
        tenant: str,
        session: str | None = None,
        args: tuple = (),
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ):
        """Run one command of the table (sections/command_specs.py); returns once durable."""
        if spec.prepare is not None:
            args = spec.prepare(self, tenant, session, args)
        outcome, decision = self._submit_spec(
            spec, tenant, session, args, idempotency_key, expected_version
        )
        if type(outcome) is Pending:
            self._wait(outcome.wait)
            self._maybe_snapshot()
            record = outcome.records[0]
        elif outcome is None:
            record = None
            if decision is not None and decision.durable_at is not None:
                self._writer.wait_for(decision.durable_at)  # show only durable state
        else:
            record, decision = self._replayed(outcome), None
        return spec.result(self, record, decision)

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
        if spec.prepare is not None:
            args = await asyncio.to_thread(spec.prepare, self, tenant, session, args)
        outcome, decision = self._submit_spec(
            spec, tenant, session, args, idempotency_key, expected_version
        )
        if type(outcome) is Pending:
            try:
                await outcome.wait_async()
            except WriterClosed as exc:
                self._failed = exc  # the state holds a record the log will never have
                raise
            if self._since_snapshot >= self.snapshot_every:
                await asyncio.to_thread(self._maybe_snapshot)
            record = outcome.records[0]
        elif outcome is None:
            record = None
            if decision is not None and decision.durable_at is not None:
                await asyncio.to_thread(self._writer.wait_for, decision.durable_at)
        else:
            record, decision = await asyncio.to_thread(self._replayed, outcome), None
        if spec.result_blocks:
            return await asyncio.to_thread(spec.result, self, record, decision)
        return spec.result(self, record, decision)

    def _submit_spec(self, spec: CommandSpec, tenant, session, args, key, expected):
        """The step both runners share: decide the spec under the lock, submit and apply."""
        return self._submit(
            lambda state: spec.decide(self, state, tenant, session, args, key, expected),
            _idem(spec, tenant, session, key),
        )

    def append(self, decide: Decide) -> Record | None:
        """The primitive under every command: run `decide(state)` under the lock, append the
        records of its Decision and apply them, and return the first once durable (None when the
        decision needs no record). Commands go through `run`; this is for the memory's own
        records (restart clears, summaries) and for tests that write what a crash leaves."""
        outcome, _ = self._submit(decide, None)
        if outcome is None:
            return None
        self._wait(outcome.wait)  # type: ignore[union-attr]
        self._maybe_snapshot()
        return outcome.records[0]  # type: ignore[union-attr]

    def _submit(
        self, decide: Decide, idem: tuple | None
    ) -> tuple[Pending | int | None, Decision | None]:
        """Decide, append and apply under the lock. A decision is one record, or several
        (appended together, consecutive seqs), or none.

        Returns the pending append (or, for a retried idempotency key, the seq of the record the
        first call made; or None when the command needs no record) and the decision.
        """
        with self._lock:
            self._refuse_if_failed()
            if idem is not None:
                tenant, session_id, key, type_ = idem
                session = self._state.sessions.get((tenant, session_id))
                if session is not None and key in session.idempotency:
                    seq, _, made = session.idempotency[key]
                    if made != type_:
                        raise IdempotencyConflict(
                            f"idempotency key {key!r} was used for a {made} (seq {seq}), not a {type_}: "
                            "use a new key for a different command"
                        )
                    return seq, None
            self._decision_ts = now = self._writer.now()
            decision = decide(self._state)
            if decision is None or not decision.records:
                return None, decision
            entries = [
                Entry(c.tenant, c.session, c.section, c.type, c.payload) for c in decision.records
            ]
            pending = self._writer.submit(entries, ts=now)
            try:
                for n, entry in enumerate(entries):
                    # Apply what was logged, parsed back from its JCS bytes, exactly as replay
                    # will see it: not the caller's object (key order, 1.0 vs 1, later mutation).
                    logged = replace(pending.records[n], payload=orjson.loads(entry.jcs))
                    pending.records[n] = logged
                    apply(self._state, logged, self.history.restate)
                    self.search_index.follow(self._state, logged, self.content_of)
            except BaseException as exc:  # the log has records the projections do not
                self._failed = exc
                raise WriterClosed(
                    f"memory stopped: applying a logged record failed ({exc!r})"
                ) from exc
            self._since_snapshot += len(entries)
            return pending, decision

    @property
    def failure(self) -> BaseException | None:
        """Why commands and reads are refused, or None. A failed write leaves records in the live
        state that the log will never have, so nothing answers from that state until `heal()`
        (sections/memory.py) has rebuilt it from the log."""
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

    def _wait(self, wait: Callable[[], object]) -> None:
        try:
            wait()
        except WriterClosed as exc:
            self._failed = exc  # the state holds a record the log will never have
            raise

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


def _idem(spec: CommandSpec, tenant: str, session: str | None, key: str | None) -> tuple | None:
    if key is None or spec.idempotency_type is None:
        return None
    return (tenant, session, key, spec.idempotency_type)
