"""Sessions under /v1: list, create (or get or create), read, delete, stats, end a turn or the
session, commit (streams/routes/api.py has the route table).

Every write returns only once its record is durable, with the record as the exact bytes of its
line under `record`; the session's version after it is the answer's ETag.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from sections.model.commands import seed_payload
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory, Session
from sections.specs import command_specs as specs
from streams.apidoc import IDEMPOTENCY_KEY, Reply, operation
from streams.apidoc.operation import ETAG, LOCATION
from streams.routes import session_models as sm
from streams.routes.query import parse_query
from streams.routes.resource import Api, expected_version
from streams.web.responses import json_response, record_json

# Query parameters of GET /v1/sessions that are its paging; every other is a metadata filter.
LIST_PAGING = frozenset(sm.SessionListQuery.model_fields)


class SessionsApi(Api):
    @operation(
        "listSessions",
        "the tenant's sessions in creation order, paged, filtered by last activity and metadata",
        query=sm.SessionListQuery,
        free_query=sm.METADATA_FILTERS,
        replies={200: sm.SessionList},
        tags=("sessions",),
    )
    async def list_sessions(self, request: Request) -> Response:
        """GET /v1/sessions: `limit`, `offset` page, `since`/`until` bound the last activity
        (µs or ISO-8601); every other parameter is a metadata filter (`app=` or
        `metadata.app=`; `metadata.limit=` for a metadata key named like a paging one)."""
        p = self.service.principal(request, "read")
        pairs = request.query_params.multi_items()
        paging = parse_query(sm.SessionListQuery, [(k, v) for k, v in pairs if k in LIST_PAGING])
        filters = {
            k.removeprefix("metadata."): v for k, v in pairs if k not in LIST_PAGING | {"token"}
        }
        sessions = self.memory(p).list_sessions(
            p.tenant, where=filters, since=paging.since, until=paging.until,
            offset=paging.offset, limit=paging.limit,
        )  # fmt: skip
        return json_response({"sessions": sessions})

    @operation(
        "createSession",
        "create a session with a server-made id; with Idempotency-Key a retry gives the same one",
        description=sm.NEW_SESSION_REFUSALS,
        headers=(IDEMPOTENCY_KEY,),
        body=sm.SessionCreateRequest,
        body_required=False,
        replies={201: Reply(sm.SessionCreated, "created", headers=(LOCATION, ETAG))},
        writes=True,
        tags=("sessions",),
    )
    async def create_session(self, request: Request) -> Response:
        """POST /v1/sessions: a session with a server-made id; 201 with `Location`. With an
        Idempotency-Key the id is derived from the key, so a retry answers the same session
        (its first `session.created`) and creates nothing."""
        p = self.service.principal(request, "write")
        memory = self.memory(p)
        metadata, config = await self._new_session(request, memory)
        key = request.headers.get("idempotency-key")
        session_id = specs.session_id_for(key)
        with self.service.write():
            record = await memory.run_async(
                specs.CREATE_SESSION, p.tenant, session_id, (config, metadata), key
            )
        session = Session(memory, p.tenant, record.session)
        content = {"record": record_json(record), "session": session.info()}
        location = "/v1/sessions/" + quote(record.session, safe="")
        return json_response(content, 201, {"Location": location, **self._etag(session)})

    async def _new_session(
        self, request: Request, memory: Memory
    ) -> tuple[dict | None, MemoryConfig]:
        """The metadata and config of the session the body asks for, its seed items checked
        even when no session will be made (it exists, or a retry finds its key): the same body
        has one answer."""
        body = await self._parsed(request, sm.SessionCreateRequest, required=False)
        sections = None
        if body.sections is not None:
            # as the core takes them: the settings given (with any seed `items`), nothing added
            sections = {
                name: settings.model_dump(exclude_unset=True)
                for name, settings in body.sections.items()
            }
        config = memory.session_config(sections, body.token_counter)
        if config.seed_items:
            seed_payload(config, memory.counter_for(config))
        return body.metadata, config

    @operation(
        "getOrCreateSession",
        "get or create a session: 201 created (the settings and seeds apply), 200 it existed",
        description=sm.NEW_SESSION_REFUSALS,
        body=sm.SessionCreateRequest,
        body_required=False,
        replies={
            201: Reply(sm.SessionCreated, "created", headers=(ETAG,)),
            200: Reply(sm.SessionExisted, "it existed: nothing appended", headers=(ETAG,)),
        },
        writes=True,
        tags=("sessions",),
    )
    async def put_session(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        memory = self.memory(p)
        metadata, config = await self._new_session(request, memory)
        with self.service.write():
            record, created = await memory.run_async(
                specs.GET_OR_CREATE_SESSION,
                p.tenant,
                request.path_params["session"],
                (config, metadata),
            )
        session = self._session(p, request)
        content = {"record": record_json(record) if record else None, "session": session.info()}
        return json_response(content, 201 if created else 200, self._etag(session))

    @operation(
        "getSession",
        "a session, its sections and version (ETag)",
        replies={200: Reply(sm.SessionDetail, headers=(ETAG,))},
        tags=("sessions",),
    )
    async def get_session(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        info = session.info()
        info["sections"] = session.memory.session_sections(session.tenant, session.id)
        return json_response(info, headers=self._etag(session))

    @operation(
        "deleteSession",
        "delete a session",
        headers=sm.WRITE_HEADERS,
        replies={200: sm.SessionWritten},
        writes=True,
        tags=("sessions",),
    )
    async def delete_session(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "write"), request)
        with self.service.write():
            record = await self._run(session, specs.DELETE_SESSION, (), request)
        return json_response({"record": record_json(record)})

    @operation(
        "getSessionStats",
        "a session's items, and its tokens and evictions by section",
        replies={200: sm.SessionStats},
        tags=("sessions",),
    )
    async def stats(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        return json_response(session.stats())

    @operation(
        "getTenantStats",
        "the tenant's sessions, items, and tokens and evictions by section",
        replies={200: sm.SessionStats},
        tags=("sessions",),
    )
    async def tenant_stats(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        return json_response(self.memory(p).stats(p.tenant))

    @operation(
        "endSession",
        "end the session (session.ended, then its summary), optionally after its transcript",
        headers=sm.WRITE_HEADERS,
        body=sm.SessionEndRequest,
        body_required=False,
        replies={200: sm.WRITTEN},
        writes=True,
        tags=("sessions",),
    )
    async def end_session(self, request: Request) -> Response:
        """POST .../end, optionally {"messages": [{role, content}]}: a transcript, recorded as
        the session's messages before the end, so its summary counts them."""
        session = self._writer_session(request)
        body = await self._parsed(request, sm.SessionEndRequest, required=False)
        if body.messages is None:
            return await self._write(request, session, specs.END_SESSION)
        key = request.headers.get("idempotency-key")
        expected = expected_version(request.headers.get("if-match"))
        transcript = specs.transcript_items([m.model_dump() for m in body.messages])
        args = (transcript, key, expected)
        with self.service.write():  # `expected` is the transcript's: the end follows it at once
            record = await self._command(session, specs.END_SESSION, args, key, None, 0)
        return json_response({"record": record_json(record)}, headers=self._etag(session))

    @operation(
        "endTurn",
        "end the turn: clears the turn-lifetime sections (turn.ended)",
        headers=sm.WRITE_HEADERS,
        replies={200: sm.WRITTEN},
        writes=True,
        tags=("sessions",),
    )
    async def end_turn(self, request: Request) -> Response:
        return await self._write(request, self._writer_session(request), specs.END_TURN)

    @operation(
        "commitSession",
        "commit the commit-lifetime sections (or one): they survive a restart",
        headers=sm.WRITE_HEADERS,
        body=sm.SessionCommitRequest,
        body_required=False,
        replies={200: sm.WRITTEN},
        writes=True,
        tags=("sessions",),
    )
    async def commit(self, request: Request) -> Response:
        body = await self._parsed(request, sm.SessionCommitRequest, required=False)
        session = self._writer_session(request)
        return await self._write(request, session, specs.COMMIT, (body.section,))
