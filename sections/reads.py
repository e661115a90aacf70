"""Reads of the live state, pure: what `Memory`'s public reads return (run under its lock)."""

from __future__ import annotations

from .commands import get_session
from .observations import TENANT_SESSION
from .state import MemoryState, SessionState


def session_info(session: SessionState) -> dict:
    return {
        "tenant": session.tenant,
        "session": session.id,
        "metadata": session.metadata,
        "created_seq": session.created_seq,
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


def list_sessions(state: MemoryState, tenant: str, metadata: dict) -> list[dict]:
    """The tenant's sessions, without the reserved one that holds its tenant-wide observations
    (reached by name, never listed)."""
    return [
        session_info(s)
        for (t, sid), s in sorted(state.sessions.items())
        if t == tenant
        and sid != TENANT_SESSION
        and all(s.metadata.get(k) == v for k, v in metadata.items())
    ]


def stats(state: MemoryState, tenant: str, session: str | None) -> dict | None:
    """Sessions, items, tokens and evictions of a tenant or one session (None if unknown)."""
    sessions = [
        s for (t, sid), s in state.sessions.items() if t == tenant and session in (None, sid)
    ]
    if session is not None and not sessions:
        return None
    tokens: dict[str, int] = {}
    evictions: dict[str, int] = {}
    items = 0
    for s in sessions:
        for name, section in s.sections.items():
            tokens[name] = tokens.get(name, 0) + section.tokens
            evictions[name] = evictions.get(name, 0) + section.evictions
            items += len(section.items)
    return {"sessions": len(sessions), "items": items, "tokens": tokens, "evictions": evictions}
