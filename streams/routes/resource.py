"""What the handlers of the /v1 resources share (sessions_api.py, items_api.py, context_api.py,
state_api.py, and the search, facts, capture, retention and KAOS routes): the service, the
session a path names, a request's body and query parsed by their models, and the one path
every command takes.

Every write returns only once its record is durable. `Idempotency-Key` makes a retry return the
first call's record; `If-Match` carries the expected session version (a stale one is 409,
nothing appended).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from eventstore.errors import LedgerError
from sections.runtime.memory import Memory, Session
from sections.specs.command_specs import CommandSpec
from streams.apidoc import keep_operation
from streams.routes.query import parse_query
from streams.server.service import Service
from streams.web.auth import Principal
from streams.web.errors import ApiError, error_response, from_exception
from streams.web.json_body import parse_model, read_json
from streams.web.responses import json_response, record_json, send_json

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]
# A lean route's handler: (scope, receive) -> (status, JSON body, headers); see `lean`.
LeanHandler = Callable[[Scope, Receive], Awaitable[tuple[int, bytes, list[tuple[bytes, bytes]]]]]
# Writes with bodies larger than this run on a worker thread: encoding megabytes of JSON (JCS) takes
# long enough to stall every stream and request sharing the event loop.
LARGE_BODY = 256 * 1024
_INTEGER = re.compile(r"-?[0-9]{1,18}")  # ASCII digits only: "²" is a digit to str.isdigit


def expected_version(value: str | None) -> int | None:
    """If-Match: the session version a write expects ("7", W/"7" or 7; streams/apidoc
    `IF_MATCH`), or None without one."""
    if value is None:
        return None
    version = value.strip().removeprefix("W/").strip('"')
    if not _INTEGER.fullmatch(version):
        raise ApiError(
            400,
            "invalid_input",
            f"If-Match (the expected session version) must be an integer, not {version[:40]!r}",
        )
    return int(version)


def write_headers(scope: Scope) -> tuple[str | None, str | None]:
    """Idempotency-Key and If-Match from the raw headers (the first of each, as Headers.get)."""
    key = match = None
    for name, value in scope["headers"]:
        if name == b"idempotency-key" and key is None:
            key = value.decode("latin-1")
        elif name == b"if-match" and match is None:
            match = value.decode("latin-1")
    return key, match


class Api:
    """The handlers of one resource, over the service."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def memory(self, principal: Principal) -> Memory:
        """The memory holding the principal's tenant (its partition's, in store mode)."""
        return self.service.memory_for(principal)

    def _session(self, principal: Principal, request: Request) -> Session:
        return self.memory(principal).session(
            request.path_params["session"], tenant=principal.tenant, create=False
        )

    def _writer_session(self, request: Request) -> Session:
        return self._session(self.service.principal(request, "write"), request)

    def _etag(self, session: Session) -> dict[str, str]:
        return {"ETag": f'"{session.version}"'}

    async def _parsed(self, request: Request, model: type[M], required: bool = True) -> M:
        """The request's JSON body as `model`, the model its operation documents it by; without
        `required`, no body is the model's defaults."""
        limit = self.service.settings.max_body_bytes
        return parse_model(model, await read_json(request, limit, required))

    def _query(self, request: Request, model: type[M]) -> M:
        return parse_query(model, request.query_params.multi_items())

    async def _run(
        self, session: Session, spec: CommandSpec, args: tuple, request: Request | None = None
    ) -> Any:
        """Run a command of the table (sections/specs/command_specs.py) on `session`: the one path
        every route takes. With `request`, its Idempotency-Key and If-Match go along."""
        if request is None:
            return await session.memory.run_async(spec, session.tenant, session.id, args)
        key = request.headers.get("idempotency-key")
        expected = expected_version(request.headers.get("if-match"))
        size = getattr(request.state, "body_bytes", 0)
        return await self._command(session, spec, args, key, expected, size)

    async def _command(
        self,
        session: Session,
        spec: CommandSpec,
        args: tuple,
        key: str | None,
        expected: int | None,
        size: int,
    ) -> Any:
        if size > LARGE_BODY:  # canonicalizing it must not stall the event loop
            return await asyncio.to_thread(
                session.memory.run, spec, session.tenant, session.id, args, key, expected
            )
        return await session.memory.run_async(spec, session.tenant, session.id, args, key, expected)

    async def _write(
        self, request: Request, session: Session, spec: CommandSpec, args: tuple = ()
    ) -> Response:
        """A write that answers its record (and the session's new version as ETag)."""
        with self.service.write():
            record = await self._run(session, spec, args, request)
        return json_response({"record": record_json(record)}, headers=self._etag(session))


def lean(handler: LeanHandler) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """A route as a raw ASGI app: no Starlette `Request` or `Response`, its refusals answered
    here exactly as the app's exception handlers would (streams/web/errors.py). Marked `lean`, so
    the app's express lane (streams/web/app.py) may call it without the middleware chain."""

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, body, headers = await handler(scope, receive)
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message, exc.headers)(
                scope, receive, send
            )
        except LedgerError as exc:
            await from_exception(exc)(scope, receive, send)
        else:
            await send_json(send, body, status, headers)

    setattr(endpoint, "lean", True)  # noqa: B010 (an attribute of a function: mypy knows none)
    return keep_operation(endpoint, handler)
