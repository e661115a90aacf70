"""AgentOps' reads that rank or place observations (docs/agentops.md): search (topic keys, then
BM25), the context its runtime injects, and the timeline around one observation. Hits are
reads: each leaves its `items.read` record."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from sections.adapters import agentops
from sections.adapters import agentops_specs as reads
from sections.model.state import MemoryState
from sections.retrieval import inject
from sections.retrieval.observations import SECTION
from sections.retrieval.views import ItemView
from streams.apidoc import operation
from streams.seeds import agentops_models as m
from streams.seeds.agentops_resource import TAGS, AgentOpsResource, text_of
from streams.web.errors import ApiError
from streams.web.responses import json_response


def _result(view: ItemView, rank: float) -> dict:
    out = {
        "id": int(view.id),
        "type": view.kind,
        "title": view.metadata.get("title", ""),
        "content": text_of(view.content),
        "rank": rank,
    }
    if view.metadata.get("topic_key"):
        out["topic_key"] = view.metadata["topic_key"]
    return out


class AgentOpsSearch(AgentOpsResource):
    @operation(
        "searchAgentOpsObservations",
        "AgentOps: search the observations (topic keys, then BM25; hits traced as read)",
        query=m.AgentOpsSearchQuery,
        replies=m.replies({200: list[m.AgentOpsSearchResult]}, appends=True),
        tags=TAGS,
    )
    async def search(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        given = self._query(request, m.AgentOpsSearchQuery)
        query, kind, limit = given.q, given.type, given.limit
        project = agentops.project_of(given.project)
        if not query.strip():
            return json_response([])
        memory = self.memory(p)
        sessions = self._read(memory, lambda s: agentops.holders(s, p.tenant, project, given.scope))
        results: list[dict] = []
        if "/" in query:  # a topic path: topic keys holding it come first, as the service does

            def by_topic(state: MemoryState) -> list:
                found = agentops.observations_of(state, p.tenant, sessions)
                wanted = query.lower()
                found = [
                    (sid, item) for sid, item in found
                    if wanted in str(item.metadata.get("topic_key", "")).lower()
                    and (not kind or item.kind == kind)
                ]  # fmt: skip
                return found[::-1][:limit]

            with self.service.write():
                found = await reads.read_observations(memory, p.tenant, by_topic, "agentops.search")
            results = [_result(view, -1000.0) for _, view in found]
        if sessions and len(results) < limit:
            top_k = min(agentops.MAX_LIMIT, limit * (4 if kind else 1) + len(results))
            with self.service.write():  # hits are reads: they append
                hits = await memory.search_async(
                    query, tenant=p.tenant, sessions=sessions, sections=[SECTION], top_k=top_k
                )
            seen = {r["id"] for r in results}
            for hit in hits:
                if not agentops.is_observation(hit.item.id):  # ours, added through /v1
                    continue
                if kind and hit.item.kind != kind or int(hit.item.id) in seen:
                    continue
                results.append(_result(hit.item, -hit.score))
                if len(results) >= limit:
                    break
        return json_response(results)

    @operation(
        "getAgentOpsContext",
        "AgentOps: what the runtime injects: recent session summaries and observations",
        query=m.AgentOpsContextQuery,
        replies=m.replies({200: m.AgentOpsContext}, appends=True),
        tags=TAGS,
    )
    async def context(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        given = self._query(request, m.AgentOpsContextQuery)
        project, limit = agentops.project_of(given.project), given.limit
        memory = self.memory(p)
        sessions = self._read(memory, lambda s: agentops.holders(s, p.tenant, project, given.scope))
        hits = await asyncio.to_thread(reads.rank, memory, p.tenant, sessions, given.query, limit)

        def select(state: MemoryState) -> list:
            pool = agentops.observations_of(state, p.tenant, sessions)
            chosen = inject.choose_observations(pool, hits, limit)
            return [(sid, item) for sid, item, _method, _score in chosen]

        def summarized(state: MemoryState) -> list:
            found = agentops.agentops_sessions(state, p.tenant, project)
            found = [s for s in found if agentops.end_summary(s)]
            return found[: agentops.CONTEXT_SESSIONS]

        with self.service.write():
            recent = await reads.read_sessions(
                memory, p.tenant, summarized,
                lambda s: {"summary": agentops.end_summary(s)}, "agentops.context",
            )  # fmt: skip
            found = await reads.read_observations(memory, p.tenant, select, "agentops.context")
        observations = [
            {"type": v.kind, "title": v.metadata.get("title", ""),
             "content": agentops.truncate(text_of(v.content), agentops.CONTEXT_CHARS)}
            for _, v in found
        ]  # fmt: skip
        return json_response({"recent_sessions": recent, "recent_observations": observations})

    @operation(
        "getAgentOpsTimeline",
        "AgentOps: the observations around one, in its project's order (traced as read)",
        query=m.AgentOpsTimelineQuery,
        replies=m.replies({200: list[m.AgentOpsTimelineEntry]}, appends=True),
        tags=TAGS,
    )
    async def timeline(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        given = self._query(request, m.AgentOpsTimelineQuery)
        anchor, before, after = given.observation_id, given.before, given.after

        def select(state: MemoryState) -> list:
            found = agentops.find(state, p.tenant, anchor)
            if found is None:
                return []
            named = agentops.names_of(state, p.tenant, found[0])
            every = agentops.observations_of(
                state, p.tenant, agentops.holders(state, p.tenant, named[0])
            )
            at = next(n for n, (_, item) in enumerate(every) if item.id == str(anchor))
            return every[max(0, at - before) : at + after + 1]

        with self.service.write():
            found = await reads.read_observations(
                self.memory(p), p.tenant, select, "agentops.timeline"
            )
        if not found:
            raise ApiError(404, "not_found", f"observation {anchor} not found")
        return json_response(
            [
                {
                    "id": int(v.id),
                    "type": v.kind,
                    "title": v.metadata.get("title", ""),
                    "content": text_of(v.content),
                    "created_at": agentops.rfc3339(v.ts),
                }
                for _, v in found
            ]  # fmt: skip
        )
