"""Retention's commands (sections/model/retention.py, docs/sections.md "Retention"), as specs of
the command table (command_specs.py): `cleanup` by age or TTL, and the erase that follows a
deletion made with `retention_erase`."""

from __future__ import annotations

from eventstore.record import Record
from sections.model import erasure, retention
from sections.model.commands import Decision
from sections.model.state import MemoryState
from sections.specs.context import CommandContext
from sections.specs.erase_flow import redact_sessions
from sections.specs.spec import Call, CommandSpec, decided


def erases(decision: Decision | None) -> bool:
    """Whether the decision deleted sessions by retention with `erase`: its erase follows."""
    return decision is not None and any(
        c.type == "session.deleted" and c.payload.get("erase") for c in decision.records
    )


def _cleanup(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    """The sessions (of the tenant, or of every tenant) last active more than `age_us` before
    this decision's ts, each a `session.deleted` with `reason`; the result names them."""
    age_us, reason, every_tenant = call.args
    cutoff = ctx.decision_ts - age_us
    victims = retention.inactive(state, None if every_tenant else call.tenant, cutoff)
    erase = ctx.config.retention_erase
    records = [retention.deletion(s, reason, erase) for s in victims]
    return Decision(records, [(s.tenant, s.id) for s in victims], state.seq)


def _cleaned(ctx: CommandContext, _record: Record | None, decision: Decision | None) -> list:
    if erases(decision):
        ctx.erase_retained()
    return decided(decision).result


def _walk_deleted(ctx: CommandContext, call: Call) -> tuple:
    """Outside the lock: each deleted incarnation's records, down its back-links from the
    deletion (a later incarnation of the same id is not on them)."""
    (deletions,) = call.args
    walked = []
    for deleted_seq, tenant, session in deletions:
        chain = erasure.session_chain(deleted_seq, ctx.record_at, ctx.payload_of)[1:]
        seqs = sorted(r.seq for r, _ in chain if r.has_payload)
        walked.append((deleted_seq, tenant, session, seqs))
    return (walked,)


def _erase_deleted(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision | None:
    """One `session.erased` per deletion still waiting for its erase, appended together."""
    (walked,) = call.args
    made = (retention.erasure_of_deleted(state, t, s, d, seqs) for d, t, s, seqs in walked)
    records = [command for command in made if command is not None]
    return Decision(records, len(records)) if records else None


def _redact_deleted(ctx: CommandContext, record: Record | None, decision: Decision | None) -> int:
    if record is None:  # erased already
        return 0
    return redact_sessions(ctx, record, decided(decision).result)


CLEANUP = CommandSpec("cleanup", _cleanup, result=_cleaned, result_blocks=erases)
ERASE_DELETED = CommandSpec(
    "erase_deleted", _erase_deleted, result=_redact_deleted, prepare=_walk_deleted,
    result_blocks=True,
)  # fmt: skip
