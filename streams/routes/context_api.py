"""A session's context under /v1: assemble it within a token budget, or compact a section until
it fits a payload (streams/routes/api.py has the route table)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sections.retrieval.views import Extra
from sections.specs import command_specs as specs
from streams.apidoc import Reply, operation
from streams.apidoc.operation import ETAG
from streams.routes import session_models as sm
from streams.routes.resource import Api
from streams.web.responses import json_response, record_json


class ContextApi(Api):
    @operation(
        "assembleContext",
        "the context within a token budget, as messages; its context.assembled record is the "
        "manifest (the read's trace)",
        body=sm.SessionContextRequest,
        body_required=False,
        replies={200: sm.SessionContext},
        writes=True,
        tags=("sessions",),
    )
    async def context(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        body = await self._parsed(request, sm.SessionContextRequest, required=False)
        # Context injection (sections/retrieval/inject.py): observations for a query, facts,
        # recent sessions' summaries; and recall of the user's past (recall.py).
        extra = Extra.of(
            query=body.query, observations=body.observations, summaries=body.summaries,
            observation_chars=body.observation_chars, facts=body.facts, sessions=body.sessions,
            recall=body.recall,
        )  # fmt: skip
        with self.service.write():
            args = (body.budget, body.sections, body.reader, extra)
            record, messages = await self._run(session, specs.ASSEMBLE_CONTEXT, args)
        return json_response({"record": record_json(record), "messages": messages})

    @operation(
        "compactSession",
        "after a payload too large: compact a section until the context fits target_bytes",
        description=sm.COMPACT_REFUSALS,
        headers=sm.WRITE_HEADERS,
        body=sm.SessionCompactRequest,
        replies={200: Reply(sm.SessionCompacted, headers=(ETAG,))},
        writes=True,
        tags=("sessions",),
    )
    async def compact(self, request: Request) -> Response:
        """POST .../compact {target_bytes, section?, budget?, sections?}: after a "payload too
        large", compact until the context fits (docs/compaction.md); the server's summarizer."""
        session = self._writer_session(request)
        body = await self._parsed(request, sm.SessionCompactRequest)
        section = body.section or "messages"
        args = (section, body.target_bytes, body.budget, body.sections, None)
        with self.service.write():
            outcome = await self._run(session, specs.COMPACT_FOR_PAYLOAD, args, request)
        return json_response({"compaction": outcome}, headers=self._etag(session))
