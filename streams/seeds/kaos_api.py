"""KAOS's memory endpoints (sections/adapters/kaos.py, docs/adapters/kaos.md).

    GET /memory/events?limit=&session_id=   the newest events (default 100, at most 1000), of
                                            one session or of all the tenant's, oldest first
    GET /memory/sessions                    the tenant's session ids, in creation order

The answers have KAOS's shape: `{"agent", "events", "total"}` and `{"agent", "sessions",
"total"}`, `agent` being the caller's tenant. Reads are the operator's (debugging, dashboards):
each session read leaves its `items.read` record and counts for no eviction policy. Tenancy and
scopes are the REST API's: a token's tenant, the `read` scope.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from sections.adapters import foreign_ids
from sections.adapters.kaos import LocalMemory, event_json
from sections.errors import SessionNotFound
from streams.apidoc import operation
from streams.apidoc.models import (
    WHOLE,
    Absent,
    Count,
    Identifier,
    JsonObject,
    Open,
    Strict,
    absent,
    refused_as,
)
from streams.routes.resource import Api, Handler
from streams.server.service import Service
from streams.web.responses import json_response
from streams.web.routing import RawRoute, routes_of

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000  # KAOS caps `limit` here too


class KaosEventsQuery(Strict):
    """Also what /memory/sessions takes: no other parameter (and `token`) on either route."""

    # Any count of 18 digits at most (streams/apidoc/models.py `WHOLE`); more than MAX_LIMIT is
    # MAX_LIMIT, as in KAOS.
    limit: Annotated[int, Field(ge=0, le=10**18 - 1), WHOLE] = Field(
        DEFAULT_LIMIT, description=f"how many of the newest events; at most {MAX_LIMIT} are given"
    )
    session_id: Annotated[
        Identifier | Literal[""] | Absent, refused_as("must be a session id, or empty")
    ] = absent("one session's; all the tenant's if absent or empty")


class KaosEvent(Open):
    """A KAOS `MemoryEvent` (sections/adapters/kaos.py)."""

    event_id: str = Field(description="the item's id")
    timestamp: str = Field(description="when it was written, ISO-8601")
    event_type: str
    content: Any
    metadata: JsonObject


class KaosEvents(Open):
    agent: str = Field(description="the caller's tenant")
    events: list[KaosEvent] = Field(description="oldest first")
    total: Count


class KaosSessions(Open):
    agent: str = Field(description="the caller's tenant")
    sessions: list[str] = Field(description="session ids, in creation order")
    total: Count


class KaosApi(Api):
    def _local(self, request: Request) -> tuple[str, LocalMemory, KaosEventsQuery]:
        p = self.service.principal(request, "read")
        query = self._query(request, KaosEventsQuery)
        local = LocalMemory(memory=self.memory(p), tenant=p.tenant, reader="operator")
        return p.tenant, local, query

    @operation(
        "kaosRecentEvents",
        "KAOS: the newest events, oldest first (each session read leaves its items.read record)",
        query=KaosEventsQuery,
        replies={200: KaosEvents},
        tags=("KAOS",),
    )
    async def events(self, request: Request) -> Response:
        tenant, local, query = self._local(request)
        session_id = _seed_id(local, query.session_id) if query.session_id else None
        with self.service.write():  # reads append their traces
            events = await local.recent_events(min(query.limit, MAX_LIMIT), session_id)
        found = [event_json(e) for e in events]  # content in its typed JSON form
        return json_response({"agent": tenant, "events": found, "total": len(found)})

    @operation(
        "kaosListSessions",
        "KAOS: the tenant's session ids",
        replies={200: KaosSessions},
        tags=("KAOS",),
    )
    async def sessions(self, request: Request) -> Response:
        tenant, local, _ = self._local(request)
        sessions = await local.list_sessions()
        return json_response({"agent": tenant, "sessions": sessions, "total": len(sessions)})


def _seed_id(local: LocalMemory, log_id: str) -> str:
    """KAOS's id of the session a log id names (the route takes log ids): `foreign_ids.decode`,
    with the session's metadata for a hashed one."""
    try:
        metadata = local.memory.session_info(local.tenant, log_id)["metadata"]
    except SessionNotFound:
        metadata = None
    seed_id = foreign_ids.decode(log_id, metadata)
    return log_id if seed_id is None else seed_id


def routes(service: Service) -> list[RawRoute]:
    api = KaosApi(service)
    table: list[tuple[str, dict[str, Handler]]] = [
        ("/memory/events", {"GET": api.events}),
        ("/memory/sessions", {"GET": api.sessions}),
    ]
    return routes_of(table)
