"""AgentOps' memory as a whole (docs/agentops.md): the counts and projects, an export of every
session and observation, an import of one, and liveness."""

from __future__ import annotations

import time

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from eventstore.errors import LedgerError
from sections.adapters import agentops
from sections.adapters import agentops_specs as reads
from sections.model.state import MemoryState
from sections.specs import command_specs as specs
from streams.apidoc import operation
from streams.seeds import agentops_models as m
from streams.seeds.agentops_resource import TAGS, AgentOpsResource, observation_answers
from streams.web.responses import json_response


def _entries(values: list | None, model: type[BaseModel]) -> list:
    """The entries of an import list that `model` takes; the others are skipped, as the
    service skips them."""
    taken = []
    for value in values or ():
        try:
            taken.append(model.model_validate(value))
        except ValidationError:
            continue
    return taken


class AgentOpsData(AgentOpsResource):
    @operation(
        "getAgentOpsStats",
        "AgentOps: counts of sessions and observations, and the projects",
        query=m.AgentOpsProjectQuery,
        replies=m.replies({200: m.AgentOpsStats}),
        tags=TAGS,
    )
    async def stats(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        project = agentops.project_of(self._query(request, m.AgentOpsProjectQuery).project)

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
        project = agentops.project_of(self._query(request, m.AgentOpsProjectQuery).project)
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
                "observations": observation_answers(memory, p.tenant, found),
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
        body = await self._parsed(request, m.AgentOpsImport)
        memory = self.memory(p)
        imported = {"imported_sessions": 0, "imported_observations": 0}
        with self.service.write():
            for session in _entries(body.sessions, m.AgentOpsNewSession):
                try:
                    specs.check_not_reserved(session.id)
                    metadata = {agentops.PROJECT_KEY: agentops.project_of(session.project)}
                    await memory.run_async(
                        specs.GET_OR_CREATE_SESSION, p.tenant, session.id,
                        (memory.config, metadata),
                    )  # fmt: skip
                except LedgerError:
                    continue
                imported["imported_sessions"] += 1
            for entry in _entries(body.observations, m.AgentOpsNewObservation):
                project = agentops.project_of(entry.project)
                scope = entry.scope or agentops.DEFAULT_SCOPE
                try:
                    memory.require_session(p.tenant, entry.session_id)
                    holder = await reads.ensure_holder(memory, p.tenant, project, scope)
                    await memory.observe_async(
                        entry.type, entry.title, entry.content, tenant=p.tenant,
                        session=holder, tags=entry.tags or (),
                        topic_key=entry.topic_key or None,
                        source={"session_id": entry.session_id}, strict_duplicates=True,
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
