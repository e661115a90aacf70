"""Session summaries, pure and deterministic (no model call).

When a session ends, the memory appends a `session.summarized` record holding the number of
messages it ever had, its first and last user messages (truncated), and the sections it wrote.
The counts come from the state, which the projection keeps as records are applied. The two
messages are quoted by id (`quotes`), so erasing either one also redacts the summary, and the
erase's restatement drops the quoted text from live and rebuilt state alike.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from sections.model.commands import Command, base_payload
from sections.model.names import SESSION_SECTION, TENANT_SESSION
from sections.model.state import MemoryState, SessionState

TEXT_CHARS = 200  # of each quoted message


def truncate(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def as_text(content: object) -> str:
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def summarize(session: SessionState, message_of: Callable[[str], object]) -> Command:
    """The `session.summarized` record for `session` as it is now. `message_of(id)` gives a
    message's content, or None when it was erased."""
    quoted: dict[str, dict | None] = {}
    for which in ("first_user", "last_user"):
        id_ = getattr(session, which)
        if id_ is not None:
            content = message_of(id_)
            text = None if content is None else truncate(as_text(content), TEXT_CHARS)
            quoted[which] = {"id": id_, "text": text}
        else:
            quoted[which] = None
    payload = base_payload(session, None)
    payload["summary"] = {
        "ended_seq": session.ended_seq,
        "messages": session.messages,
        "first_user": quoted["first_user"],
        "last_user": quoted["last_user"],
        "sections": sorted(session.touched),
    }
    payload["quotes"] = sorted({q["id"] for q in quoted.values() if q is not None})
    return Command(session.tenant, session.id, SESSION_SECTION, "session.summarized", payload)


def unsummarized(state: MemoryState) -> list[SessionState]:
    """Ended sessions whose newest end has no summary yet (a crash came between the two)."""
    return [
        s
        for _, s in sorted(state.sessions.items())
        if s.ended_seq is not None and (s.summary_at is None or s.summary_at[0] < s.ended_seq)
    ]


def recent(
    state: MemoryState, tenant: str, exclude: str, limit: int, across_users: bool = False
) -> list[SessionState]:
    """The `limit` sessions of `tenant` summarized most recently, newest first: those of the
    same user as session `exclude` (summaries quote what users said: recall's privacy rule,
    docs/recall.md), or of every user when the tenant lets recall cross users."""
    asking = state.sessions.get((tenant, exclude))
    user = asking.user if asking is not None else None
    found = [
        s
        for (t, sid), s in state.sessions.items()
        if t == tenant and sid not in (exclude, TENANT_SESSION) and s.summary_at is not None
        and (across_users or s.user == user)
    ]  # fmt: skip
    found.sort(key=lambda s: summarized(s)[1], reverse=True)
    return found[:limit]


def summarized(session: SessionState) -> tuple[dict, int, str]:
    """A summarized session's newest summary, and the seq and hash of its record (the two are
    set together, by `session.summarized`)."""
    summary, at = session.summary, session.summary_at
    assert summary is not None and at is not None, f"session {session.id!r} has no summary"
    return summary, at[0], at[1]


def line(session_id: str, summary: dict) -> str:
    """One summary as a line of context."""
    parts = [f"{session_id}: {summary['messages']} messages"]
    if summary["sections"]:
        parts.append("sections " + ", ".join(summary["sections"]))
    for which, label in (("first_user", "first user message"), ("last_user", "last")):
        quoted = summary.get(which)
        if quoted and quoted.get("text") is not None:
            parts.append(f"{label}: {orjson.dumps(quoted['text']).decode()}")
    return "- " + "; ".join(parts)
