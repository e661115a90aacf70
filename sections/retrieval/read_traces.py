"""The traces of reads that return content without being a `get`: time travel, summaries and the
live channels. Each is an `items.read` record (docs/events.md) decided under the memory's lock
like any read; the specs that run them are in sections/specs/command_specs.py.

- `state`: `GET .../state?at=N` read every item the sessions held at N (and the messages their
  summaries quoted): one record per session that still exists, with `at`; the sessions deleted
  since are traced together on the tenant's own session (`_tenant`) under `sessions`.
- `summary`: a summary quotes its session's first and last user messages.
- `stream.opened` / `stream.closed`: a live channel, traced per subscription on `_tenant`: who
  (the record's tenant and `client`), the channel, the filter, the starting cursor, and on close
  the last seq delivered. Never per delivered record: fan-out stays cheap.
"""

from __future__ import annotations

from sections.errors import SessionNotFound
from sections.model.commands import Command, base_payload, get_session, read_items
from sections.model.names import CONVERSATION, SESSION_SECTION, TENANT_SESSION
from sections.model.state import MemoryState, SessionState
from sections.retrieval.summaries import recent, summarized

OPERATOR = "operator"  # time travel and streams are the dashboard's and the auditors' reads


def quoted(summary: dict | None) -> list[str]:
    """The ids of the messages a session summary quotes (an erased quote has text None)."""
    ends = (summary or {}).get("first_user"), (summary or {}).get("last_user")
    return sorted({q["id"] for q in ends if q is not None and q.get("text") is not None})


def _held(session: SessionState) -> dict[str, list[str]]:
    reads = {name: list(section.items) for name, section in session.sections.items()}
    quotes = [i for i in quoted(session.summary) if i not in reads.get(CONVERSATION, ())]
    if quotes:
        reads[CONVERSATION] = [*reads.get(CONVERSATION, ()), *quotes]
    return {name: ids for name, ids in reads.items() if ids}


def past_sessions(
    past: MemoryState, tenant: str, wanted: str | None, at: int
) -> tuple[list[dict], dict[str, dict[str, list[str]]]]:
    """The tenant's sessions (or `wanted`) at `at` as JSON, and what each held: its reads."""
    found = [
        s for (t, sid), s in sorted(past.sessions.items()) if t == tenant and wanted in (None, sid)
    ]
    if wanted is not None and not found:
        raise SessionNotFound(f"session {wanted!r} did not exist at seq {at}")
    return [s.to_json() for s in found], {s.id: _held(s) for s in found}


def state_reads(
    state: MemoryState, tenant: str, at: int, reads: dict[str, dict[str, list[str]]]
) -> list[Command]:
    made, gone = [], {}
    for sid, by_section in reads.items():
        session = state.sessions.get((tenant, sid))
        if session is None:
            if by_section:
                gone[sid] = by_section
        else:
            made.append(read_items(session, by_section, OPERATOR, "state", at))
    if gone:
        payload = base_payload(get_session(state, tenant, TENANT_SESSION), None)
        payload.update({"reader": OPERATOR, "purpose": "state", "at": at, "items": {}})
        payload["sessions"] = gone
        made.append(Command(tenant, TENANT_SESSION, SESSION_SECTION, "items.read", payload))
    return [c for c in made if c is not None]


def summary_reads(
    state: MemoryState, tenant: str, session_id: str | None, limit: int, reader: str
) -> tuple[list[Command], list[dict]]:
    """One session's summary (or the tenant's newest `limit`) and the reads of their quotes."""
    if session_id is not None:
        session = get_session(state, tenant, session_id)
        chosen = [session] if session.summary_at is not None else []
    else:
        chosen = recent(state, tenant, TENANT_SESSION, limit)
    made = [read_items(s, {CONVERSATION: quoted(s.summary)}, reader, "summary") for s in chosen]
    found = []
    for s in chosen:
        summary, seq, _ = summarized(s)
        found.append({"session": s.id, "seq": seq, **summary})
    return [c for c in made if c is not None], found


def stream_trace(state: MemoryState, tenant: str, event: str, stream: dict) -> Command:
    holder = get_session(state, tenant, TENANT_SESSION)
    payload = base_payload(holder, None)
    payload.update({"reader": OPERATOR, "purpose": f"stream.{event}", "items": {}})
    payload["stream"] = stream
    return Command(tenant, TENANT_SESSION, SESSION_SECTION, "items.read", payload)
