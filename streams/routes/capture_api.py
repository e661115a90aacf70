"""`POST /v1/sessions/{session}/tool-calls`: a runtime reports a tool call and its result, and
the memory's capture rules apply (sections/runtime/capture.py, docs/agentops.md).

    {"tool": "bash", "args": {"command": "..."}, "output": "...", "call_id": "..."?}
    -> {"injected": {rule, query, seq, found: [{session, id}]} | null,
        "saved": {rule, id, session, tier, revision, duplicates} | null}
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from sections.runtime import capture
from streams.apidoc import operation
from streams.apidoc.models import Count, Json, JsonValueObject, Open, Strict
from streams.routes.resource import Api
from streams.server.service import Service
from streams.web.responses import json_response
from streams.web.routing import RawRoute, routes_of

NonEmpty = Annotated[str, Field(min_length=1)]


class ToolCallReport(Strict):
    what: ClassVar[str] = "the tool call"
    tool: NonEmpty = Field(description="the tool's name")
    args: JsonValueObject | None = Field(None, description="the tool's arguments")
    output: Json = Field(None, description="what the tool answered: any JSON")
    call_id: NonEmpty | None = Field(None, description="the runtime's id of the call")


class CapturedItem(Open):
    session: str
    id: str


class CaptureInjected(Open):
    """The inject rule's search, traced as one items.read (nothing is injected)."""

    rule: str
    query: str
    seq: Count = Field(description="the items.read record")
    found: list[CapturedItem]


class CaptureSaved(Open):
    """The save rule's observation."""

    rule: str
    id: str
    session: str
    tier: Literal["inserted", "revised", "duplicate"]
    revision: Count
    duplicates: Count


class ToolCallCaptured(Open):
    injected: CaptureInjected | None = Field(description="null: no inject rule for this tool")
    saved: CaptureSaved | None = Field(description="null: no save rule matched")


class CaptureApi(Api):
    @operation(
        "reportToolCall",
        "report a tool call and its result: the capture rules trace an inject search and save a "
        "matching result as an observation",
        body=ToolCallReport,
        replies={200: ToolCallCaptured},
        writes=True,
        tags=("capture",),
    )
    async def tool_call(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "write"), request)
        body = await self._parsed(request, ToolCallReport)
        with self.service.write():
            answer = await capture.report_async(
                session.memory, session.tenant, session.id, body.tool, body.args, body.output,
                body.call_id,
            )  # fmt: skip
        return json_response(answer)


def routes(service: Service) -> list[RawRoute]:
    api = CaptureApi(service)
    return routes_of([("/v1/sessions/{session}/tool-calls", {"POST": api.tool_call})])
