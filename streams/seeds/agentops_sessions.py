"""AgentOps' sessions (docs/agentops.md): create one in a project, end it after its transcript,
list the recent ones. An AgentOps session is our session of the same id, its project kept in
its metadata (sections/adapters/agentops.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sections.adapters import agentops
from sections.adapters import agentops_specs as reads
from sections.errors import SessionEnded
from sections.model.state import MemoryState
from sections.specs import command_specs as specs
from streams.apidoc import operation
from streams.apidoc.models import Identifier
from streams.seeds import agentops_models as m
from streams.seeds.agentops_resource import CREATES, TAGS, AgentOpsResource
from streams.web.errors import ApiError
from streams.web.responses import json_response


class AgentOpsSessions(AgentOpsResource):
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
        body = await self._parsed(request, m.AgentOpsNewSession, prefix=CREATES)
        session_id, project = body.id, agentops.project_of(body.project)
        specs.check_not_reserved(session_id)
        memory = self.memory(p)
        with self.service.write():
            await memory.run_async(
                specs.GET_OR_CREATE_SESSION, p.tenant, session_id,
                (memory.config, {agentops.PROJECT_KEY: project}),
            )  # fmt: skip

        def answer(state: MemoryState) -> dict | None:
            found = state.sessions.get((p.tenant, session_id))
            return None if found is None else agentops.session_json(found)

        found = self._read(memory, answer)
        if found is None:
            # Another request deleted it between the write and this read (a delete or a
            # cleanup in the same group commit): its record stands, its answer is the conflict.
            raise ApiError(
                409, "conflict",
                f"session {session_id} was deleted by another request as it was created; "
                "create it again",
            )  # fmt: skip
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
        """The service ends any id with 200 (an UPDATE that may touch no row), and the runtime
        takes any other status as a failure: an unknown session is answered from the transcript
        alone and an ended one as it is, both appending nothing (docs/agentops.md)."""
        p = self.service.principal(request, "write")
        # Not a list: 400, as the Go decoder refuses it (0 or "" was taken as no transcript)
        body = await self._parsed(request, m.AgentOpsEndSession, required=False)
        memory = self.memory(p)
        session_id = request.path_params["id"]
        messages = [message.model_dump() for message in body.messages or ()]

        def answer(state: MemoryState) -> dict | None:
            found = state.sessions.get((p.tenant, session_id))
            if found is None:
                return None
            return {"session_id": session_id, "summary": agentops.end_summary(found),
                    "message_count": found.messages}  # fmt: skip

        def ended(state: MemoryState) -> bool | None:
            found = state.sessions.get((p.tenant, session_id))
            return None if found is None else found.ended_seq is not None

        state = self._read(memory, ended)
        if state is None:  # unknown: nothing to end, nothing recorded, as the service
            return json_response(agentops.transcript_answer(session_id, messages))
        if not state:
            args = (specs.transcript_items(messages) if messages else None, None, None)
            try:
                with self.service.write():
                    await memory.run_async(specs.END_SESSION, p.tenant, session_id, args)
            except SessionEnded:  # another end came first: answered as it is
                pass
        found = self._read(memory, answer)
        if found is None:  # removed meanwhile
            return json_response(agentops.transcript_answer(session_id, messages))
        return json_response(found)

    @operation(
        "listRecentAgentOpsSessions",
        "AgentOps: the sessions, newest started first (their summaries' quotes traced as read)",
        query=m.AgentOpsRecentSessionsQuery,
        replies=m.replies({200: list[m.AgentOpsSession]}, appends=True),
        tags=TAGS,
    )
    async def recent_sessions(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        query = self._query(request, m.AgentOpsRecentSessionsQuery)
        project = agentops.project_of(query.project)

        def select(state: MemoryState) -> list:
            return agentops.agentops_sessions(state, p.tenant, project)[: query.limit]

        with self.service.write():  # summaries quote messages: their reads are traced
            found = await reads.read_sessions(
                self.memory(p), p.tenant, select, agentops.session_json, "agentops.sessions"
            )
        return json_response(found)
