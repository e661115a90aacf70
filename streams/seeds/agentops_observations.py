"""AgentOps' observations (docs/agentops.md): save one (created, revised by topic key, or
deduplicated), read, change or remove one, list the recent ones. The observations of (project,
scope) are the `observations` section of one holder session (sections/adapters/agentops.py);
an observation's id is the seq of the record that added it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sections.adapters import agentops
from sections.adapters import agentops_specs as reads
from sections.errors import VersionConflict
from sections.model.state import MemoryState
from sections.retrieval.observations import SECTION
from sections.specs import command_specs as specs
from streams.apidoc import Reply, operation
from streams.seeds import agentops_models as m
from streams.seeds.agentops_resource import (
    CREATES,
    TAGS,
    AgentOpsResource,
    observation_answers,
    observation_id,
)
from streams.web.errors import ApiError
from streams.web.responses import json_response

PATCH_RETRIES = 8  # a PATCH is a compare-and-set on the holder's version
OBSERVATION_ID = {"id": (m.ObservationId, "the observation's id")}


def _located(state: MemoryState, tenant: str, wanted: int) -> tuple[str, int, dict] | None:
    found = agentops.find(state, tenant, wanted)
    if found is None:
        return None
    sid, item = found
    return sid, state.sessions[(tenant, sid)].version, dict(item.metadata)


class AgentOpsObservations(AgentOpsResource):
    @operation(
        "addAgentOpsObservation",
        "AgentOps: save an observation (created, updated by topic key, or deduplicated)",
        body=m.AgentOpsNewObservation,
        replies=m.replies({201: m.AgentOpsObservationCreated}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def add_observation(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        body = await self._parsed(request, m.AgentOpsNewObservation, prefix=CREATES)
        project = agentops.project_of(body.project)
        scope = body.scope or agentops.DEFAULT_SCOPE
        memory = self.memory(p)
        memory.require_session(p.tenant, body.session_id)  # 404: the service's foreign key
        with self.service.write():
            holder = await reads.ensure_holder(memory, p.tenant, project, scope)
            outcome = await memory.observe_async(
                body.type, body.title, body.content, tenant=p.tenant, session=holder,
                tags=body.tags or (), topic_key=body.topic_key or None,
                source={"session_id": body.session_id}, strict_duplicates=True,
            )  # fmt: skip
        return json_response(
            agentops.created_json(outcome.id, outcome.tier, outcome.revision, outcome.duplicates),
            201,
        )

    async def _one(self, request: Request, purpose: str) -> dict:
        p = self.service.principal(request, "read")
        wanted = observation_id(request)

        def select(state: MemoryState) -> list:
            found = agentops.find(state, p.tenant, wanted)
            return [found] if found is not None else []

        memory = self.memory(p)
        with self.service.write():
            found = await reads.read_observations(memory, p.tenant, select, purpose)
        if not found:
            raise ApiError(404, "not_found", "observation not found")
        return observation_answers(memory, p.tenant, found)[0]

    @operation(
        "getAgentOpsObservation",
        "AgentOps: one observation (traced as read)",
        path=OBSERVATION_ID,
        replies=m.replies({200: m.AgentOpsObservation}, appends=True),
        tags=TAGS,
    )
    async def get_observation(self, request: Request) -> Response:
        return json_response(await self._one(request, "agentops.get"))

    @operation(
        "updateAgentOpsObservation",
        "AgentOps: change an observation's type, title, content or tags; answers it",
        body=m.AgentOpsObservationChanges,
        path=OBSERVATION_ID,
        replies=m.replies({200: m.AgentOpsObservation}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def update_observation(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        wanted = observation_id(request)
        body = await self._parsed(request, m.AgentOpsObservationChanges)
        # as our item's changes: the type is its kind, the title is kept in its metadata
        changes: dict[str, object] = {
            name: value
            for name, value in (("kind", body.type), ("content", body.content), ("tags", body.tags))
            if value is not None
        }
        memory = self.memory(p)
        for _ in range(PATCH_RETRIES):
            found = self._read(memory, lambda s: _located(s, p.tenant, wanted))
            if found is None:
                raise ApiError(404, "not_found", "observation not found")
            sid, version, metadata = found
            update = dict(changes)
            if body.title is not None:
                update["metadata"] = {**metadata, "title": body.title}
            args = (SECTION, str(wanted), update)
            try:
                with self.service.write():
                    await memory.run_async(specs.UPDATE_ITEM, p.tenant, sid, args, None, version)
                break
            except VersionConflict:  # another write to the holder came first: read it again
                continue
        else:
            raise ApiError(409, "conflict", "the observation kept changing; retry")
        return json_response(await self._one(request, "agentops.update"))

    @operation(
        "deleteAgentOpsObservation",
        "AgentOps: remove an observation (?hard=true: erase it from the files too)",
        query=m.AgentOpsDeleteQuery,
        path=OBSERVATION_ID,
        replies=m.replies({204: Reply(None, "removed")}, appends=True),
        writes=True,
        tags=TAGS,
    )
    async def delete_observation(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        wanted = observation_id(request)
        hard = self._query(request, m.AgentOpsDeleteQuery).hard == "true"
        memory = self.memory(p)
        found = self._read(memory, lambda s: agentops.find(s, p.tenant, wanted))
        if found is None:  # nothing to delete: 204 and nothing appended, as the service
            return Response(status_code=204)
        sid = found[0]
        with self.service.write():
            if hard:  # erased: removed, and every payload holding it redacted
                reason = "AgentOps hard delete"
                await memory.run_async(specs.ERASE_ITEMS, p.tenant, sid, ([str(wanted)], reason))
            else:
                args = (SECTION, [str(wanted)])
                await memory.run_async(specs.REMOVE_ITEMS, p.tenant, sid, args)
        return Response(status_code=204)

    @operation(
        "listRecentAgentOpsObservations",
        "AgentOps: the observations, newest first (traced as read)",
        query=m.AgentOpsRecentObservationsQuery,
        replies=m.replies({200: list[m.AgentOpsObservation]}, appends=True),
        tags=TAGS,
    )
    async def recent_observations(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        query = self._query(request, m.AgentOpsRecentObservationsQuery)
        project = agentops.project_of(query.project)

        def select(state: MemoryState) -> list:
            sessions = agentops.holders(state, p.tenant, project, query.scope)
            found = agentops.observations_of(state, p.tenant, sessions)
            found = [pair for pair in found if not query.type or pair[1].kind == query.type]
            return found[::-1][: query.limit]  # newest first

        memory = self.memory(p)
        with self.service.write():
            found = await reads.read_observations(memory, p.tenant, select, "agentops.recent")
        return json_response(observation_answers(memory, p.tenant, found))
