"""The agentops-memory service's HTTP contract, beside /v1, on our model (docs/agentops.md).

    POST   /sessions                  {id, project}                 201 the session
    POST   /sessions/{id}/end         {messages: [{role, content}]} {session_id, summary, message_count}
    GET    /sessions/recent           ?project=&limit=5
    POST   /observations              {session_id, type, title, content, project, tags, scope,
                                       topic_key}                   201 {id, action, revision_count,
                                                                         duplicate_count}
    GET    /observations/recent       ?project=&type=&scope=&limit=20
    GET    /observations/{id}
    PATCH  /observations/{id}         {type?, title?, content?, tags?}
    DELETE /observations/{id}         ?hard=true erases             204
    GET    /search                    ?q=&project=&type=&scope=&limit=10
    GET    /context                   ?project=&query=&scope=&limit=5
    GET    /timeline                  ?observation_id=&before=3&after=3
    GET    /stats                     ?project=
    GET    /export                    ?project=
    POST   /import                    {sessions, observations}
    GET    /health

Our tokens and tenancy: every call but /health needs a token with `read` or `write` like /v1,
and works in the token's tenant, where `project` is a namespace (sections/adapters/agentops.py). Each
write is one of our commands and each read of contents leaves `items.read` records, so the log
holds every call that changed or showed memory. Refusals use the service's body,
`{"error": "message"}`, with our statuses (400 for its validation failures, naming each field).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response

from eventstore.errors import InvalidInput, LedgerError
from sections.adapters import agentops
from sections.adapters import agentops_specs as reads
from sections.errors import NotFound, VersionConflict
from sections.model.state import MemoryState
from sections.retrieval import inject
from sections.retrieval.observations import SECTION, TYPES, Observation
from sections.runtime.memory import Memory
from sections.specs import command_specs as specs
from streams.apidoc import Reply, keep_operation, operation
from streams.apidoc.models import Identifier
from streams.seeds import agentops_models as m
from streams.server.service import Service
from streams.web.errors import ApiError, error_response, from_exception
from streams.web.json_body import read_json
from streams.web.responses import json_response
from streams.web.routing import RawRoute

Handler = Callable[[Request], Awaitable[Response]]
MAX_BODY = 1 << 20  # the service's request body limit
PATCH_RETRIES = 8  # a PATCH is a compare-and-set on the holder's version
TAGS = ("AgentOps",)
OBSERVATION_ID = {"id": (m.ObservationId, "the observation's id")}


class Invalid(Exception):
    """A refusal in the service's words: 400 `{"error": message}`."""


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    return json_response({"error": message}, status, headers)


def _wrap(handler: Handler) -> Callable:
    """The endpoint of `handler`, refusing in the service's shape, carrying its operation."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except Invalid as exc:
            return _error(400, str(exc))
        except ApiError as exc:
            if exc.status == 405:  # the router's refusal, in the shape of every other 405
                return error_response(405, exc.code, exc.message, exc.headers)
            # the service answers an oversized body 400, as bad JSON
            return _error(400 if exc.status == 413 else exc.status, exc.message, exc.headers)
        except LedgerError as exc:
            answer = from_exception(exc)
            message = orjson.loads(answer.body)["error"]["message"]
            retry = answer.headers.get("retry-after")
            return _error(answer.status_code, message, {"Retry-After": retry} if retry else None)

    return keep_operation(request_response(endpoint), handler)


def _limit(request: Request, name: str, default: int) -> int:
    """The service's `queryInt`: a bad or negative value is the default, at most 1000."""
    value = request.query_params.get(name, "")
    try:
        number = int(value) if value.isascii() else default
    except ValueError:
        return default
    return default if number < 0 else min(number, agentops.MAX_LIMIT)


def _id(request: Request) -> int:
    value = request.path_params["id"]
    if value == "recent":  # its own resource (GET only), which /observations/{id} must not take
        raise ApiError(
            405, "method_not_allowed",
            f"{request.method} is not allowed on /observations/recent; use GET", {"Allow": "GET"},
        )  # fmt: skip
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise Invalid("invalid observation id")
    return int(value)


def _text(body: dict, name: str) -> str:
    value = body.get(name)
    return value if isinstance(value, str) else ""


class AgentOpsApi:
    def __init__(self, service: Service) -> None:
        self.service = service

    def memory(self, principal) -> Memory:
        return self.service.memory_for(principal)

    async def _body(self, request: Request, required: bool = True) -> dict:
        limit = min(MAX_BODY, self.service.settings.max_body_bytes)
        return await read_json(request, limit, required)

    def _read(self, memory: Memory, fn: Callable[[MemoryState], object]):
        return memory.read(fn)

    # -- sessions

    @operation(
        "createAgentOpsSession",
        "AgentOps: create a session in a project (an existing id answers as it is)",
        body=m.AgentOpsNewSession,
        replies=m.replies({201: m.AgentOpsSession}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def create_session(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        body = await self._body(request)
        errors = agentops.session_errors(body)
        if errors:
            raise Invalid(agentops.validation_message(errors))
        session_id, project = body["id"], agentops.project_of(body["project"])
        specs.check_not_reserved(session_id)
        memory = self.memory(p)
        with self.service.write():
            await memory.run_async(
                specs.GET_OR_CREATE_SESSION, p.tenant, session_id,
                (memory.config, {agentops.PROJECT_KEY: project}),
            )  # fmt: skip
        found = self._read(
            memory, lambda s: agentops.session_json(s.sessions[(p.tenant, session_id)])
        )
        return json_response(found, 201)

    @operation(
        "endAgentOpsSession",
        "AgentOps: end a session, its transcript recorded first; answers its summary",
        body=m.AgentOpsEndSession,
        body_required=False,
        path={"id": (Identifier, "the session id")},
        replies=m.replies({200: m.AgentOpsSessionEnded}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def end_session(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        body = await self._body(request, required=False)
        messages = body.get("messages")
        # Not a list: 400, as the Go decoder refuses it (0 or "" was taken as no transcript)
        if messages is not None and not isinstance(messages, list):
            raise Invalid("messages must be a list of {role, content} objects")
        memory = self.memory(p)
        session = memory.session(request.path_params["id"], tenant=p.tenant, create=False)
        args = (specs.transcript_items(messages) if messages else None, None, None)
        with self.service.write():
            await memory.run_async(specs.END_SESSION, p.tenant, session.id, args)

        def answer(state: MemoryState) -> dict:
            ended = state.sessions[(p.tenant, session.id)]
            return {"session_id": session.id, "summary": agentops.end_summary(ended),
                    "message_count": ended.messages}  # fmt: skip

        return json_response(self._read(memory, answer))

    @operation(
        "listRecentAgentOpsSessions",
        "AgentOps: the sessions, newest started first (their summaries' quotes traced as read)",
        query=m.AgentOpsRecentSessionsQuery,
        replies=m.replies({200: list[m.AgentOpsSession]}, appends=True),
        tags=TAGS,
    )
    async def recent_sessions(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        project = agentops.project_of(request.query_params.get("project", ""))
        limit = _limit(request, "limit", 5) or 5

        def select(state: MemoryState) -> list:
            return agentops.agentops_sessions(state, p.tenant, project)[:limit]

        with self.service.write():  # summaries quote messages: their reads are traced
            found = await reads.read_sessions(
                self.memory(p), p.tenant, select, agentops.session_json, "agentops.sessions"
            )
        return json_response(found)

    # -- observations

    @operation(
        "addAgentOpsObservation",
        "AgentOps: save an observation (created, updated by topic key, or deduplicated)",
        body=m.AgentOpsNewObservation,
        replies=m.replies({201: m.AgentOpsObservationCreated}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def add_observation(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        body = await self._body(request)
        errors = agentops.observation_errors(body)
        if errors:
            raise Invalid(agentops.validation_message(errors))
        project = agentops.project_of(body["project"])
        scope = body.get("scope") or agentops.DEFAULT_SCOPE
        wrong = agentops.holder_error(project, scope)
        if wrong:
            raise Invalid(wrong)
        memory = self.memory(p)
        memory.require_session(p.tenant, body["session_id"])  # 404: the service's foreign key
        with self.service.write():
            holder = await reads.ensure_holder(memory, p.tenant, project, scope)
            outcome = await memory.observe_async(
                body["type"], body["title"], body["content"], tenant=p.tenant, session=holder,
                tags=body.get("tags") or (), topic_key=body.get("topic_key") or None,
                source={"session_id": body["session_id"]},
            )  # fmt: skip
        return json_response(
            agentops.created_json(outcome.id, outcome.tier, outcome.revision, outcome.duplicates),
            201,
        )

    async def _one(self, request: Request, purpose: str) -> dict:
        p = self.service.principal(request, "read")
        wanted = _id(request)

        def select(state: MemoryState) -> list:
            found = agentops.find(state, p.tenant, wanted)
            return [found] if found is not None else []

        with self.service.write():
            found = await reads.read_observations(self.memory(p), p.tenant, select, purpose)
        if not found:
            raise ApiError(404, "not_found", "observation not found")
        sid, view = found[0]
        return agentops.observation_json(sid, view, view.content)

    @operation(
        "getAgentOpsObservation",
        "AgentOps: one observation (traced as read)",
        path=OBSERVATION_ID,
        replies=m.replies({200: m.AgentOpsObservation}, appends=True),
        tags=TAGS,
    )
    async def get_observation(self, request: Request) -> Response:
        return json_response(await self._one(request, "agentops.get"))

    @operation(
        "updateAgentOpsObservation",
        "AgentOps: change an observation's type, title, content or tags; answers it",
        body=m.AgentOpsObservationChanges,
        path=OBSERVATION_ID,
        replies=m.replies({200: m.AgentOpsObservation}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def update_observation(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        wanted = _id(request)
        body = await self._body(request)
        changes = _patch(body)
        memory = self.memory(p)
        for _ in range(PATCH_RETRIES):
            found = self._read(memory, lambda s: _located(s, p.tenant, wanted))
            if found is None:
                raise ApiError(404, "not_found", "observation not found")
            sid, version, metadata = found
            update = dict(changes)
            if "title" in update:
                update["metadata"] = {**metadata, "title": update.pop("title")}
            args = (SECTION, str(wanted), update)
            try:
                with self.service.write():
                    await memory.run_async(specs.UPDATE_ITEM, p.tenant, sid, args, None, version)
                break
            except VersionConflict:  # another write to the holder came first: read it again
                continue
        else:
            raise ApiError(409, "conflict", "the observation kept changing; retry")
        return json_response(await self._one(request, "agentops.update"))

    @operation(
        "deleteAgentOpsObservation",
        "AgentOps: remove an observation (?hard=true: erase it from the files too)",
        query=m.AgentOpsDeleteQuery,
        path=OBSERVATION_ID,
        replies=m.replies({204: Reply(None, "removed")}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def delete_observation(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        wanted = _id(request)
        hard = request.query_params.get("hard") == "true"
        memory = self.memory(p)
        found = self._read(memory, lambda s: agentops.find(s, p.tenant, wanted))
        if found is None:
            raise ApiError(404, "not_found", "observation not found")
        sid = found[0]
        with self.service.write():
            if hard:  # erased: removed, and every payload holding it redacted
                reason = "AgentOps hard delete"
                await memory.run_async(specs.ERASE_ITEMS, p.tenant, sid, ([str(wanted)], reason))
            else:
                args = (SECTION, [str(wanted)])
                await memory.run_async(specs.REMOVE_ITEMS, p.tenant, sid, args)
        return Response(status_code=204)

    @operation(
        "listRecentAgentOpsObservations",
        "AgentOps: the observations, newest first (traced as read)",
        query=m.AgentOpsRecentObservationsQuery,
        replies=m.replies({200: list[m.AgentOpsObservation]}, appends=True),
        tags=TAGS,
    )
    async def recent_observations(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        params = request.query_params
        project = agentops.project_of(params.get("project", ""))
        kind, scope = params.get("type", ""), params.get("scope", "")
        limit = _limit(request, "limit", 20) or 20

        def select(state: MemoryState) -> list:
            sessions = agentops.holders(state, p.tenant, project, scope)
            found = agentops.observations_of(state, p.tenant, sessions)
            found = [pair for pair in found if not kind or pair[1].kind == kind]
            return found[::-1][:limit]  # newest first

        with self.service.write():
            found = await reads.read_observations(
                self.memory(p), p.tenant, select, "agentops.recent"
            )
        return json_response([agentops.observation_json(s, v, v.content) for s, v in found])

    # -- search and context

    @operation(
        "searchAgentOpsObservations",
        "AgentOps: search the observations (topic keys, then BM25; hits traced as read)",
        query=m.AgentOpsSearchQuery,
        replies=m.replies({200: list[m.AgentOpsSearchResult]}, appends=True),
        tags=TAGS,
    )
    async def search(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        params = request.query_params
        query = params.get("q", "")
        project = agentops.project_of(params.get("project", ""))
        kind, scope = params.get("type", ""), params.get("scope", "")
        limit = _limit(request, "limit", 10) or 10
        if not query.strip():
            return json_response([])
        memory = self.memory(p)
        sessions = self._read(memory, lambda s: agentops.holders(s, p.tenant, project, scope))
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
            results = [_result(sid, view, -1000.0) for sid, view in found]
        if sessions and len(results) < limit:
            top_k = min(agentops.MAX_LIMIT, limit * (4 if kind else 1) + len(results))
            with self.service.write():  # hits are reads: they append
                hits = await memory.search_async(
                    query, tenant=p.tenant, sessions=sessions, sections=[SECTION], top_k=top_k
                )
            seen = {r["id"] for r in results}
            for hit in hits:
                if kind and hit.item.kind != kind or int(hit.item.id) in seen:
                    continue
                results.append(_result(hit.session, hit.item, -hit.score))
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
        params = request.query_params
        project = agentops.project_of(params.get("project", ""))
        scope, query = params.get("scope", ""), params.get("query", "")
        limit = _limit(request, "limit", 5) or 5
        memory = self.memory(p)
        sessions = self._read(memory, lambda s: agentops.holders(s, p.tenant, project, scope))
        hits = await asyncio.to_thread(reads.rank, memory, p.tenant, sessions, query, limit)

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
             "content": agentops.truncate(_str(v.content), agentops.CONTEXT_CHARS)}
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
        given = request.query_params.get("observation_id", "")
        anchor = int(given) if given.isascii() and given.isdigit() and len(given) <= 18 else 0
        if anchor == 0:
            raise Invalid("observation_id required")
        before = _limit(request, "before", 3) or 3
        after = _limit(request, "after", 3) or 3

        def select(state: MemoryState) -> list:
            found = agentops.find(state, p.tenant, anchor)
            if found is None:
                return []
            project = agentops.parse_holder(found[0])[0]  # type: ignore[index]
            every = agentops.observations_of(
                state, p.tenant, agentops.holders(state, p.tenant, project)
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
                    "content": _str(v.content),
                    "created_at": agentops.rfc3339(v.ts),
                }
                for _, v in found
            ]  # fmt: skip
        )

    # -- stats, export, import, health

    @operation(
        "getAgentOpsStats",
        "AgentOps: counts of sessions and observations, and the projects",
        query=m.AgentOpsProjectQuery,
        replies=m.replies({200: m.AgentOpsStats}),
        tags=TAGS,
    )
    async def stats(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        project = agentops.project_of(request.query_params.get("project", ""))

        def count(state: MemoryState) -> dict:
            every = agentops.agentops_sessions(state, p.tenant)
            mine = [s for s in every if not project or s.metadata[agentops.PROJECT_KEY] == project]
            held = agentops.holders(state, p.tenant, project)
            return {
                "total_sessions": len(mine),
                "total_observations": len(agentops.observations_of(state, p.tenant, held)),
                "projects": sorted({s.metadata[agentops.PROJECT_KEY] for s in every}),
            }

        return json_response(self._read(self.memory(p), count))

    @operation(
        "exportAgentOps",
        "AgentOps: every session and observation (of a project), traced as read",
        query=m.AgentOpsProjectQuery,
        replies=m.replies({200: m.AgentOpsExport}, appends=True),
        tags=TAGS,
    )
    async def export(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        project = agentops.project_of(request.query_params.get("project", ""))
        memory = self.memory(p)

        def sessions(state: MemoryState) -> list:
            return agentops.agentops_sessions(state, p.tenant, project)[::-1]  # oldest first

        def observations(state: MemoryState) -> list:
            held = agentops.holders(state, p.tenant, project)
            return agentops.observations_of(state, p.tenant, held)

        with self.service.write():
            found_sessions = await reads.read_sessions(
                memory, p.tenant, sessions, agentops.session_json, "agentops.export"
            )
            found = await reads.read_observations(memory, p.tenant, observations, "agentops.export")
        return json_response(
            {
                "exported_at": agentops.rfc3339(time.time_ns() // 1000),
                "sessions": found_sessions,
                "observations": [agentops.observation_json(s, v, v.content) for s, v in found],
            }
        )

    @operation(
        "importAgentOps",
        "AgentOps: import sessions and observations as /export gives them",
        body=m.AgentOpsImport,
        replies=m.replies({200: m.AgentOpsImported}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def import_(self, request: Request) -> Response:
        """Sessions are created (their project kept; an end or summary is not replayed), and
        observations written through our three tiers. Like the service, entries it cannot take
        are skipped and left out of the counts."""
        p = self.service.principal(request, "write")
        body = await self._body(request)
        memory = self.memory(p)
        imported = {"imported_sessions": 0, "imported_observations": 0}
        with self.service.write():
            for entry in _objects(body, "sessions"):
                if agentops.session_errors(entry):
                    continue
                try:
                    specs.check_not_reserved(entry["id"])
                    metadata = {agentops.PROJECT_KEY: agentops.project_of(entry["project"])}
                    await memory.run_async(
                        specs.GET_OR_CREATE_SESSION, p.tenant, entry["id"], (memory.config, metadata)
                    )  # fmt: skip
                except LedgerError:
                    continue
                imported["imported_sessions"] += 1
            for entry in _objects(body, "observations"):
                if agentops.observation_errors(entry):
                    continue
                project = agentops.project_of(entry["project"])
                scope = entry.get("scope") or agentops.DEFAULT_SCOPE
                if agentops.holder_error(project, scope):
                    continue
                try:
                    memory.require_session(p.tenant, entry["session_id"])
                    holder = await reads.ensure_holder(memory, p.tenant, project, scope)
                    await memory.observe_async(
                        entry["type"], entry["title"], entry["content"], tenant=p.tenant,
                        session=holder, tags=entry.get("tags") or (),
                        topic_key=entry.get("topic_key") or None,
                        source={"session_id": entry["session_id"]},
                    )  # fmt: skip
                except LedgerError:
                    continue
                imported["imported_observations"] += 1
        return json_response(imported)

    @operation(
        "checkAgentOpsHealth",
        "AgentOps: liveness (no token needed)",
        replies=m.replies({200: m.AgentOpsHealth}),
        tags=TAGS,
    )
    async def health(self, _request: Request) -> Response:
        return json_response({"status": "ok"})


def _located(state: MemoryState, tenant: str, wanted: int) -> tuple[str, int, dict] | None:
    found = agentops.find(state, tenant, wanted)
    if found is None:
        return None
    sid, item = found
    return sid, state.sessions[(tenant, sid)].version, dict(item.metadata)


def _patch(body: dict) -> dict:
    """A PATCH body as our item changes (`title` resolved by the caller into metadata)."""
    unknown = set(body) - {"type", "title", "content", "tags"}
    if unknown:
        raise Invalid(f"unknown fields {sorted(unknown)}: give type, title, content or tags")
    changes: dict = {}
    if body.get("type") is not None:
        if body["type"] not in TYPES:
            raise Invalid(f"type {body['type']!r} is not one of {', '.join(TYPES)}")
        changes["kind"] = body["type"]
    if body.get("title") is not None:
        try:
            Observation.of("decision", body["title"], "x")
        except InvalidInput as exc:
            raise Invalid(str(exc)) from None
        changes["title"] = body["title"]
    if body.get("content") is not None:
        if not isinstance(body["content"], str) or not body["content"].strip():
            raise Invalid("content must be a non-empty string")
        if len(body["content"]) > agentops.MAX_CONTENT:  # POST's limits hold for a change too
            raise Invalid(f"content exceeds {agentops.MAX_CONTENT} chars")
        changes["content"] = body["content"]
    if body.get("tags") is not None:
        tags = body["tags"]
        if not isinstance(tags, list) or not all(type(t) is str for t in tags):
            raise Invalid("tags must be a list of strings")
        if len(tags) > agentops.MAX_TAGS:
            raise Invalid(f"tags exceed {agentops.MAX_TAGS} items")
        if any(len(t) > agentops.MAX_TAG for t in tags):
            raise Invalid(f"tag exceeds {agentops.MAX_TAG} chars")
        changes["tags"] = tags
    if not changes:
        raise Invalid("nothing to update: give type, title, content or tags")
    return changes


def _objects(body: dict, name: str) -> list[dict]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list):  # 0 or "" too, as 1 was (they were taken as none)
        raise Invalid(f"{name} must be a list")
    return [entry for entry in value if isinstance(entry, dict)]


def _str(content: object) -> str:
    return content if isinstance(content, str) else ""


def _result(session: str, view, rank: float) -> dict:
    out = {
        "id": int(view.id),
        "type": view.kind,
        "title": view.metadata.get("title", ""),
        "content": _str(view.content),
        "rank": rank,
    }
    if view.metadata.get("topic_key"):
        out["topic_key"] = view.metadata["topic_key"]
    return out


def routes(service: Service) -> list[RawRoute]:
    """The leader routes (store mode forwards them to the partition's leader)."""
    api = AgentOpsApi(service)
    table: list[tuple[str, dict[str, Handler]]] = [
        ("/sessions", {"POST": api.create_session}),
        ("/sessions/recent", {"GET": api.recent_sessions}),
        ("/sessions/{id}/end", {"POST": api.end_session}),
        ("/observations", {"POST": api.add_observation}),
        # Before /observations/{id}, which takes the other methods on /observations/recent
        # (a 400: not an id)
        ("/observations/recent", {"GET": api.recent_observations}),
        (
            "/observations/{id}",
            {
                "GET": api.get_observation,
                "PATCH": api.update_observation,
                "DELETE": api.delete_observation,
            },
        ),  # fmt: skip
        ("/search", {"GET": api.search}),
        ("/context", {"GET": api.context}),
        ("/timeline", {"GET": api.timeline}),
        ("/stats", {"GET": api.stats}),
        ("/export", {"GET": api.export}),
        ("/import", {"POST": api.import_}),
    ]
    return [RawRoute(p, {m: _wrap(h) for m, h in endpoints.items()}) for p, endpoints in table]


def health_routes(service: Service) -> list[RawRoute]:
    """`GET /health`: liveness in the service's shape, no token needed (as /healthz)."""
    return [RawRoute("/health", {"GET": _wrap(AgentOpsApi(service).health)})]


__all__ = ["NotFound", "health_routes", "routes"]
