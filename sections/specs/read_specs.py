"""The reads, as specs of the command table (command_specs.py): a session's items, its context,
time travel, summaries and the live channels' traces. Every read leaves an `items.read` record
(sections/retrieval/read_traces.py has the rules for those that name no item), and returns
content only once that record is durable."""

from __future__ import annotations

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.model import commands, context_commands, render
from sections.model.commands import Decision, get_session
from sections.model.item import Item
from sections.model.item_filter import ItemFilter
from sections.model.names import OBSERVATIONS, TENANT_SESSION
from sections.model.state import MemoryState
from sections.model.tokens import TokenCounter
from sections.retrieval import facts, inject, read_traces, recall, summaries
from sections.retrieval.search import Query
from sections.retrieval.views import MAX_TOP_K, Extra, ItemView, view_of
from sections.specs.context import CommandContext
from sections.specs.session_specs import tenant_session
from sections.specs.spec import Call, CommandSpec, decided, one, what_was_decided

# ---- a session's items ------------------------------------------------------------------------


def _read_items(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    chosen: ItemFilter
    section, ids, reader, chosen = call.args
    target = get_session(state, call.tenant, call.session)
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


def _filled(ctx: CommandContext, _record: Record | None, decision: Decision | None) -> list:
    return ctx.fill(decided(decision).result)


def _fill_reads(decision: Decision | None) -> bool:
    """Whether `_filled` reads the log: some content is kept there (see `CommandContext.fill`)."""
    views: list[ItemView] = decided(decision).result
    return any(view.content is None for view in views)


READ_ITEMS = CommandSpec(
    "read_items", _read_items, result=_filled, result_blocks=_fill_reads, session_local=True
)

# ---- reads that return content without naming items -------------------------------------------


def _past_state(ctx: CommandContext, call: Call) -> tuple:
    """Time travel's replay, outside the lock (on a worker thread in the async runner)."""
    (at,) = call.args
    tenant = call.tenant
    found, reads = read_traces.past_sessions(ctx.state_at(at), tenant, call.session, at)
    live = ctx.read(lambda now: {sid for sid in reads if (tenant, sid) in now.sessions})
    if any(reads[sid] for sid in set(reads) - live):  # traced on the tenant's own session
        ctx.append(lambda now: tenant_session(ctx, now, tenant))
    return at, found, reads


def _state_read(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    at, found, reads = call.args
    return Decision(read_traces.state_reads(state, call.tenant, at, reads), found, state.seq)


def _summary_read(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    limit, reader = call.args
    made, found = read_traces.summary_reads(state, call.tenant, call.session, limit, reader)
    return Decision(made, found, state.seq)


def _stream_holder(ctx: CommandContext, call: Call) -> tuple:
    tenant = call.tenant
    ctx.append(lambda state: tenant_session(ctx, state, tenant))
    return call.args


def _stream_trace(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    event, stream = call.args
    return one(read_traces.stream_trace(state, call.tenant, event, stream))


READ_STATE = CommandSpec("read_state", _state_read, result=what_was_decided, prepare=_past_state)
READ_SUMMARIES = CommandSpec("read_summaries", _summary_read, result=what_was_decided)
TRACE_STREAM = CommandSpec("trace_stream", _stream_trace, prepare=_stream_holder)

# ---- context assembly -------------------------------------------------------------------------


def _ranked_observations(ctx: CommandContext, call: Call) -> tuple:
    """Context assembly's first step, outside the lock: rank the observations for the query."""
    extra: Extra
    budget, sections, reader, extra = call.args
    if type(budget) is not int or budget <= 0:
        raise InvalidInput("the context budget must be a positive number of tokens")
    hits = []
    if extra.query and extra.observations:
        query = Query(
            extra.query[: inject.QUERY_CHARS],
            sessions=(call.session_id, TENANT_SESSION),
            sections=(OBSERVATIONS,),
            top_k=extra.observations,
            users=ctx.read(lambda state: inject.pool_users(state, call.tenant, call.session_id)),
        )
        hits = [(h.session, h.id, h.score) for h in ctx.search(call.tenant, query)]
    fact_hits = []
    if extra.query and extra.facts:  # closed facts match too: ask for more than are wanted
        query = Query(extra.query[: inject.QUERY_CHARS], sessions=(TENANT_SESSION,),
                      sections=(facts.SECTION,), top_k=min(MAX_TOP_K, 4 * extra.facts))  # fmt: skip
        fact_hits = [h.id for h in ctx.search(call.tenant, query)]
    return budget, sections, reader, extra, hits, fact_hits, _recall_candidates(ctx, call, extra)


def _recall_candidates(ctx: CommandContext, call: Call, extra: Extra) -> tuple[list, list]:
    """The BM25 candidates of the user's past for the query, and the semantic extra's nearest
    items (outside the lock)."""
    if extra.recall_share(ctx.config.recall_share) is None or extra.query is None:
        return [], []
    tenant, session_id = call.tenant, call.session_id
    across = ctx.config.recall_crosses_users(tenant)
    semantic = ctx.config.recall_semantic  # its index filters by session, not by owner
    scope, user = ctx.read(
        lambda state: recall.scope_of(state, tenant, session_id, across, sessions=semantic)
    )
    query = Query(
        recall.query_text(extra.query[: inject.QUERY_CHARS]),
        top_k=recall.CANDIDATES,
        common=recall.COMMON,
        snippets=False,
        owners=None if across else (user,),
    )
    lexical = [recall.Candidate(h.session, h.section, h.id, h.score)
               for h in ctx.search(tenant, query)]  # fmt: skip
    near = [] if not semantic else ctx.similar(
        tenant, extra.query[: inject.QUERY_CHARS],
        None if scope is None else (*scope, TENANT_SESSION), recall.SIMILAR,
    )  # fmt: skip
    return lexical, near


def _recall_request(
    ctx: CommandContext, state: MemoryState, call: Call, extra: Extra,
    candidates: tuple[list, list], counter: TokenCounter,
) -> render.RecallRequest | None:  # fmt: skip
    share = extra.recall_share(ctx.config.recall_share)
    if share is None or extra.query is None:
        return None
    tenant = call.tenant
    across = ctx.config.recall_crosses_users(tenant)
    user = get_session(state, tenant, call.session_id).user
    ranked = recall.rank(state, tenant, candidates[0], user, across, candidates[1])

    def fill(already: set[tuple[str, str]], limit: int) -> render.Injection:
        return recall.build(state, tenant, ranked, already, limit, counter, ctx.content_of)

    settings = {"query": extra.query[: inject.QUERY_CHARS], "share": share}
    return render.RecallRequest(share, fill, settings)


def _assemble(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    extra: Extra
    budget, sections, reader, extra, hits, fact_hits, candidates = call.args
    tenant, session_id = call.tenant, call.session_id
    session = get_session(state, tenant, session_id)
    counter = ctx.counter_of(session)
    injection = None
    if extra.observations or extra.summaries or extra.facts or extra.sessions:
        pool = inject.observation_pool(state, tenant, session_id)
        chosen = inject.choose_observations(pool, hits, extra.observations)
        across = ctx.config.recall_crosses_users(tenant)
        recent = summaries.recent(state, tenant, session_id, extra.summaries, across)
        settings: dict[str, object] = {
            "observations": extra.observations, "summaries": extra.summaries,
            "observation_chars": extra.observation_chars,
        }  # fmt: skip
        if extra.facts:
            settings["facts"] = extra.facts
        if extra.sessions:  # AgentOps' `<memory:sessions>` block (sections/retrieval/inject.py)
            settings["sessions"] = extra.sessions
        agentops = summaries.recent(state, tenant, session_id, extra.sessions, across)
        if extra.query and (extra.observations or extra.facts):  # what was searched for
            settings["query"] = extra.query[: inject.QUERY_CHARS]
        known = inject.choose_facts(state, tenant, session_id, fact_hits, ctx.decision_ts,
                                    extra.facts)  # fmt: skip
        limit = budget
        while True:  # the injected block, rendered, within the budget: fewer lines until it is
            injection = inject.build(
                chosen, recent, extra.observation_chars, ctx.content_of, counter,
                limit, settings, known,
            )  # fmt: skip
            injection = inject.add_sessions(injection, agentops, counter, limit)
            over = render.tokens_of(injection.messages, counter) - budget
            if over <= 0:
                break
            limit -= over
    asked = _recall_request(ctx, state, call, extra, candidates, counter)
    command, messages = context_commands.assemble_context(
        session, sections, budget, ctx.content_of, counter, reader, injection, asked
    )
    return Decision((command,), messages)


def _assembled(_ctx: CommandContext, record: Record | None, decision: Decision | None) -> tuple:
    return record, decided(decision).result


ASSEMBLE_CONTEXT = CommandSpec(
    "assemble_context", _assemble, result=_assembled, prepare=_ranked_observations
)
