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

from starlette.requests import Request
from starlette.responses import Response

from sections.adapters.kaos import LocalMemory

from .api import Api, Handler, _int_param
from .errors import ApiError
from .responses import json_response
from .routing import RawRoute, routes_of
from .service import Service

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000  # KAOS caps `limit` here too
PARAMETERS = frozenset(("limit", "session_id", "token"))


class KaosApi(Api):
    def _local(self, request: Request) -> tuple[str, LocalMemory]:
        p = self.service.principal(request, "read")
        unknown = set(request.query_params) - PARAMETERS
        if unknown:
            raise ApiError(400, "invalid_input", f"unknown query parameters {sorted(unknown)}")
        return p.tenant, LocalMemory(memory=self.memory(p), tenant=p.tenant, reader="operator")

    async def events(self, request: Request) -> Response:
        tenant, local = self._local(request)
        limit = _int_param(request, "limit", DEFAULT_LIMIT)
        if limit < 0:
            raise ApiError(400, "invalid_input", "limit must not be negative")
        session_id = request.query_params.get("session_id") or None
        with self.service.write():  # reads append their traces
            events = await local.recent_events(min(limit, MAX_LIMIT), session_id)
        found = [e.to_dict() for e in events]
        return json_response({"agent": tenant, "events": found, "total": len(found)})

    async def sessions(self, request: Request) -> Response:
        tenant, local = self._local(request)
        sessions = await local.list_sessions()
        return json_response({"agent": tenant, "sessions": sessions, "total": len(sessions)})


def routes(service: Service) -> list[RawRoute]:
    api = KaosApi(service)
    table: list[tuple[str, dict[str, Handler]]] = [
        ("/memory/events", {"GET": api.events}),
        ("/memory/sessions", {"GET": api.sessions}),
    ]
    return routes_of(table)
