"""Search, observations and summaries over HTTP (sections/retrieval/search.py, observations.py, summaries.py).

    GET  /v1/search?q=...                      the tenant's memory
    GET  /v1/sessions/{session}/search?q=...   one session
    POST /v1/observations                      tenant-wide ({"user": id}: that user's), or
                                               {"session": id} for one session
    POST /v1/sessions/{session}/observations   from that session: for its user (metadata
                                               user_id), else tenant-wide; {"scope": "user" |
                                               "tenant" | "session"} chooses
    GET  /v1/summaries?limit=N                 the newest session summaries
    GET  /v1/sessions/{session}/summary        one session's

Search filters are query parameters: `session`, `section` and `tag` (each repeatable), `since`
and `until` (microseconds or ISO-8601; the item's time, since <= ts < until), `top_k`, `reader`;
`user` on the tenant's search leaves out other users' sessions and observations.
`scope=session|user|tenant` ranks as recall does over that session's scope (docs/recall.md;
/v1/search takes `scope=tenant`, within the `session`s named if any). Each hit carries its
item, score and snippet (and, with a scope, its `signals` and its session's `time`); hits are
reads and leave `items.read` records.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sections.retrieval.observations import Outcome
from sections.specs import command_specs as specs
from streams.apidoc import Reply, operation
from streams.routes.resource import Api, Handler
from streams.routes.search_models import (
    ObservationOutcome,
    ObservationRequest,
    SearchHits,
    SearchQuery,
    SessionObservationRequest,
    SessionSearchQuery,
    SessionSummaries,
    SessionSummary,
    SummariesQuery,
    SummaryQuery,
)
from streams.server.service import Service
from streams.web.errors import ApiError
from streams.web.responses import json_response
from streams.web.routing import RawRoute, routes_of

OBSERVED = {
    201: Reply(ObservationOutcome, "inserted: a new observation"),
    200: Reply(ObservationOutcome, "revised (same topic_key) or duplicate (recent same content)"),
}


class SearchApi(Api):
    @operation(
        "searchTenant",
        "BM25 search of the tenant's searchable sections; hits leave items.read records",
        query=SearchQuery,
        replies={200: SearchHits},
        tags=("search",),
    )
    async def search_tenant(self, request: Request) -> Response:
        return await self._search(request)

    @operation(
        "searchSession",
        "search one session's items and the tenant's observations",
        query=SessionSearchQuery,
        replies={200: SearchHits},
        tags=("search",),
    )
    async def search_session(self, request: Request) -> Response:
        return await self._search(request)

    async def _search(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        wanted = request.path_params.get("session")
        # Its parameters are its query model's fields: a misspelt filter (`?tags=`) must not
        # quietly widen the search.
        query = self._query(request, SessionSearchQuery if wanted else SearchQuery)
        sessions = [wanted] if wanted else getattr(query, "session", None) or None
        user = getattr(query, "user", None)
        if wanted:
            self._session(p, request)  # 404 for an unknown session
        times = {k: v for k, v in (("since", query.since), ("until", query.until)) if v is not None}
        scoped: dict = {}
        if query.scope is not None:  # ranked as recall ranks: a session's scope, or the tenant
            scoped = {"scope": query.scope, "session": wanted}
            sessions = None if wanted else sessions
        with self.service.write():  # hits are reads: they append
            hits = await self.memory(p).search_async(
                query.q, tenant=p.tenant, sessions=sessions,
                tenant_observations=bool(wanted) and not scoped,
                sections=query.section or None, tags=query.tag or None, top_k=query.top_k,
                reader=query.reader, user=user, **times, **scoped,
            )  # fmt: skip
        return json_response({"hits": [hit.to_json() for hit in hits]})

    @operation(
        "observeTenant",
        "record an observation, tenant-wide ({user}'s) or in {session}'s own section; deduplicated",
        body=ObservationRequest,
        replies=OBSERVED,
        writes=True,
        tags=("observations",),
    )
    async def observe_tenant(self, request: Request) -> Response:
        return await self._observe(request)

    @operation(
        "observeFromSession",
        "record an observation from this session: for its user, else tenant-wide; or {scope}",
        body=SessionObservationRequest,
        replies=OBSERVED,
        writes=True,
        tags=("observations",),
    )
    async def observe_from_session(self, request: Request) -> Response:
        return await self._observe(request)

    async def _observe(self, request: Request) -> Response:
        """POST /v1/observations is `Memory.observe` (tenant-wide, or in {"session"}'s own
        section, or {"user"}'s); POST /v1/sessions/{s}/observations is `Session.observe`: for the
        session's user, else tenant-wide, unless {"scope"} says (docs/search.md)."""
        p = self.service.principal(request, "write")
        from_session = request.path_params.get("session")
        memory = self.memory(p)
        if from_session:
            # on a session's route the path names the session: the body has no `session`
            mine = await self._parsed(request, SessionObservationRequest)
            session = memory.session(from_session, tenant=p.tenant, create=False)  # 404
            with self.service.write():
                outcome: Outcome = await session.observe_async(
                    mine.type, mine.title, mine.content, scope=mine.scope, tags=mine.tags,
                    topic_key=mine.topic_key,
                )  # fmt: skip
        else:
            body = await self._parsed(request, ObservationRequest)
            if body.session is not None:
                memory.session(body.session, tenant=p.tenant, create=False)  # 404 if unknown
            with self.service.write():
                outcome = await memory.observe_async(
                    body.type, body.title, body.content, tenant=p.tenant, session=body.session,
                    tags=body.tags, topic_key=body.topic_key, user=body.user,
                )  # fmt: skip
        status = 201 if outcome.tier == "inserted" else 200
        return json_response(
            {"id": outcome.id, "session": outcome.session, "tier": outcome.tier,
             "revision": outcome.revision, "duplicates": outcome.duplicates},
            status,
        )  # fmt: skip

    @operation(
        "listSummaries",
        "the newest session summaries of the tenant (their quotes' reads are traced)",
        query=SummariesQuery,
        replies={200: SessionSummaries},
        tags=("summaries",),
    )
    async def summaries(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        query = self._query(request, SummariesQuery)
        with self.service.write():  # summaries quote messages: their reads are traced
            found = await self.memory(p).run_async(
                specs.READ_SUMMARIES, p.tenant, None, (query.limit, query.reader)
            )
        return json_response({"summaries": found})

    @operation(
        "getSessionSummary",
        "the summary the memory appended when the session ended (404 before)",
        query=SummaryQuery,
        replies={200: SessionSummary},
        tags=("summaries",),
    )
    async def summary(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        reader = self._query(request, SummaryQuery).reader
        with self.service.write():
            found = await session.memory.run_async(
                specs.READ_SUMMARIES, session.tenant, session.id, (1, reader)
            )
        if not found:
            raise ApiError(404, "not_found", f"session {session.id!r} has not ended yet")
        return json_response(found[0])


def routes(service: Service) -> list[RawRoute]:
    api = SearchApi(service)
    s = "/v1/sessions/{session}"
    table: list[tuple[str, dict[str, Handler]]] = [
        ("/v1/search", {"GET": api.search_tenant}),
        (s + "/search", {"GET": api.search_session}),
        ("/v1/observations", {"POST": api.observe_tenant}),
        (s + "/observations", {"POST": api.observe_from_session}),
        ("/v1/summaries", {"GET": api.summaries}),
        (s + "/summary", {"GET": api.summary}),
    ]
    return routes_of(table)
