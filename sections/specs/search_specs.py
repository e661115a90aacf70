"""Search and observations, as specs of the command table (command_specs.py). Both are the
tenant's commands (their call names no session): a search reads every session it finds hits in,
an observation is written in one session's `observations` or in the tenant's own session."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.errors import UserConflict
from sections.model import commands
from sections.model.commands import Decision, get_session, payload
from sections.model.item import item_id, parse_item_id
from sections.model.names import OBSERVATIONS, TENANT_SESSION
from sections.model.state import MemoryState
from sections.retrieval import inject, observations, recall
from sections.retrieval.documents import rowid
from sections.retrieval.observations import Observation
from sections.retrieval.search import MAX_TIME, Query
from sections.retrieval.views import MAX_TOP_K, SearchHit, view_of
from sections.specs.context import CommandContext
from sections.specs.session_specs import tenant_session
from sections.specs.spec import Call, CommandSpec, appended, decided

# ---- search -----------------------------------------------------------------------------------


def search_query(
    text: object, sessions: Sequence[str] | None, sections: Sequence[str] | None,
    tags: Sequence[str] | None, since: int | None, until: int | None, top_k: int, reader: str,
    markers: Sequence[str], tenant_observations: bool = False, user: str | None = None,
) -> Query:  # fmt: skip
    """A search's arguments, checked: bad ones raise InvalidInput naming the argument. `user`:
    search as that user (`Query.users`): another user's sessions and observations are left out."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("give a search query: a non-empty string")
    for name, value in (("sessions", sessions), ("sections", sections), ("tags", tags)):
        if value is not None and (
            isinstance(value, str) or not all(isinstance(v, str) for v in value)
        ):
            raise InvalidInput(f"{name} must be a list of strings")
    for name, when in (("since", since), ("until", until)):
        if when is not None and (type(when) is not int or abs(when) > MAX_TIME):
            raise InvalidInput(
                f"{name} must be an integer of microseconds since the epoch, within ±2**62"
            )
    if type(top_k) is not int or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}")
    if reader not in commands.READERS:
        raise InvalidInput(f"reader must be one of {', '.join(commands.READERS)}")
    if len(markers) != 2 or not all(isinstance(m, str) for m in markers):
        raise InvalidInput("markers must be two strings: before and after each matched word")
    check_user(user)
    return Query(
        text,
        tuple(sessions) if sessions is not None else None,
        tuple(sections) if sections is not None else None,
        tuple(tags or ()),
        since,
        until,
        top_k,
        (markers[0], markers[1]),
        ((TENANT_SESSION, OBSERVATIONS),) if tenant_observations and sessions else (),
        users=(user,) if user is not None else None,
    )


def check_user(user: object) -> None:
    """A user id as the memory takes one (`user=`): None, or a non-empty string."""
    if user is not None and (not isinstance(user, str) or not user):
        raise InvalidInput("user must be a user id: a non-empty string")


SCOPES = ("session", "user", "tenant")


def search_args(
    query: str, *, sessions: list[str] | None = None, sections: list[str] | None = None,
    tags: list[str] | None = None, since: int | None = None, until: int | None = None,
    top_k: int = 10, reader: str = "agent", markers: tuple[str, str] = ("[", "]"),
    tenant_observations: bool = False, user: str | None = None, scope: str | None = None,
    session: str | None = None,
) -> tuple[Query, str, tuple[str, str | None] | None]:  # fmt: skip
    """SEARCH's arguments from a caller's (`Memory.search`, `Session.search`): the query, the
    reader, and the (scope, session) of a search ranked as recall ranks, or None."""
    checked = search_query(query, sessions, sections, tags, since, until, top_k, reader, markers,
                           tenant_observations, user)  # fmt: skip
    if scope is None:
        if session is not None:
            raise InvalidInput("session= names the session of a scope: give scope= too")
        return checked, reader, None
    if scope not in SCOPES:
        raise InvalidInput(f"scope must be one of {', '.join(SCOPES)}")
    if sessions is not None and scope != "tenant":
        raise InvalidInput(f"give sessions= or scope={scope}, not both")
    if session is None and scope != "tenant":
        raise InvalidInput(f"scope={scope} needs session=: the session whose {scope} it is")
    if session is not None and not isinstance(session, str):
        raise InvalidInput("session must be a session id")
    return checked, reader, (scope, session)


def sessions_users(state: MemoryState, tenant: str, sessions: Sequence[str]) -> tuple[str, ...]:
    """The users of these sessions (metadata `user_id`): whose tenant-wide observations they
    see, besides the tenant's."""
    users = (inject.user_of(state, tenant, sid) for sid in sessions)
    return tuple(sorted({user for user in users if user is not None}))


def _query_index(ctx: CommandContext, call: Call) -> tuple:
    # The index has its own lock: a query never holds up writers. Hits whose item left
    # meanwhile are dropped under the memory's lock, where the read record is decided.
    query, reader, scoped = call.args
    if scoped is None:
        if query.also and query.users is None:  # sessions see the observations of their users
            tenant, sessions = call.tenant, query.sessions or ()
            users = ctx.read(lambda state: sessions_users(state, tenant, sessions))
            query = replace(query, users=users)
        return reader, ctx.search(call.tenant, query), None
    return reader, _ranked(ctx, call.tenant, query, *scoped), scoped


def _ranked(
    ctx: CommandContext, tenant: str, query: Query, scope: str, session_id: str | None
) -> list[tuple[recall.Ranked, str]]:
    """A scoped search, ranked as recall ranks, with the snippets of the winners."""

    def sessions_of(state: MemoryState) -> tuple[tuple[str, ...] | None, str | None]:
        if session_id is None:
            return query.sessions, None  # the tenant, or the sessions named
        user = get_session(state, tenant, session_id).user
        if scope == "session":
            return (session_id,), user
        if scope == "user":
            return recall.scope_sessions(state, tenant, session_id, False), user
        return query.sessions, user

    sessions, user = ctx.read(sessions_of)
    # A user's scope is matched by owner inside the index (cheap in a large tenant); a session's
    # by its id, with the tenant's observations it sees.
    by_owner = scope == "user"
    wanted = replace(query, text=recall.query_text(query.text),
                     sessions=None if by_owner else sessions, owners=(user,) if by_owner else None,
                     top_k=recall.CANDIDATES, snippets=False, common=recall.COMMON,
                     also=((TENANT_SESSION, OBSERVATIONS),)
                     if sessions is not None and not by_owner else ())  # fmt: skip
    candidates = [recall.Candidate(h.session, h.section, h.id, h.score)
                  for h in ctx.search(tenant, wanted)]  # fmt: skip
    near = ctx.similar(tenant, query.text,
                       None if sessions is None else (*sessions, TENANT_SESSION), recall.SIMILAR)  # fmt: skip
    ranked = ctx.read(
        lambda state: recall.rank(state, tenant, candidates, user, scope == "tenant", near)
    )
    if (
        query.sections is not None
        or query.tags
        or query.since is not None
        or query.until is not None
    ):  # the index applied these to its own hits; a semantic or neighbour hit is checked here
        ranked = ctx.read(lambda state: [r for r in ranked if _passes(state, tenant, query, r)])
    ranked = ranked[: query.top_k]
    rows = tuple(rowid(*parse_item_id(r.id)) for r in ranked)
    snippets = {(h.session, h.id): h.snippet for h in ctx.search(
        tenant, Query(query.text, rows=rows, top_k=len(rows) or 1, markers=query.markers))}  # fmt: skip
    return [(r, snippets.get((r.session, r.id), "")) for r in ranked]


def _passes(state: MemoryState, tenant: str, query: Query, r: recall.Ranked) -> bool:
    """The query's section, tag and time filters, as the index applies them, on a ranked item."""
    if query.sections is not None and r.section not in query.sections:
        return False
    session = state.sessions.get((tenant, r.session))
    section = session.sections.get(r.section) if session is not None else None
    item = section.items.get(r.id) if section is not None else None
    if item is None:
        return False
    return (
        all(tag in item.tags for tag in query.tags)
        and (query.since is None or item.ts >= query.since)
        and (query.until is None or item.ts < query.until)
    )


def _search(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    reader, hits, scoped = call.args
    if scoped is not None:
        return _ranked_hits(ctx, state, call.tenant, reader, hits)
    tenant = call.tenant
    found: list[SearchHit] = []
    reads: dict[str, dict[str, list[str]]] = {}
    for hit in hits:
        session = state.sessions.get((tenant, hit.session))
        section = session.sections.get(hit.section) if session is not None else None
        item = section.items.get(hit.id) if section is not None else None
        if item is None or (item.content_seq, item.tags) != (hit.content_seq, hit.tags):
            continue  # left or changed since the index was queried
        found.append(SearchHit(hit.session, view_of(hit.section, item), hit.score, hit.snippet))
        reads.setdefault(hit.session, {}).setdefault(hit.section, []).append(item.id)
    made = [
        commands.read_items(state.sessions[(tenant, sid)], by_section, reader, "search")
        for sid, by_section in reads.items()
    ]
    return Decision([c for c in made if c is not None], found, state.seq)


def _ranked_hits(
    _ctx: CommandContext, state: MemoryState, tenant: str, reader: str,
    ranked: list[tuple[recall.Ranked, str]],
) -> Decision:  # fmt: skip
    found: list[SearchHit] = []
    reads: dict[str, dict[str, list[str]]] = {}
    for r, snippet in ranked:
        session = state.sessions.get((tenant, r.session))
        section = session.sections.get(r.section) if session is not None else None
        item = section.items.get(r.id) if section is not None else None
        if session is None or item is None:
            continue  # left since it was ranked
        found.append(SearchHit(r.session, view_of(r.section, item), round(r.score, 6), snippet,
                               r.signals, recall.session_time(session)))  # fmt: skip
        reads.setdefault(r.session, {}).setdefault(r.section, []).append(item.id)
    made = [
        commands.read_items(state.sessions[(tenant, sid)], by_section, reader, "search")
        for sid, by_section in reads.items()
    ]
    return Decision([c for c in made if c is not None], found, state.seq)


def _hits(
    ctx: CommandContext, _record: Record | None, decision: Decision | None
) -> list[SearchHit]:
    found: list[SearchHit] = decided(decision).result
    views = ctx.fill([hit.item for hit in found])
    return [
        SearchHit(hit.session, view, hit.score, hit.snippet, hit.signals, hit.time)
        for hit, view in zip(found, views, strict=True)
    ]


SEARCH = CommandSpec("search", _search, result=_hits, prepare=_query_index, result_blocks=True)

# ---- observations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceUser:
    """`observation_args(user=...)`: the user of the session the observation comes from (its
    metadata's `user_id`, read when the command is decided). `required`: refused if that session
    has no user (scope "user"); else a session of no user writes for the whole tenant."""

    required: bool


def observation_args(
    type: str, title: str, content: str, *, tags: list[str] | tuple[str, ...] = (),
    topic_key: str | None = None, session: str | None = None, source: dict | None = None,
    from_session: str | None = None, user: str | SourceUser | None = None,
    strict_duplicates: bool = False,
) -> tuple:  # fmt: skip
    """OBSERVE's arguments: the observation, checked (`source`: where it came from, {str: str}
    kept in its metadata), the session that will hold it, whether that is the tenant's, the
    session a tenant-wide one came from (`from_session`, kept in `metadata.session`) and the user
    a tenant-wide one is for (`user`, kept in `metadata.user_id`; None: the whole tenant).
    `strict_duplicates`: a duplicate needs the same type and title too (AgentOps')."""
    obs = Observation.of(type, title, content, tags, topic_key, source, strict_duplicates)
    if from_session is not None and (session is not None or not isinstance(from_session, str)):
        raise InvalidInput("from_session names the session a tenant-wide observation came from")
    if user is not None and session is not None:
        raise InvalidInput("user names whose tenant-wide observation this is: not with session")
    if isinstance(user, SourceUser):
        if from_session is None:
            raise InvalidInput("the user of the session an observation comes from needs one")
    else:
        check_user(user)
    held = TENANT_SESSION if session is None else session
    return obs, held, session is None, from_session, user


def _observations_session(ctx: CommandContext, call: Call) -> tuple:
    _, _, tenant_wide, source, user = call.args
    tenant = call.tenant
    if tenant_wide:
        if source is not None:  # refused before `_tenant` is made for it (decide checks again)
            ctx.read(lambda state: _user_of_source(state, tenant, source, user))
        ctx.append(lambda state: tenant_session(ctx, state, tenant))
    return call.args


def _user_of_source(
    state: MemoryState, tenant: str, source: str, user: str | SourceUser | None
) -> str | None:
    """The user an observation from the open session `source` is for: `user`, or with
    `SourceUser` the session's own (refused when required and it has none)."""
    commands.check_open(get_session(state, tenant, source))
    if not isinstance(user, SourceUser):
        return user
    found = inject.user_of(state, tenant, source)
    if found is None and user.required:
        raise UserConflict(
            f"session {source!r} has no user (metadata user_id): scope 'user' needs one"
        )
    return found


def _observe(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    obs, session_id, _, source, user = call.args
    target = get_session(state, call.tenant, session_id)
    if session_id != TENANT_SESSION:  # the tenant's own session outlives any end()
        commands.check_open(target)
    if source is not None:  # an ended session writes nothing more, tenant-wide neither
        user = _user_of_source(state, call.tenant, source, user)  # decided on this state
    command, tier, item = observations.decide(
        target, obs, ctx.decision_ts, ctx.dedup_window_us, ctx.counter_of(target),
        ctx.content_of, source, user,
    )  # fmt: skip
    return Decision((command,), (session_id, tier, item))


def _observed(
    _ctx: CommandContext, record: Record | None, decision: Decision | None
) -> observations.Outcome:
    session_id, tier, item = decided(decision).result
    record = appended(record)
    written = payload(record)
    if item is None:
        id_, meta = item_id(record.seq, 0), written["items"][0]["metadata"]
    else:
        id_, meta = item.id, written["set"]["metadata"]
    return observations.Outcome(id_, session_id, tier, meta["revision"], meta["duplicates"])


OBSERVE = CommandSpec("observe", _observe, result=_observed, prepare=_observations_session)
