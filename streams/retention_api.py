"""Retention over HTTP (sections/retention.py, docs/service.md "Retention").

    POST /v1/cleanup    {max_age_seconds}: remove the tenant's sessions idle longer than that

The tenant is the token's, as everywhere (streams/auth.py); the call needs the `admin` scope,
as erasure does: it removes many sessions at once, and erases them from the files when the
memory is configured to (`[retention] erase`). The answer names what went:
`{"removed": [session ids], "reason": "max_age", "erased": bool}`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .api import Api, Handler, _only
from .errors import ApiError
from .responses import json_response
from .routing import RawRoute, routes_of
from .service import Service

CLEANUP_FIELDS = frozenset(("max_age_seconds",))


class RetentionApi(Api):
    async def cleanup(self, request: Request) -> Response:
        p = self.service.principal(request, "admin")
        body = _only(await self._body(request), CLEANUP_FIELDS, "the cleanup's max_age_seconds")
        if "max_age_seconds" not in body:
            raise ApiError(400, "invalid_input", "give max_age_seconds")
        memory = self.memory(p)
        with self.service.write():
            removed = await memory.cleanup_async(body["max_age_seconds"], tenant=p.tenant)
        erased = memory.config.retention_erase
        return json_response({"removed": removed, "reason": "max_age", "erased": erased})


def routes(service: Service) -> list[RawRoute]:
    api = RetentionApi(service)
    table: list[tuple[str, dict[str, Handler]]] = [("/v1/cleanup", {"POST": api.cleanup})]
    return routes_of(table)
