"""`/mcp` in the service: the MCP tools over streamable HTTP, each request as its token's tenant.

Mounted only when the `mcp` extra is installed (`routes` returns none otherwise, and the service
starts as before). A request goes through the service's own gates first: `RequestGuard` (Host,
Origin, CORS) and the route's JSON-only body check, as every route; then the token, as the REST
API reads it (streams/web/auth.py: a Bearer header, the `token` parameter or the cookie; 401 without
one when tokens are configured). The principal is kept in the ASGI scope, and every tool call
reads it from its own request, so the tenant always comes from the token of the request that
carries the call, and each call checks its scope (`write` for mem_save, `read` otherwise).

The SDK's session manager runs stateless with JSON answers: nothing of a connection is kept
between requests (no MCP session to bind to a token, no stream left open at shutdown). It is
started by the first request and stopped once shutdown begins (`Service.closing`), after the
MCP requests in flight have finished; a request after that gets 503 like any other write.

The session a connection's saves and context use is `?session=ID` on the URL (created on first
use), else `mcp` (DEFAULT_SESSION): one per tenant. `?user=ID` names the user the connection acts
for (a new session is made with metadata `user_id`; without `?session=` its session is
`mcp@ID`); without it, the session's own `user_id`, if any (mcp_tools.user_of).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.types import Message, Receive, Scope, Send

from eventstore.errors import LedgerError
from streams.apidoc import undescribed
from streams.server.service import Service
from streams.web.auth import authenticate_scope
from streams.web.errors import ApiError, error_response
from streams.web.routing import RawRoute

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from streams.mcp.mcp_server import Caller

log = logging.getLogger("ledgermem.mcp")

PATH = "/mcp"
PRINCIPAL = "ledgermem.principal"  # scope keys the tools read back from their request
SESSION = "ledgermem.mcp_session"
USER = "ledgermem.mcp_user"
# An MCP answer is JSON for a program: never a document a browser should render or sniff.
HEADERS = [
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
]


def available() -> bool:
    """Whether the MCP SDK (the `mcp` extra) is installed; found without importing it, which
    takes seconds: the first request to /mcp does (`McpMount._ready`)."""
    return importlib.util.find_spec("mcp") is not None


def routes(service: Service) -> list[RawRoute]:
    if not available():
        log.info("the mcp package is not installed: no /mcp endpoint")
        return []
    # POST only: stateless, there is no stream to open with GET and no session to DELETE; the
    # spec's answer to both is 405, which the route gives (with `Allow: POST`).
    mount = undescribed(
        "MCP's streamable HTTP transport: JSON-RPC messages the MCP specification describes, "
        "and the tools list themselves (tools/list); docs/mcp.md"
    )(McpMount(service))
    return [RawRoute(PATH, {"POST": mount})]


class McpMount:
    """The ASGI endpoint at /mcp (the module's docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        # The SDK's session manager, made by the first request (`_run`).
        self.manager: StreamableHTTPSessionManager | None = None
        self._started: asyncio.Future[None] | None = None
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _build(self) -> StreamableHTTPSessionManager:
        from mcp.server.transport_security import TransportSecuritySettings

        from streams.mcp.mcp_server import build_server

        server = build_server(self._resolve)
        # The service's RequestGuard already checked Host and Origin against its settings.
        server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=self.service.settings.max_body_bytes,
        )
        self.manager = server.session_manager
        return self.manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        service = self.service
        try:
            if not service.accepting or service.closing.is_set():
                raise ApiError(
                    503,
                    "shutting_down",
                    "the service is shutting down; retry against the restarted service",
                )
            # Each tool call checks the scope it needs (`_resolve`); here only who is calling.
            principal = authenticate_scope(scope, service.settings, service.replica_secret)
            session, user = _connection_of(scope)
        except ApiError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else exc.headers
            await error_response(exc.status, exc.code, exc.message, headers)(scope, receive, send)
            return
        except LedgerError as exc:
            await error_response(400, "invalid_input", str(exc))(scope, receive, send)
            return
        scope[PRINCIPAL] = principal
        scope[SESSION] = session
        scope[USER] = user
        self._inflight += 1  # counted from here: the manager stops only once none is left
        self._idle.clear()
        try:
            manager = await self._ensure_running()
            await manager.handle_request(scope, receive, _with_headers(send))
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _ensure_running(self) -> StreamableHTTPSessionManager:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            asyncio.create_task(self._run(self._started))  # noqa: RUF006 - ends at shutdown
        await asyncio.shield(self._started)
        assert self.manager is not None, "built before the start is announced"
        return self.manager

    async def _run(self, started: asyncio.Future) -> None:
        """Import the SDK off the event loop (seconds), build the server, then own the session
        manager's task group until shutdown."""
        try:
            await asyncio.to_thread(importlib.import_module, "streams.mcp.mcp_server")
            manager = self._build()
        except BaseException as exc:
            started.set_exception(exc)
            raise
        async with manager.run():
            started.set_result(None)
            await self.service.closing.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=30)

    async def _resolve(self, ctx: Context, need: str) -> Caller:
        from streams.mcp.mcp_backends import EmbeddedBackend
        from streams.mcp.mcp_server import Caller
        from streams.mcp.mcp_tools import Refusal

        request = ctx.request_context.request
        assert request is not None, "a tool call over HTTP carries its request"
        scope = request.scope
        principal = scope[PRINCIPAL]
        try:
            principal.require(need)
            memory = self.service.memory_for(principal)
        except ApiError as exc:
            raise Refusal(exc.code, exc.message) from None
        backend = EmbeddedBackend(memory, principal.tenant, self.service.write)
        return Caller(backend, scope[SESSION], scope[USER])


def _connection_of(scope: Scope) -> tuple[str, str | None]:
    """The connection's session and user: `?session=`, `?user=` (docs/mcp.md)."""
    from streams.mcp.mcp_tools import checked_session, checked_user, default_session

    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    user = checked_user(query["user"][-1] if "user" in query else None)
    named = query.get("session")
    return checked_session(named[-1]) if named else default_session(user), user


def _with_headers(send: Send) -> Send:
    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *HEADERS]}
        await send(message)

    return send_with_headers
