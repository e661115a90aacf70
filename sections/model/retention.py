"""Retention, pure: which sessions leave the live state, and the records that say so.

Three bounds remove whole sessions (docs/sections.md, "Retention"): a tenant's `max_sessions`
(when a creation takes it past the bound, the least recently active go), `cleanup(max_age)`
and the service's TTL (the sessions whose last activity is older than that). Each removal is a
`session.deleted` record with its `reason`, decided under the memory's lock and replayed like
any deletion: the projection never re-derives it from the config or the clock.

With `retention_erase`, the record also says `erase: true`, and the erase of that incarnation
follows as a `session.erased` naming the deletion (`deleted_seq`): the erase walks the deleted
incarnation's back-links from the deletion, so a session created again under the same id
afterwards is neither erased nor removed. Until that erase is appended, the state keeps the
deletion in `pending_retention`, so an erase a crash interrupted is finished at the next open.

The reserved session `_tenant` (tenant-wide observations and facts) never counts and never goes.
"""

from __future__ import annotations

from eventstore.errors import InvalidInput
from eventstore.jcs import MAX_SAFE_INTEGER
from sections.model.commands import Command, base_payload
from sections.model.config import check_seconds
from sections.model.names import HOLDER_PREFIX, SESSION_SECTION, TENANT_SESSION
from sections.model.state import MemoryState, SessionState

MAX_SESSIONS = "max_sessions"
MAX_AGE = "max_age"
TTL = "ttl"
REASONS = (MAX_SESSIONS, MAX_AGE, TTL)


def activity(session: SessionState) -> tuple[int, int, int]:
    """How recently a session was active: its last change's ts, then seq (records decided
    together share a ts), then its creation."""
    return (session.active_ts, session.version, session.created_seq)


def tenant_sessions(state: MemoryState, tenant: str | None) -> list[SessionState]:
    """A tenant's sessions (every tenant's with None) that retention may remove: all but the
    memory's own holders, `_tenant` (tenant-wide observations, facts) and AgentOps' project
    holders (`_agentops:<project>:<scope>`), which hold what outlives any one session."""
    return [
        s
        for (t, sid), s in state.sessions.items()
        if (tenant is None or t == tenant)
        and sid != TENANT_SESSION
        and not sid.startswith(HOLDER_PREFIX)
    ]


def over_max_sessions(state: MemoryState, tenant: str, limit: int | None) -> list[SessionState]:
    """The sessions to remove so that one more fits `limit`: the least recently active first."""
    if limit is None:
        return []
    live = tenant_sessions(state, tenant)
    excess = len(live) + 1 - limit
    if excess <= 0:
        return []
    return sorted(live, key=activity)[:excess]


# The oldest age a cleanup may name: what a record timestamp (µs, a safe integer) can hold, about
# 285 years. A larger one could select nothing more, and its microseconds would not fit.
MAX_AGE_SECONDS = MAX_SAFE_INTEGER // 1_000_000


def max_age_us(max_age_seconds: object) -> int:
    """A cleanup's age in microseconds; InvalidInput unless a finite number of seconds from 0
    to MAX_AGE_SECONDS."""
    seconds = check_seconds("max_age_seconds", max_age_seconds, InvalidInput)
    if seconds > MAX_AGE_SECONDS:
        raise InvalidInput(f"max_age_seconds must be at most {MAX_AGE_SECONDS}")
    return round(seconds * 1_000_000)


def inactive(state: MemoryState, tenant: str | None, cutoff_ts: int) -> list[SessionState]:
    """The sessions whose last activity is before `cutoff_ts`, least recently active first."""
    return sorted(
        (s for s in tenant_sessions(state, tenant) if s.active_ts < cutoff_ts), key=activity
    )


def deletion(session: SessionState, reason: str, erase: bool) -> Command:
    """The `session.deleted` record of a removal by retention."""
    if reason not in REASONS:
        raise InvalidInput(f"a retention reason is one of {', '.join(REASONS)}")
    payload = base_payload(session, None)
    payload["reason"] = reason
    if erase:
        payload["erase"] = True
    return Command(session.tenant, session.id, SESSION_SECTION, "session.deleted", payload)


def erasure_of_deleted(
    state: MemoryState, tenant: str, session_id: str, deleted_seq: int, records: list[int]
) -> Command | None:
    """The `session.erased` that completes a retention deletion with `erase`, naming the
    deleted incarnation's `records`; None when it was appended already."""
    pending = state.pending_retention.get(deleted_seq)
    if pending is None:
        return None
    live = state.sessions.get((tenant, session_id))  # created again since: its chain goes on
    payload = {
        "prev_seq": live.last_seq if live is not None else deleted_seq,
        "reason": pending[2],
        "records": records,
        "deleted_seq": deleted_seq,
    }
    return Command(tenant, session_id, SESSION_SECTION, "session.erased", payload)
