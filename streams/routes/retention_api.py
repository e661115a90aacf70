"""Retention over HTTP (sections/model/retention.py, docs/service.md "Retention").

    POST /v1/cleanup    {max_age_seconds}: remove the tenant's sessions idle longer than that

The tenant is the token's, as everywhere (streams/web/auth.py); the call needs the `admin` scope,
as erasure does: it removes many sessions at once, and erases them from the files when the
memory is configured to (`[retention] erase`). The answer names what went:
`{"removed": [session ids], "reason": "max_age", "erased": bool}`.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from sections.model.retention import MAX_AGE_SECONDS
from streams.apidoc import operation
from streams.apidoc.models import Open, Strict
from streams.routes.resource import Api, Handler
from streams.server.service import Service
from streams.web.responses import json_response
from streams.web.routing import RawRoute, routes_of


class CleanupRequest(Strict):
    what: ClassVar[str] = "the cleanup"
    max_age_seconds: Annotated[float, Field(ge=0, le=MAX_AGE_SECONDS)] = Field(
        description="remove the sessions idle longer than this many seconds (0: every session)"
    )


class CleanupReply(Open):
    removed: list[str] = Field(description="the session ids removed, least recently active first")
    reason: str = Field(description='always "max_age"')
    erased: bool = Field(description="whether their content was erased from the files too")


class RetentionApi(Api):
    @operation(
        "cleanupSessions",
        "admin: remove the tenant's sessions idle longer than max_age_seconds",
        body=CleanupRequest,
        replies={200: CleanupReply},
        writes=True,
        tags=("retention",),
    )
    async def cleanup(self, request: Request) -> Response:
        p = self.service.principal(request, "admin")
        body = await self._parsed(request, CleanupRequest)
        memory = self.memory(p)
        with self.service.write():
            removed = await memory.cleanup_async(body.max_age_seconds, tenant=p.tenant)
        erased = memory.config.retention_erase
        return json_response({"removed": removed, "reason": "max_age", "erased": erased})


def routes(service: Service) -> list[RawRoute]:
    api = RetentionApi(service)
    table: list[tuple[str, dict[str, Handler]]] = [("/v1/cleanup", {"POST": api.cleanup})]
    return routes_of(table)
