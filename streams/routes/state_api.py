"""The past and erasure under /v1: every session of the tenant, or one, as it was at a seq (time
travel, an operator's traced read), and erasing items or a whole session from the files
(streams/routes/api.py has the route table)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sections.specs import command_specs as specs
from streams.apidoc import operation
from streams.routes import session_models as sm
from streams.routes.resource import Api
from streams.server.service import Service
from streams.web.errors import ApiError, error_response
from streams.web.json_body import parse_model, read_json
from streams.web.responses import json_response, record_json

STATE_AT_CALLS = (
    1  # replays at once: a second one only shares the GIL (bench/state_at.py); 429 busy
)


class StateApi(Api):
    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self._state_calls = 0  # time-travel calls running (one event loop: a plain counter)

    @operation(
        "getTenantStateAt",
        "every session of the tenant as it was at seq `at` (an operator's read: traced)",
        query=sm.SessionStateQuery,
        replies={200: sm.SessionStateReply, 429: sm.BUSY},
        writes=True,
        tags=("sessions",),
    )
    async def tenant_state(self, request: Request) -> Response:
        # One method per route: each carries its own operationId (docs/openapi.md).
        return await self.state_at(request)

    @operation(
        "getSessionStateAt",
        "the session as it was at seq `at` (an operator's read: traced)",
        query=sm.SessionStateQuery,
        replies={200: sm.SessionStateReply, 429: sm.BUSY},
        writes=True,
        tags=("sessions",),
    )
    async def session_state(self, request: Request) -> Response:
        return await self.state_at(request)

    async def state_at(self, request: Request) -> Response:
        """Time travel. Each call replays from the nearest snapshot or checkpoint on a worker
        thread; at most STATE_AT_CALLS run at once (the replay holds the GIL in bursts that
        would stall writers), the others get 429 at once."""
        p = self.service.principal(request, "read")
        at = self._query(request, sm.SessionStateQuery).at
        memory = self.memory(p)
        head = memory.writer.size - 1
        if at > head:  # a well-formed seq the log has not reached: no such state (yet)
            raise ApiError(404, "not_found", f"seq {at} is not written yet: the head is {head}")
        if self._state_calls >= STATE_AT_CALLS:
            return error_response(
                429,
                "busy",
                f"time travel is busy (at most {STATE_AT_CALLS} at once); retry in a second",
                {"Retry-After": "1"},
            )
        self._state_calls += 1
        try:
            with self.service.write():  # the read is traced: it appends
                sessions = await memory.run_async(
                    specs.READ_STATE, p.tenant, request.path_params.get("session"), (at,)
                )
        finally:
            self._state_calls -= 1
        return json_response({"at": at, "sessions": sessions})

    @operation(
        "eraseSession",
        "admin: erase items from the files ({ids, reason}) or the whole session ({all, reason})",
        body=sm.SessionEraseRequest,
        replies={200: sm.SessionErased},
        writes=True,
        tags=("sessions",),
    )
    async def erase(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "admin"), request)
        limit = self.service.settings.max_body_bytes
        value = await read_json(request, limit)
        # the two forms of the body: {"all": true, reason} or {ids, reason}
        if value.get("all") is True:
            everything = parse_model(sm.SessionEraseAll, value)
            with self.service.write():
                record = await self._run(session, specs.ERASE_SESSION, (everything.reason,))
            return json_response({"record": record_json(record), "erased": "session"})
        some = parse_model(sm.SessionEraseItems, value)
        with self.service.write():
            record, erased = await self._run(session, specs.ERASE_ITEMS, (some.ids, some.reason))
        return json_response({"record": record_json(record), "erased": erased})
