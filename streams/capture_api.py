"""`POST /v1/sessions/{session}/tool-calls`: a runtime reports a tool call and its result, and
the memory's capture rules apply (sections/capture.py, docs/agentops.md).

    {"tool": "bash", "args": {"command": "..."}, "output": "...", "call_id": "..."?}
    -> {"injected": {rule, query, seq, found: [{session, id}]} | null,
        "saved": {rule, id, session, tier, revision, duplicates} | null}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sections import capture

from .api import Api, _only
from .responses import json_response
from .routing import RawRoute, routes_of
from .service import Service

FIELDS = frozenset(("tool", "args", "output", "call_id"))


class CaptureApi(Api):
    async def tool_call(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "write"), request)
        body = _only(await self._body(request), FIELDS, "the tool call")
        with self.service.write():
            answer = await capture.report_async(
                session.memory, session.tenant, session.id, body.get("tool"), body.get("args"),
                body.get("output"), body.get("call_id"),
            )  # fmt: skip
        return json_response(answer)


def routes(service: Service) -> list[RawRoute]:
    api = CaptureApi(service)
    return routes_of([("/v1/sessions/{session}/tool-calls", {"POST": api.tool_call})])
