"""Reads of the live state, pure: what `Memory`'s public reads return (run under its lock)."""

from __future__ import annotations

from eventstore.errors import InvalidInput
from sections.errors import NotFound
from sections.model.commands import get_session
from sections.model.names import TENANT_SESSION
from sections.model.state import MemoryState, SessionState


def session_info(session: SessionState) -> dict:
    return {
        "tenant": session.tenant,
        "session": session.id,
        "metadata": session.metadata,
        "created_seq": session.created_seq,
        "created_ts": session.created_ts,
        "active_ts": session.active_ts,
        "version": session.version,
        "turn": session.turn,
        "ended": session.ended_seq is not None,
        "items": sum(len(s.items) for s in session.sections.values()),
    }


def session_sections(state: MemoryState, tenant: str, session_id: str) -> dict:
    """Each section's config with its tokens, item count and evictions."""
    return {
        name: {
            **s.config.to_json(),
            "tokens": s.tokens,
            "items": len(s.items),
            "evictions": s.evictions,
        }
        for name, s in get_session(state, tenant, session_id).sections.items()
    }


def list_sessions(
    state: MemoryState,
    tenant: str,
    metadata: dict,
    since: int | None = None,
    until: int | None = None,
    offset: int = 0,
    limit: int | None = None,
) -> list[dict]:
    """The tenant's sessions in the order they were created, without the reserved one that
    holds its tenant-wide observations (reached by name, never listed). Filters: equality on
    creation metadata (a number equals the same number, 3 == 3.0, as in JSON), last activity
    `since` <= active_ts < `until` (microseconds), then `offset` and `limit`."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and type(value) is not int:
            raise InvalidInput(f"{name} must be an integer time in microseconds")
    if type(offset) is not int or offset < 0:
        raise InvalidInput("offset must be a non-negative integer")
    if limit is not None and (type(limit) is not int or limit < 0):
        raise InvalidInput("limit must be a non-negative integer")
    found = [
        s
        for (t, sid), s in state.sessions.items()
        if t == tenant
        and sid != TENANT_SESSION
        and all(_equal(s.metadata.get(k, _MISSING), v) for k, v in metadata.items())
        and (since is None or s.active_ts >= since)
        and (until is None or s.active_ts < until)
    ]
    found.sort(key=lambda s: s.created_seq)
    end = None if limit is None else offset + limit
    return [session_info(s) for s in found[offset:end]]


_MISSING = object()


def _equal(have: object, want: object) -> bool:
    """JSON equality: numbers by value (but a boolean is not a number), anything else exactly."""
    if type(have) in (int, float) and type(want) in (int, float):
        return have == want
    return type(have) is type(want) and have == want


def stats(state: MemoryState, tenant: str, session: str | None) -> dict:
    """Sessions, items, tokens and evictions of a tenant or one session (NotFound if unknown)."""
    sessions = [
        s for (t, sid), s in state.sessions.items() if t == tenant and session in (None, sid)
    ]
    if session is not None and not sessions:
        raise NotFound(f"session {session!r} not found")
    tokens: dict[str, int] = {}
    evictions: dict[str, int] = {}
    items = 0
    for s in sessions:
        for name, section in s.sections.items():
            tokens[name] = tokens.get(name, 0) + section.tokens
            evictions[name] = evictions.get(name, 0) + section.evictions
            items += len(section.items)
    return {"sessions": len(sessions), "items": items, "tokens": tokens, "evictions": evictions}
