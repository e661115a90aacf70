"""AgentOps' reads as commands of our table: what they return is read under the memory's lock and
traced, like every read (docs/agentops.md). The writes are our own commands already (create,
end, observe, update, remove, erase); sections/adapters/agentops.py has the names and answer shapes.

`READ_OBSERVATIONS` takes a pure `select(state) -> [(holder session, item)]` and a purpose: the
items selected are recorded as read (`items.read`, one record per holder session, the purpose
naming the call: "agentops.get", "agentops.context", ...) and returned with their contents.
"""

from __future__ import annotations

from collections.abc import Callable

from eventstore.record import Record
from sections.adapters import agentops
from sections.model import commands
from sections.model.commands import Decision
from sections.model.item import Item
from sections.model.state import MemoryState, SessionState
from sections.retrieval import inject, read_traces
from sections.retrieval.observations import SECTION
from sections.retrieval.search import Query
from sections.retrieval.views import MAX_TOP_K, ItemView, view_of
from sections.runtime.memory import Memory
from sections.specs.command_specs import GET_OR_CREATE_SESSION
from sections.specs.context import CommandContext
from sections.specs.spec import Call, CommandSpec, decided, what_was_decided

Select = Callable[[MemoryState], list[tuple[str, Item]]]


def _read_observations(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    select, reader, purpose = call.args
    tenant = call.tenant
    found = select(state)
    reads: dict[str, list[str]] = {}
    for sid, item in found:
        reads.setdefault(sid, []).append(item.id)
    made = [
        commands.read_items(state.sessions[(tenant, sid)], {SECTION: ids}, reader, purpose)
        for sid, ids in reads.items()
    ]
    views = [(sid, view_of(SECTION, item)) for sid, item in found]
    return Decision([c for c in made if c is not None], views, state.seq)


def _filled(ctx: CommandContext, _record: Record | None, decision: Decision | None) -> list:
    found: list[tuple[str, ItemView]] = decided(decision).result
    views = ctx.fill([view for _, view in found])
    return [(sid, view) for (sid, _), view in zip(found, views, strict=True)]


READ_OBSERVATIONS = CommandSpec(
    "agentops_read_observations", _read_observations, result=_filled, result_blocks=True
)


def _read_sessions(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    """AgentOps sessions as answers, built under the lock; the messages their summaries quote
    are recorded as read (as `GET /v1/summaries` records them)."""
    select, shape, reader, purpose = call.args
    chosen = select(state)
    made = [
        commands.read_items(s, {"messages": read_traces.quoted(s.summary)}, reader, purpose)
        for s in chosen
        if s.summary is not None
    ]
    return Decision([c for c in made if c is not None], [shape(s) for s in chosen], state.seq)


READ_SESSIONS = CommandSpec("agentops_read_sessions", _read_sessions, result=what_was_decided)


async def read_sessions(
    memory: Memory, tenant: str, select: Callable[[MemoryState], list[SessionState]],
    shape: Callable[[SessionState], object], purpose: str, reader: str = "agent",
) -> list:  # fmt: skip
    return await memory.run_async(READ_SESSIONS, tenant, None, (select, shape, reader, purpose))


def rank(memory: Memory, tenant: str, sessions: list[str], query: str, limit: int) -> list:
    """The BM25 ranking of these holders' observations for `query`: [(session, id, score)],
    best first. Not a read yet: the caller's READ_OBSERVATIONS records what it returns."""
    if not sessions or not query.strip():
        return []
    found = memory.search_index.search(
        tenant, Query(query[: inject.QUERY_CHARS], sessions=tuple(sessions),
                      sections=(SECTION,), top_k=min(MAX_TOP_K, limit)),
    )  # fmt: skip
    return [(hit.session, hit.id, hit.score) for hit in found]


async def ensure_holder(memory: Memory, tenant: str, project: str, scope: str) -> str:
    """The holder session of (project, scope), created on first use."""
    sid = agentops.holder(project, scope)
    metadata = agentops.holder_metadata(project, scope)
    await memory.run_async(GET_OR_CREATE_SESSION, tenant, sid, (memory.config, metadata))
    return sid


async def read_observations(
    memory: Memory, tenant: str, select: Select, purpose: str, reader: str = "agent"
) -> list[tuple[str, ItemView]]:
    return await memory.run_async(READ_OBSERVATIONS, tenant, None, (select, reader, purpose))
