"""AgentOps' memory contract on our model, pure: its limits, names and answer shapes (docs/agentops.md).

The agentops-memory service keys everything by `project`; here a project is a namespace inside
the caller's tenant:

- an AgentOps session is our session of the same id in the caller's tenant, its project kept in
  its metadata (`agentops_project`, lowercased as that service stores it);
- the observations of (project, scope) are the `observations` section of one holder session,
  `_agentops:<project>:<scope>` (any other pair encoded by foreign_ids: `holder`), created on
  first use. Our three dedup tiers work per section,
  so they key on (project, scope) exactly as that service's do, and an observation id is the seq
  of the record that added it: an integer, unique in the log, as AgentOps' ids are;
- the AgentOps session an observation came from is kept in its metadata (`session_id`).

Nothing here touches the log: the specs (sections/adapters/agentops_specs.py) and the HTTP layer
(streams/seeds/agentops_api.py) use these functions under or outside the memory's lock. The
shape of a request (its fields, their types and the limits below) is the HTTP layer's models'
to parse (streams/seeds/agentops_models.py).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from eventstore.identifiers import is_identifier
from sections.adapters import foreign_ids
from sections.model.item import Item
from sections.model.names import HOLDER_PREFIX
from sections.model.state import MemoryState, SessionState
from sections.retrieval.observations import SECTION, normalize
from sections.retrieval.views import ItemView

PROJECT_KEY = "agentops_project"  # session metadata: the project an AgentOps session belongs to
DEFAULT_SCOPE = "project"

# The service's limits (server.go), which its models check before anything is appended.
MAX_TITLE = 500
MAX_CONTENT = 50_000
MAX_TOPIC = 200
MAX_SCOPE = 50
MAX_TAG = 100
MAX_TAGS = 20
MAX_PROJECT = 200
MAX_LIMIT = 1000
MAX_ID_DIGITS = 18  # an observation id: an int64, as the service's
# The holder ids of the first version, `_agentops:<project>:<scope>` as they were, are kept for
# the projects and scopes they could name (a project of identifier characters, no ':', at most
# this long); every other pair is encoded (`holder`).
MAX_HOLDER_PROJECT = 128 - len(HOLDER_PREFIX) - 1 - MAX_SCOPE
HOLDER_ROOM = 128 - len(HOLDER_PREFIX)  # of an encoded (project, scope) in a holder id
CONTEXT_CHARS = 300  # of each observation's content in /context
CONTEXT_SESSIONS = 3  # summaries in /context
QUOTE_CHARS = 200  # of each quoted user message in a session summary


# ---- names --------------------------------------------------------------------------------------


def project_of(value: str) -> str:
    return value.lower()  # the service stores projects lowercased


def _plain(project: str, scope: str) -> bool:
    """Whether (project, scope) has the first version's holder id, itself: a project of at most
    MAX_HOLDER_PROJECT identifier characters, no ':', not beginning with the encoding's marker
    (so that no such id is ever an encoded one), and a scope that fits."""
    return (
        len(project) <= MAX_HOLDER_PROJECT
        and ":" not in project
        and not project.startswith(foreign_ids.MARKER)
        and is_identifier(f"{HOLDER_PREFIX}{project}:{scope}")
    )


def _pair(project: str, scope: str) -> str:
    """(project, scope) as one string that gives both back: a JSON array."""
    return json.dumps([project, scope], ensure_ascii=False, separators=(",", ":"))


def holder(project: str, scope: str) -> str:
    """The session holding the observations of (project, scope): `_agentops:<project>:<scope>`
    when that is an identifier of the first version's kind (`_plain`), else `_agentops:` and the
    pair encoded by foreign_ids (any project and scope the service takes; hashed when long)."""
    if _plain(project, scope):
        return f"{HOLDER_PREFIX}{project}:{scope}"
    return HOLDER_PREFIX + foreign_ids.encode(_pair(project, scope), HOLDER_ROOM)


def holder_metadata(project: str, scope: str) -> dict:
    """The holder session's creation metadata: its project and scope, and the pair itself when
    its id is hashed (foreign_ids.ORIGINAL_KEY)."""
    metadata = {"reserved": "AgentOps observations", "project": project, "scope": scope}
    if not _plain(project, scope) and foreign_ids.needs_original(
        _pair(project, scope), HOLDER_ROOM
    ):
        metadata[foreign_ids.ORIGINAL_KEY] = _pair(project, scope)
    return metadata


def parse_holder(session_id: str, metadata: dict | None = None) -> tuple[str, str] | None:
    """(project, scope) of a holder session, or None for any other session (and for a hashed
    holder id when its metadata is not given)."""
    if not session_id.startswith(HOLDER_PREFIX):
        return None
    rest = session_id[len(HOLDER_PREFIX) :]
    if rest.startswith(foreign_ids.MARKER):
        pair = foreign_ids.decode(rest, metadata)
        try:
            project, scope = json.loads(pair) if pair is not None else (None, None)
        except ValueError:
            return None
        return (project, scope) if isinstance(project, str) and isinstance(scope, str) else None
    project, sep, scope = rest.partition(":")
    return (project, scope) if sep else None


def names_of(state: MemoryState, tenant: str, session_id: str) -> tuple[str, str]:
    """(project, scope) of a holder session of the state."""
    session = state.sessions.get((tenant, session_id))
    return parse_holder(session_id, session.metadata if session else None) or ("", "")


def holders(state: MemoryState, tenant: str, project: str = "", scope: str = "") -> list[str]:
    """The tenant's holder sessions, of `project` and `scope` when given, sorted."""
    found = []
    for (t, sid), _session in state.sessions.items():
        if t != tenant:
            continue
        named = parse_holder(sid, _session.metadata)
        if named is None or (project and named[0] != project) or (scope and named[1] != scope):
            continue
        found.append(sid)
    return sorted(found)


def is_observation(item_id: str) -> bool:
    """Whether an item of a holder's section is an AgentOps observation: its id is the seq of
    the record that added it, an integer. Anything else the log can hold there (a batch's items,
    `3710.1`, added through /v1) is ours, not an observation: AgentOps' reads leave it out."""
    return item_id.isascii() and item_id.isdigit() and len(item_id) <= MAX_ID_DIGITS


def observations_of(state: MemoryState, tenant: str, sessions: list[str]) -> list[tuple[str, Item]]:
    """Every live observation of these holder sessions (`is_observation`), oldest first."""
    found: list[tuple[str, Item]] = []
    for sid in sessions:
        session = state.sessions.get((tenant, sid))
        section = session.sections.get(SECTION) if session is not None else None
        if section is not None:
            found.extend((sid, item) for item in section.items.values() if is_observation(item.id))
    found.sort(key=lambda pair: pair[1].order)
    return found


def find(state: MemoryState, tenant: str, observation_id: int) -> tuple[str, Item] | None:
    """The observation of this id (the seq that added it), in whichever holder it is."""
    wanted = str(observation_id)
    for sid in holders(state, tenant):
        section = state.sessions[(tenant, sid)].sections.get(SECTION)
        item = section.items.get(wanted) if section is not None else None
        if item is not None:
            return sid, item
    return None


def agentops_sessions(state: MemoryState, tenant: str, project: str = "") -> list[SessionState]:
    """The tenant's AgentOps sessions (of `project` when given), newest started first."""
    found = [
        s
        for (t, _), s in state.sessions.items()
        if t == tenant
        and PROJECT_KEY in s.metadata
        and (not project or s.metadata[PROJECT_KEY] == project)
    ]
    found.sort(key=lambda s: (s.created_ts, s.created_seq), reverse=True)
    return found


# ---- answers ------------------------------------------------------------------------------------


def rfc3339(ts_us: int) -> str:
    return datetime.fromtimestamp(ts_us / 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def truncate(text: str, chars: int) -> str:
    """The service's truncation: the first `chars` characters and "..." when longer."""
    return text if len(text) <= chars else text[:chars] + "..."


def end_summary(session: SessionState) -> str:
    """The summary as that service composes it at end: counts, then the first and the last
    user message (each 200 characters at most). The quotes are those of our summary record,
    whose text is already cut at 200 characters ("…" as the 200th): docs/agentops.md."""
    if not session.messages or session.summary is None:
        return ""
    roles = session.roles
    text = (
        f"Session: {session.messages} messages ({roles.get('user', 0)} user, "
        f"{roles.get('assistant', 0)} assistant). "
    )
    first, last = session.summary.get("first_user"), session.summary.get("last_user")
    if first and first.get("text") is not None:
        text += f"Started with: {truncate(first['text'], QUOTE_CHARS)}"
    if last and first and last["id"] != first["id"] and last.get("text") is not None:
        text += f" Ended with: {truncate(last['text'], QUOTE_CHARS)}"
    return text


def transcript_answer(session_id: str, messages: list[dict]) -> dict:
    """What the service answers an end of a session it does not have: the summary of the
    transcript alone (its buildSessionSummary), counted, nothing stored."""
    users = [m["content"] for m in messages if m.get("role") == "user"]
    assistants = sum(1 for m in messages if m.get("role") == "assistant")
    summary = ""
    if messages:
        summary = f"Session: {len(messages)} messages ({len(users)} user, {assistants} assistant). "
        if users:
            summary += f"Started with: {truncate(users[0], QUOTE_CHARS)}"
        if len(users) > 1:
            summary += f" Ended with: {truncate(users[-1], QUOTE_CHARS)}"
    return {"session_id": session_id, "summary": summary, "message_count": len(messages)}


def session_json(session: SessionState) -> dict:
    out = {
        "id": session.id,
        "project": session.metadata.get(PROJECT_KEY, ""),
        "started_at": rfc3339(session.created_ts),
        "message_count": session.messages,
    }
    if session.ended_seq is not None:
        out["ended_at"] = rfc3339(session.active_ts)
    if session.summary is not None:
        out["summary"] = end_summary(session)
    return out


def normalized_hash(content: str) -> str:
    return hashlib.sha256(normalize(content).encode()).hexdigest()


def observation_json(names: tuple[str, str], item: Item | ItemView, content: object) -> dict:
    """An observation of (project, scope) `names` in the service's shape. Its counts start at 1,
    as the service's do."""
    project, scope = names
    meta = item.metadata
    text = content if isinstance(content, str) else ""
    out = {
        "id": int(item.id),
        "session_id": meta.get("session_id", ""),
        "type": item.kind,
        "title": meta.get("title", ""),
        "content": text,
        "tags": list(item.tags),
        "project": project,
        "scope": scope,
        "normalized_hash": normalized_hash(text),
        "revision_count": meta.get("revision", 1),
        "duplicate_count": meta.get("duplicates", 0) + 1,
        "last_seen_at": rfc3339(item.ts),
        "created_at": rfc3339(item.ts),
        "updated_at": rfc3339(item.ts),
    }
    if meta.get("topic_key"):
        out["topic_key"] = meta["topic_key"]
    if not out["tags"]:
        del out["tags"]
    return out


ACTIONS = {"inserted": "created", "revised": "updated", "duplicate": "deduplicated"}


def created_json(observation_id: str, tier: str, revision: int, duplicates: int) -> dict:
    return {
        "id": int(observation_id),
        "action": ACTIONS[tier],
        "revision_count": revision,
        "duplicate_count": duplicates + 1,
    }
