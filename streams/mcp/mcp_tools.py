"""What the MCP tools and resources do, once, whatever memory answers them (docs/mcp.md).

`ledgermem mcp` serves the same tools over stdio and streamable HTTP, and the service mounts them
at `/mcp`; behind them is either a memory in this process (`EmbeddedBackend`: a data directory,
or the service's own memory) or a running service's REST API (`HttpBackend`). Both live in
streams/mcp/mcp_backends.py and are thin: each call below checks its arguments first, with the very
checks the memory model makes (so bad input is refused before anything is sent or appended,
with the same message both ways), then makes one or two backend calls and shapes the answer
from the JSON both backends return alike (an item's and a hit's `to_json`).

Nothing here imports the MCP SDK: streams/mcp/mcp_server.py registers these functions with it.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import unquote

from eventstore.errors import InvalidInput, LedgerError
from eventstore.identifiers import check_identifier
from sections.retrieval.observations import SCOPES, Observation
from sections.retrieval.views import MAX_TOP_K, Extra
from sections.specs import command_specs

SESSION_URI = "ledgermem://sessions/{session}"
SECTION_URI = "ledgermem://sessions/{session}/sections/{section}"
DEFAULT_SESSION = "mcp"  # the session of a connection that names none (and no user)
USER_ID = "user_id"  # a session's user, in its metadata (sections/model/names.py)


class Refusal(Exception):
    """A refusal to show the caller: `code` as the REST API names it (wire.md), and why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Backend(Protocol):
    """One caller's memory: a tenant, and what the tools need of it. Each method raises
    `Refusal` for what the memory refuses; the arguments are already checked."""

    async def session_metadata(self, session: str) -> dict | None:
        """The session's metadata, or None when there is no such session. Appends nothing."""
        ...

    async def open_session(self, session: str, user: str | None) -> None:
        """The session, created if new (with metadata `user_id` = `user`, if given)."""
        ...

    async def observe(
        self, session: str, scope: str, user: str | None, observation: Observation
    ) -> dict: ...

    async def search(self, query: str, top_k: int, user: str | None) -> list[dict]: ...

    async def context(self, session: str, extra: Extra) -> list[dict]: ...

    async def session_info(self, session: str) -> dict: ...

    async def section_items(self, session: str, section: str) -> list[dict]: ...


def refusal_of(exc: LedgerError) -> Refusal:
    """The memory's refusal as the REST API would name it, so both backends answer alike."""
    import orjson

    from streams.web.errors import from_exception

    body = orjson.loads(from_exception(exc).body)["error"]
    return Refusal(body["code"], body["message"])


def checked_session(session: str) -> str:
    """A session id a connection may write to (its saves and context), or InvalidInput."""
    check_identifier("session", session)
    command_specs.check_not_reserved(session)
    return session


def checked_user(user: str | None) -> str | None:
    """The user a connection names (`?user=`, `--user`): an identifier, or None."""
    return None if user is None else check_identifier("user", user)


def default_session(user: str | None) -> str:
    """The session of a connection that names none: `mcp`, or `mcp@<user>` for a user's, so
    that users never share one (a session belongs to one user, or to none)."""
    return DEFAULT_SESSION if user is None else checked_session(f"{DEFAULT_SESSION}@{user}")


async def user_of(backend: Backend, session: str, user: str | None) -> str | None:
    """The user a connection acts for: its session's `user_id`, else the user it names (the
    session is then new, and will be made with it). A named user its session does not have
    (another user, or none) is refused: a session is one user's past, or the tenant's."""
    metadata = await backend.session_metadata(session)
    if metadata is None:
        return user
    own = metadata.get(USER_ID)
    own = own if isinstance(own, str) else None
    if user is not None and own != user:
        whose = f"user {own!r}" if own is not None else "no user"
        raise Refusal(
            "user_conflict", f"session {session!r} belongs to {whose}, not to user {user!r}"
        )
    return own


async def save(
    backend: Backend,
    session: str,
    type: str,
    title: str,
    content: str,
    tags: list[str] | None = None,
    topic_key: str | None = None,
    scope: str | None = None,
    user: str | None = None,
) -> dict:
    """mem_save: an observation, through the three dedup tiers (docs/search.md). `scope`: the
    connection's user's (`user`: every session of that user sees it), the whole tenant's
    (`tenant`), or the connection's session's own (`session`); by default `user` when the
    connection has a user (`user_of`), else `tenant`."""
    try:
        if scope is not None and scope not in SCOPES:
            raise InvalidInput(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        observation = Observation.of(type, title, content, tags or (), topic_key)
    except LedgerError as exc:
        raise refusal_of(exc) from None
    user = await user_of(backend, session, user)
    if scope is None:
        scope = "user" if user is not None else "tenant"
    if scope == "user" and user is None:
        raise Refusal(
            "user_conflict",
            f"scope 'user' needs a user: session {session!r} has none and the connection names "
            "none (?user= on the URL, --user)",
        )
    # A tenant-wide save comes from the connection's session too: it is named in the
    # observation's `metadata.session`, as `Session.observe` names it (docs/search.md).
    await backend.open_session(session, user)
    outcome = await backend.observe(session, scope, user, observation)
    return {k: outcome[k] for k in ("id", "session", "tier", "revision", "duplicates")}


def _hit(found: dict) -> dict:
    item = found["item"]
    hit = {
        "session": found["session"],
        "section": item["section"],
        "id": item["id"],
        "score": found["score"],
        "snippet": found["snippet"],
        "content": item["content"],
        "tags": item["tags"],
    }
    if item["section"] == "observations":
        hit["type"] = item["kind"]
        hit["title"] = item["metadata"].get("title")
    return hit


async def search(
    backend: Backend, query: str, limit: int = 10, session: str | None = None,
    user: str | None = None,
) -> dict:  # fmt: skip
    """mem_search: BM25 over the tenant's searchable sections, best first; with a user (the
    connection's session's, or the one it names), other users' sessions and observations are
    left out. Hits are reads."""
    try:
        command_specs.search_query(query, None, None, None, None, None, limit, "agent", ("[", "]"))
    except LedgerError as exc:
        raise refusal_of(exc) from None
    if session is not None:
        user = await user_of(backend, session, user)
    return {"hits": [_hit(found) for found in await backend.search(query, limit, user)]}


async def context(
    backend: Backend, session: str, limit: int = 10, user: str | None = None,
    query: str | None = None,
) -> dict:  # fmt: skip
    """mem_context: what an agent should start with. Context assembly of the connection's
    session with no section named: only what sections/retrieval/inject.py injects, the `limit`
    observations the session sees (`inject.observation_pool`: its own, the tenant's and its
    user's; the query's best, else the newest), the summaries of the `limit` sessions of its
    user that ended last and, with a `query`, what recall finds in the user's earlier sessions
    (sections/retrieval/recall.py). Recorded (`context.assembled`) like every assembly. A new
    session is made with the connection's user."""
    try:
        if type(limit) is not int or not 1 <= limit <= MAX_TOP_K:
            raise InvalidInput(f"limit must be an integer from 1 to {MAX_TOP_K}")
        extra = Extra.of(query=query, observations=limit, summaries=limit)
    except LedgerError as exc:
        raise refusal_of(exc) from None
    await backend.open_session(session, await user_of(backend, session, user))
    messages = await backend.context(session, extra)
    text = "\n\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    return {"session": session, "messages": messages, "text": text}


def _ids(**ids: str) -> dict[str, str]:
    """Resource URI parts, percent-decoded and checked as identifiers."""
    decoded = {name: unquote(value) for name, value in ids.items()}
    try:
        for name, value in decoded.items():
            check_identifier(name, value)
    except LedgerError as exc:
        raise refusal_of(exc) from None
    return decoded


async def session_info(backend: Backend, session: str) -> dict:
    """A `ledgermem://sessions/{session}` resource: the session (metadata, version, times) and
    its sections' settings and sizes, as `GET /v1/sessions/{session}` answers. Appends nothing."""
    return await backend.session_info(_ids(session=session)["session"])


async def section(backend: Backend, session: str, section: str) -> dict:
    """A `ledgermem://sessions/{session}/sections/{section}` resource: the section's live
    items, oldest first. A read like any other (an `items.read` record)."""
    ids = _ids(session=session, section=section)
    session, section = ids["session"], ids["section"]
    items = await backend.section_items(session, section)
    return {"session": session, "section": section, "items": items}
