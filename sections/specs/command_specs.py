"""The command table: each memory command defined once.

A `CommandSpec` names a command's decide function, the idempotency type its key is recorded
under, and how the caller's result is built from the durable record and the `Decision`. The
runners (`Memory.run`, `Memory.run_async`) are the only code that executes a spec, so the sync
API, its `*_async` twin and the HTTP route of a command cannot disagree on any of these.

A spec runs in up to three steps:

- `prepare` (optional), outside the lock, may read files or the search index; it returns the
  arguments the decision needs (the async runner runs it on a worker thread);
- `decide`, under the memory's lock, pure over the state: returns a `Decision` (the records to
  append and what the caller gets besides), or None when no record is needed;
- `result`, once the records are durable: builds what the caller gets. With `result_blocks` it
  does I/O (reads contents back from the log, redacts, summarizes) and the async runner runs it
  on a worker thread; `result_blocks` may instead be a function of the decision that says
  whether this result does (a read whose contents are all inline needs no thread). An idempotent retry calls it with the first call's record and no decision,
  so the result of a command with an idempotency type depends on the record alone.

The functions here reach the memory only through its public methods (sections/runtime/memory.py).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eventstore.errors import InvalidInput, WriterClosed
from eventstore.record import Record
from sections.model import commands, compaction, erasure, render, retention
from sections.model.commands import Command, Decision, get_session
from sections.model.item import Item, item_id, parse_item_id
from sections.model.item_filter import ItemFilter
from sections.model.names import TENANT_SESSION
from sections.model.state import MemoryState, SessionState
from sections.retrieval import facts, inject, observations, read_traces, summaries
from sections.retrieval.observations import Observation
from sections.retrieval.search import MAX_TIME, Query
from sections.retrieval.views import MAX_TOP_K, Extra, SearchHit, added_views, view_of
from sections.specs import erase_flow

if TYPE_CHECKING:
    from sections.runtime.memory import Memory

# decide(memory, state, tenant, session, args, idempotency_key, expected_version)
Decide = Callable[[Any, MemoryState, str, Any, tuple, Any, Any], Decision | None]
Prepare = Callable[[Any, str, Any, tuple], tuple]  # (memory, tenant, session, args) -> args
Result = Callable[[Any, Record | None, Decision | None], Any]  # (memory, record, decision)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str
    decide: Decide
    idempotency_type: str | None = None  # None: the command takes no idempotency key
    result: Result = lambda _memory, record, _decision: record  # noqa: E731
    prepare: Prepare | None = None
    result_blocks: bool | Callable[[Decision | None], bool] = False
    # The decision reads only the command's own session and its records change only that
    # session: concurrent commands on distinct sessions may then be decided against one state
    # and appended together (sections/runtime/runner.py). Anything else is decided alone.
    session_local: bool = False


def _decided(_memory: Memory, _record: Record | None, decision: Decision | None) -> Any:
    return decision.result  # type: ignore[union-attr]


def _added(_memory: Memory, record: Record | None, _decision: Decision | None) -> list:
    return added_views(record)  # type: ignore[arg-type]


def _one(command: Command) -> Decision:
    return Decision((command,))


# ---- writes on one session --------------------------------------------------------------------


def _add_items(memory, state, tenant, session, args, idem, expected) -> Decision:
    section, items = args
    target = get_session(state, tenant, session)
    return _one(
        commands.add_items(
            target,
            section,
            items,
            memory.counter_of(target),
            idem,
            expected,
            memory.content_of,
            memory.summarizer,
        )  # fmt: skip
    )


def _update_item(memory, state, tenant, session, args, idem, expected) -> Decision:
    section, item, changes = args
    target = get_session(state, tenant, session)
    return _one(
        commands.update_item(
            target, section, item, changes, memory.counter_of(target), idem, expected
        )
    )


def _remove_items(_memory, state, tenant, session, args, idem, expected) -> Decision:
    section, ids = args
    target = get_session(state, tenant, session)
    return _one(commands.remove_items(target, section, ids, idem, expected))


def _configure_section(_memory, state, tenant, session, args, idem, expected) -> Decision:
    section, settings = args
    target = get_session(state, tenant, session)
    return _one(commands.configure_section(target, section, settings, idem, expected))


def _commit(_memory, state, tenant, session, args, idem, expected) -> Decision:
    (section,) = args
    return _one(commands.commit(get_session(state, tenant, session), section, idem, expected))


def _end_turn(_memory, state, tenant, session, _args, idem, expected) -> Decision:
    return _one(commands.end_turn(get_session(state, tenant, session), idem, expected))


def _end_session(_memory, state, tenant, session, _args, idem, expected) -> Decision:
    return _one(commands.end_session(get_session(state, tenant, session), idem, expected))


def _delete_session(_memory, state, tenant, session, _args, idem, expected) -> Decision:
    return _one(commands.delete_session(get_session(state, tenant, session), idem, expected))


TRANSCRIPT_KEY = "{}/transcript"  # the transcript's idempotency key, from the end's


def transcript_items(messages: object) -> list[dict]:
    """A transcript given at end (`[{role, content}]`, AgentOps' shape) as `messages` items."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidInput("messages must be a non-empty list of {role, content} objects")
    items = []
    for n, m in enumerate(messages):
        if type(m) is not dict or set(m) - {"role", "content"}:
            raise InvalidInput(f"messages[{n}] must be an object of role and content only")
        role, content = m.get("role"), m.get("content")
        if type(role) is not str or not role or type(content) is not str:
            raise InvalidInput(f"messages[{n}]: role must be a non-empty string, content a string")
        items.append({"content": content, "role": role})
    return items


def _record_transcript(memory: Memory, tenant: str, session: str, args: tuple) -> tuple:
    """Before the end, outside the lock: the transcript given at end becomes the session's
    messages (one `item.added`), so they are counted and quoted like any message. Skipped when
    the session has ended already (a retry is then answered from its first record, a second end
    refused) or when the end's key shows a retry that already recorded it."""
    items, idem, expected = args or (None, None, None)
    if items:
        key = TRANSCRIPT_KEY.format(idem) if idem is not None else None

        def decide(state: MemoryState) -> Decision | None:
            target = get_session(state, tenant, session)
            if target.ended_seq is not None or (key is not None and key in target.idempotency):
                return None
            return _one(
                commands.add_items(
                    target,
                    "messages",
                    items,
                    memory.counter_of(target),
                    key,
                    expected,
                    memory.content_of,
                    memory.summarizer,
                )  # fmt: skip
            )

        memory.append(decide)
    return args


def _ended(memory: Memory, record: Record | None, _decision: Decision | None) -> Record:
    """Append the summary of the session `record` ended, unless it is there already (a retry)."""
    tenant, session = record.tenant, record.session  # type: ignore[union-attr]
    summarized = memory.read(lambda state: get_session(state, tenant, session).summary_at)
    if summarized is None or summarized[0] < record.seq:  # type: ignore[union-attr]
        memory.append(lambda state: summarize(memory, state, tenant, session))
    return record  # type: ignore[return-value]


def _compact_for_payload(memory, state, tenant, session, args, idem, expected) -> Decision:
    section, target_bytes, budget, names, summarizer = args
    target = get_session(state, tenant, session)
    command, outcome = commands.compact_for_payload_error(
        target, section, target_bytes, budget, names, memory.content_of, memory.counter_of(target),
        summarizer or memory.summarizer, idem, expected,
    )  # fmt: skip
    return Decision((command,) if command is not None else (), outcome, target.version)


def _compaction(_memory: Memory, record: Record | None, decision: Decision | None) -> dict:
    if record is None:  # it fitted already: nothing was appended
        return decision.result  # type: ignore[union-attr]
    return commands.compaction_outcome(record.seq, record.payload)  # type: ignore[union-attr, arg-type]


ADD_ITEMS = CommandSpec("add_items", _add_items, "item.added", _added, session_local=True)
COMPACT_FOR_PAYLOAD = CommandSpec(
    "compact_for_payload_error", _compact_for_payload, "section.compacted", _compaction,
    session_local=True,
)  # fmt: skip
UPDATE_ITEM = CommandSpec("update_item", _update_item, "item.updated", session_local=True)
REMOVE_ITEMS = CommandSpec("remove_items", _remove_items, "item.removed", session_local=True)
CONFIGURE_SECTION = CommandSpec(
    "configure_section", _configure_section, "section.configured", session_local=True
)
COMMIT = CommandSpec("commit", _commit, "section.committed", session_local=True)
END_TURN = CommandSpec("end_turn", _end_turn, "turn.ended", session_local=True)
END_SESSION = CommandSpec(
    "end_session", _end_session, "session.ended", _ended, _record_transcript, result_blocks=True
)
DELETE_SESSION = CommandSpec("delete_session", _delete_session, "session.deleted")


# ---- sessions ---------------------------------------------------------------------------------


def check_not_reserved(session_id: str) -> None:
    if session_id == TENANT_SESSION:
        raise InvalidInput(
            f"session id {TENANT_SESSION!r} is reserved for tenant-wide observations: observe() "
            "writes there"
        )


def session_id_for(key: str | None) -> str:
    """A server-made session id: random, or, for a creation with an idempotency key, derived
    from the key, so a retry names the same session and finds the key in its `session.created`
    (32 hex digits either way: an identifier of log-format.md section 2)."""
    if key is None:
        return uuid.uuid4().hex
    return hashlib.sha256(b"ledgermem.session/" + key.encode("utf-8", "surrogatepass")).hexdigest()[
        :32
    ]


def _create_session(memory, state, tenant, session, args, idem, _expected) -> Decision:
    config, metadata = args
    check_not_reserved(session)
    created = commands.create_session(
        state, tenant, session, config, memory.counter_for(config), metadata, idem
    )
    return Decision((created, *_make_room(memory, state, tenant)))


def _make_room(memory: Memory, state: MemoryState, tenant: str) -> list[Command]:
    """The tenant's `max_sessions`: the least recently active sessions a creation takes past
    it, each a `session.deleted` (reason `max_sessions`) appended right after the creation."""
    config = memory.config
    victims = retention.over_max_sessions(state, tenant, config.max_sessions_for(tenant))
    return [retention.deletion(s, retention.MAX_SESSIONS, config.retention_erase) for s in victims]


def _erases(decision: Decision | None) -> bool:
    """Whether the decision deleted sessions by retention with `erase`: its erase follows."""
    return decision is not None and any(
        c.type == "session.deleted" and c.payload.get("erase") for c in decision.records
    )


def _made(memory: Memory, record: Record | None, decision: Decision | None) -> Record:
    if _erases(decision):
        memory.erase_retained()
    return record  # type: ignore[return-value]


def _get_or_create(memory, state, tenant, session, args, _idem, expected) -> Decision | None:
    if (tenant, session) in state.sessions:
        return None
    return _create_session(memory, state, tenant, session, args, None, expected)


def _created(memory: Memory, record: Record | None, decision: Decision | None) -> tuple:
    return _made(memory, record, decision), record is not None


CREATE_SESSION = CommandSpec(
    "create_session", _create_session, "session.created", result=_made, result_blocks=_erases
)
GET_OR_CREATE_SESSION = CommandSpec(
    "get_or_create_session", _get_or_create, result=_created, result_blocks=_erases
)


# ---- retention (sections/model/retention.py) --------------------------------------------------------


def _cleanup(memory, state, tenant, _session, args, _idem, _expected) -> Decision:
    """The sessions (of `tenant`, or of every tenant) last active more than `age_us` before this
    decision's ts, each a `session.deleted` with `reason`; the result names them."""
    age_us, reason, every_tenant = args
    cutoff = memory.decision_ts - age_us
    victims = retention.inactive(state, None if every_tenant else tenant, cutoff)
    erase = memory.config.retention_erase
    records = [retention.deletion(s, reason, erase) for s in victims]
    return Decision(records, [(s.tenant, s.id) for s in victims], state.seq)


def _cleaned(memory: Memory, _record: Record | None, decision: Decision | None) -> list:
    if _erases(decision):
        memory.erase_retained()
    return decision.result  # type: ignore[union-attr]


def _walk_deleted(memory: Memory, _tenant: str, _session: None, args: tuple) -> tuple:
    """Outside the lock: each deleted incarnation's records, down its back-links from the
    deletion (a later incarnation of the same id is not on them)."""
    (deletions,) = args
    walked = []
    for deleted_seq, tenant, session in deletions:
        payload = memory.history.payload_of(memory.record_at(deleted_seq)) or {}
        head = payload.get("prev_seq")
        chain = [] if head is None else erasure.session_chain(
            head, memory.record_at, memory.history.payload_of
        )  # fmt: skip
        walked.append(
            (deleted_seq, tenant, session, sorted(r.seq for r, _ in chain if r.has_payload))
        )
    return (walked,)


def _erase_deleted(_memory, state, _tenant, _session, args, _idem, _expected) -> Decision | None:
    """One `session.erased` per deletion still waiting for its erase, appended together."""
    (walked,) = args
    made = (retention.erasure_of_deleted(state, t, s, d, seqs) for d, t, s, seqs in walked)
    records = [command for command in made if command is not None]
    return Decision(records, len(records)) if records else None


def _redact_deleted(memory: Memory, record: Record | None, decision: Decision | None) -> int:
    if record is None:  # erased already
        return 0
    return erase_flow.redact_sessions(memory, record, decision.result)  # type: ignore[union-attr, arg-type]


CLEANUP = CommandSpec("cleanup", _cleanup, result=_cleaned, result_blocks=_erases)
ERASE_DELETED = CommandSpec(
    "erase_deleted", _erase_deleted, result=_redact_deleted, prepare=_walk_deleted,
    result_blocks=True,
)  # fmt: skip


def tenant_session(memory: Memory, state: MemoryState, tenant: str) -> Decision | None:
    """The session that holds the tenant's observations, created once."""
    if (tenant, TENANT_SESSION) in state.sessions:
        return None
    metadata = {"reserved": "tenant-wide observations"}
    return _one(
        commands.create_session(
            state, tenant, TENANT_SESSION, memory.config, memory.counter, metadata
        )
    )


def summarize(memory: Memory, state: MemoryState, tenant: str, session_id: str) -> Decision | None:
    """The summary of a session that has just ended (sections/retrieval/summaries.py)."""
    session = state.sessions.get((tenant, session_id))
    if session is None or session.ended_seq is None:
        return None
    return _one(summaries.summarize(session, lambda id_: _message(memory, session, id_)))


def _message(memory: Memory, session: SessionState, id_: str) -> object:
    """A message's content: live, or from the record that added it (None if erased)."""
    section = session.sections.get("messages")
    item = section.items.get(id_) if section is not None else None
    if item is not None and not compaction.is_summary(item):  # a summary took over its id
        return memory.content_of(item)
    seq = parse_item_id(id_)[0]
    memory.writer.wait_for(seq)
    return memory.history.logged_content(id_, seq)


# ---- reads ------------------------------------------------------------------------------------


def _read_items(_memory, state, tenant, session, args, _idem, _expected) -> Decision:
    section, ids, reader, chosen = args
    chosen: ItemFilter
    target = get_session(state, tenant, session)
    found: list[tuple[str, Item]] = []
    if ids is None:  # whole sections
        for name in [section] if section is not None else list(target.sections):
            found.extend((name, item) for item in commands.get_section(target, name).items.values())
        if chosen.timeline:  # across sections, in the order they were written
            found.sort(key=lambda pair: pair[1].order)
    else:  # these ids, in this section or wherever they are
        for id_ in ids:
            name = section if section is not None else commands.section_of(target, id_)
            found.append((name, commands.get_item(commands.get_section(target, name), id_)))
    found = chosen.select(found)
    reads: dict[str, list[str]] = {}
    for name, item in found:
        reads.setdefault(name, []).append(item.id)
    purpose = "events" if chosen.timeline else "get"
    command = commands.read_items(target, reads, reader, purpose)
    views = [view_of(name, item) for name, item in found]
    return Decision((command,) if command is not None else (), views, target.version)


def _filled(memory: Memory, _record: Record | None, decision: Decision | None) -> list:
    return memory.fill(decision.result)  # type: ignore[union-attr, arg-type]


def _fill_reads(decision: Decision | None) -> bool:
    """Whether `_filled` reads the log: some content is kept there (see `Memory.fill`)."""
    return any(view.content is None for view in decision.result)  # type: ignore[union-attr]


READ_ITEMS = CommandSpec(
    "read_items", _read_items, result=_filled, result_blocks=_fill_reads, session_local=True
)


# Reads that return content without naming items (time travel, summaries, live channels) leave
# their traces too: the rules are in sections/retrieval/read_traces.py.


def _past_state(memory: Memory, tenant: str, wanted: str | None, args: tuple) -> tuple:
    """Time travel's replay, outside the lock (on a worker thread in the async runner)."""
    (at,) = args
    if memory.writer.closed:
        raise WriterClosed("the memory is closed")
    found, reads = read_traces.past_sessions(memory.state_at(at), tenant, wanted, at)
    live = memory.read(lambda now: {sid for sid in reads if (tenant, sid) in now.sessions})
    if any(reads[sid] for sid in set(reads) - live):  # traced on the tenant's own session
        memory.append(lambda now: tenant_session(memory, now, tenant))
    return at, found, reads


def _state_read(_memory, state, tenant, _session, args, _idem, _expected) -> Decision:
    at, found, reads = args
    return Decision(read_traces.state_reads(state, tenant, at, reads), found, state.seq)


def _summary_read(_memory, state, tenant, session_id, args, _idem, _expected) -> Decision:
    limit, reader = args
    made, found = read_traces.summary_reads(state, tenant, session_id, limit, reader)
    return Decision(made, found, state.seq)


def _stream_holder(memory: Memory, tenant: str, _session: None, args: tuple) -> tuple:
    memory.append(lambda state: tenant_session(memory, state, tenant))
    return args


def _stream_trace(_memory, state, tenant, _session, args, _idem, _expected) -> Decision:
    event, stream = args
    return _one(read_traces.stream_trace(state, tenant, event, stream))


READ_STATE = CommandSpec("read_state", _state_read, result=_decided, prepare=_past_state)
READ_SUMMARIES = CommandSpec("read_summaries", _summary_read, result=_decided)
TRACE_STREAM = CommandSpec("trace_stream", _stream_trace, prepare=_stream_holder)


def _ranked_observations(memory: Memory, tenant: str, session: str, args: tuple) -> tuple:
    """Context assembly's first step, outside the lock: rank the observations for the query."""
    budget, sections, reader, extra = args
    if type(budget) is not int or budget <= 0:
        raise InvalidInput("the context budget must be a positive number of tokens")
    hits = []
    if extra.query and extra.observations:
        query = Query(
            extra.query[: inject.QUERY_CHARS],
            sessions=(session, TENANT_SESSION),
            sections=(observations.SECTION,),
            top_k=extra.observations,
        )
        hits = [(h.session, h.id, h.score) for h in memory.search_index.search(tenant, query)]
    fact_hits = []
    if extra.query and extra.facts:  # closed facts match too: ask for more than are wanted
        query = Query(extra.query[: inject.QUERY_CHARS], sessions=(TENANT_SESSION,),
                      sections=(facts.SECTION,), top_k=min(MAX_TOP_K, 4 * extra.facts))  # fmt: skip
        fact_hits = [h.id for h in memory.search_index.search(tenant, query)]
    return budget, sections, reader, extra, hits, fact_hits


def _assemble(memory, state, tenant, session_id, args, _idem, _expected) -> Decision:
    budget, sections, reader, extra, hits, fact_hits = args
    extra: Extra
    session = get_session(state, tenant, session_id)
    counter = memory.counter_of(session)
    injection = None
    if extra.observations or extra.summaries or extra.facts or extra.sessions:
        pool = inject.observation_pool(state, tenant, session_id)
        chosen = inject.choose_observations(pool, hits, extra.observations)
        recent = summaries.recent(state, tenant, session_id, extra.summaries)
        settings = {"observations": extra.observations, "summaries": extra.summaries,
                    "observation_chars": extra.observation_chars}  # fmt: skip
        if extra.facts:
            settings["facts"] = extra.facts
        if extra.sessions:  # AgentOps' `<memory:sessions>` block (sections/retrieval/inject.py)
            settings["sessions"] = extra.sessions
        agentops = summaries.recent(state, tenant, session_id, extra.sessions)
        if extra.query and (extra.observations or extra.facts):  # what was searched for
            settings["query"] = extra.query[: inject.QUERY_CHARS]
        known = inject.choose_facts(
            state, tenant, session_id, fact_hits, memory.decision_ts, extra.facts
        )
        limit = budget
        while True:  # the injected block, rendered, within the budget: fewer lines until it is
            injection = inject.build(
                chosen, recent, extra.observation_chars, memory.content_of, counter,
                limit, settings, known,
            )  # fmt: skip
            injection = inject.add_sessions(injection, agentops, counter, limit)
            over = render.tokens_of(injection.messages, counter) - budget
            if over <= 0:
                break
            limit -= over
    command, messages = commands.assemble_context(
        session, sections, budget, memory.content_of, counter, reader, injection
    )
    return Decision((command,), messages)


def _assembled(_memory: Memory, record: Record | None, decision: Decision | None) -> tuple:
    return record, decision.result  # type: ignore[union-attr]


ASSEMBLE_CONTEXT = CommandSpec(
    "assemble_context", _assemble, result=_assembled, prepare=_ranked_observations
)


# ---- search and observations (tenant-wide; `session` is None) ---------------------------------


def search_query(
    text: object, sessions, sections, tags, since, until, top_k, reader, markers,
    tenant_observations: bool = False,
) -> Query:  # fmt: skip
    """A search's arguments, checked: bad ones raise InvalidInput naming the argument."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("give a search query: a non-empty string")
    for name, value in (("sessions", sessions), ("sections", sections), ("tags", tags)):
        if value is not None and (
            isinstance(value, str) or not all(isinstance(v, str) for v in value)
        ):
            raise InvalidInput(f"{name} must be a list of strings")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (type(value) is not int or abs(value) > MAX_TIME):
            raise InvalidInput(
                f"{name} must be an integer of microseconds since the epoch, within ±2**62"
            )
    if type(top_k) is not int or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}")
    if reader not in commands.READERS:
        raise InvalidInput(f"reader must be one of {', '.join(commands.READERS)}")
    if len(markers) != 2 or not all(isinstance(m, str) for m in markers):
        raise InvalidInput("markers must be two strings: before and after each matched word")
    return Query(
        text,
        tuple(sessions) if sessions is not None else None,
        tuple(sections) if sections is not None else None,
        tuple(tags or ()),
        since,
        until,
        top_k,
        (markers[0], markers[1]),
        ((TENANT_SESSION, observations.SECTION),) if tenant_observations and sessions else (),
    )


def _query_index(memory: Memory, tenant: str, _session: None, args: tuple) -> tuple:
    # The index has its own lock: a query never holds up writers. Hits whose item left
    # meanwhile are dropped under the memory's lock, where the read record is decided.
    query, reader = args
    if memory.writer.closed:
        raise WriterClosed("the memory is closed")
    return reader, memory.search_index.search(tenant, query)


def _search(_memory, state, tenant, _session, args, _idem, _expected) -> Decision:
    reader, hits = args
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


def _hits(memory: Memory, _record: Record | None, decision: Decision | None) -> list[SearchHit]:
    found: list[SearchHit] = decision.result  # type: ignore[union-attr, assignment]
    views = memory.fill([hit.item for hit in found])
    return [
        SearchHit(hit.session, view, hit.score, hit.snippet)
        for hit, view in zip(found, views, strict=True)
    ]


SEARCH = CommandSpec("search", _search, result=_hits, prepare=_query_index, result_blocks=True)


def _observations_session(memory: Memory, tenant: str, _session: None, args: tuple) -> tuple:
    if args[2]:  # tenant-wide
        source = args[3]
        if source is not None:  # refused before `_tenant` is made for it (decide checks again)
            memory.read(lambda state: commands.check_open(get_session(state, tenant, source)))
        memory.append(lambda state: tenant_session(memory, state, tenant))
    return args


def _observe(memory, state, tenant, _session, args, _idem, _expected) -> Decision:
    obs, session_id, _, source = args
    target = get_session(state, tenant, session_id)
    if session_id != TENANT_SESSION:  # the tenant's own session outlives any end()
        commands.check_open(target)
    if source is not None:  # an ended session writes nothing more, tenant-wide neither
        commands.check_open(get_session(state, tenant, source))
    command, tier, item = observations.decide(
        target, obs, memory.decision_ts, memory.dedup_window_us, memory.counter_of(target),
        memory.content_of, source,
    )  # fmt: skip
    return Decision((command,), (session_id, tier, item))


def _observed(_memory: Memory, record: Record | None, decision: Decision | None):
    session_id, tier, item = decision.result  # type: ignore[union-attr, misc]
    payload = record.payload  # type: ignore[union-attr]
    if item is None:
        id_, meta = item_id(record.seq, 0), payload["items"][0]["metadata"]  # type: ignore[union-attr]
    else:
        id_, meta = item.id, payload["set"]["metadata"]
    return observations.Outcome(id_, session_id, tier, meta["revision"], meta["duplicates"])


OBSERVE = CommandSpec("observe", _observe, result=_observed, prepare=_observations_session)


def observation_args(
    type: str, title: str, content: str, *, tags: list[str] | tuple[str, ...] = (),
    topic_key: str | None = None, session: str | None = None, source: dict | None = None,
    from_session: str | None = None,
) -> tuple:  # fmt: skip
    """OBSERVE's arguments: the observation, checked (`source`: where it came from, {str: str}
    kept in its metadata), the session that will hold it, whether that is the tenant's, and the
    session a tenant-wide one came from (`from_session`, kept in `metadata.session`)."""
    obs = Observation.of(type, title, content, tags, topic_key, source)
    if from_session is not None and (session is not None or not isinstance(from_session, str)):
        raise InvalidInput("from_session names the session a tenant-wide observation came from")
    return obs, TENANT_SESSION if session is None else session, session is None, from_session


# ---- erasure (sections/specs/erase_flow.py) ---------------------------------------------------------

ERASE_ITEMS = CommandSpec(
    "erase_items",
    erase_flow.decide_items,
    result=erase_flow.redact_items,
    prepare=erase_flow.walk_items,
    result_blocks=True,
)
ERASE_SESSION = CommandSpec(
    "erase_session",
    erase_flow.decide_session,
    result=erase_flow.redact_session,
    prepare=erase_flow.scan_session,
    result_blocks=True,
)

SPECS = (
    ADD_ITEMS, COMPACT_FOR_PAYLOAD, UPDATE_ITEM, REMOVE_ITEMS, CONFIGURE_SECTION, COMMIT, END_TURN, END_SESSION,
    DELETE_SESSION, CREATE_SESSION, GET_OR_CREATE_SESSION, READ_ITEMS, READ_STATE, READ_SUMMARIES,
    TRACE_STREAM, ASSEMBLE_CONTEXT, SEARCH, OBSERVE, ERASE_ITEMS, ERASE_SESSION,
    CLEANUP, ERASE_DELETED,
)  # fmt: skip
