"""The Starlette application: routes, error handlers and the service's lifespan.

The express lane: a request for a lean route (streams/routes/api.py, `lean`: the item POST) skips the
middleware chain when every middleware would pass it through untouched: the guard neither refuses
it nor adds CORS headers, nothing is forwarded (file mode), and the route takes its body. The
route then runs with the one route lookup and the same answers, its refusals answered by the
route itself as the exception handlers would, an unexpected error a 500 as before
(`ServerErrorMiddleware` around the lane too). Any other request takes the whole chain.
"""

from __future__ import annotations

import contextlib

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from streams.cluster.forwarding import ForwardToLeader, LeaderRoutes, leader_route_list
from streams.routes import proofs_api, status
from streams.seeds import agentops_api
from streams.server.service import Service
from streams.server.settings import Settings
from streams.web import openapi, ui
from streams.web.errors import EXCEPTION_HANDLERS
from streams.web.guards import GuardPolicy, RequestGuard, body_refusal
from streams.web.routing import ROUTE, TableRouter, is_lean

_ENDPOINT = "ledgermem.endpoint"  # scope key: the lean endpoint the express lane runs


class LedgerApp(Starlette):
    """Starlette, with the express lane for lean routes (the module's docstring)."""

    def __init__(self, *, service: Service, guard: GuardPolicy, **kwargs) -> None:
        super().__init__(**kwargs)
        self.service = service
        self.guard = guard
        self.express = ServerErrorMiddleware(_run_endpoint, debug=self.debug)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.service.cluster is None and self._lean(scope):
            scope["app"] = self
            await self.express(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def _lean(self, scope: Scope) -> bool:
        """Find the route once; True (with the scope filled in as the router would) when it is a
        lean endpoint that the middleware chain and the route's own checks would let through."""
        table = getattr(self.router, "table", None)
        if table is None:
            return False
        match, child = table.matches(scope)
        if match is not Match.FULL:
            return False
        route = child[ROUTE]
        endpoint = route.endpoints[scope["method"]]
        if not is_lean(endpoint) or not self.guard.passes(scope):
            return False
        if body_refusal(scope) is not None:
            return False
        scope["router"] = self.router
        scope["route"] = route
        scope.update(child)
        scope[_ENDPOINT] = endpoint
        return True


async def _run_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    await scope[_ENDPOINT](scope, receive, send)


def create_app(settings: Settings, service: Service | None = None) -> Starlette:
    from streams.fanout import channels

    service = service or Service(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await service.startup()
        try:
            yield
        finally:
            await service.shutdown()

    # The routes that need the partition's leader (store mode forwards them to it); the others
    # every replica answers from its own hub and mirror.
    leader_routes = leader_route_list(service)
    served: list = []  # /openapi.json describes the routes served, filled in below
    routes = (
        status.routes(service)
        + agentops_api.health_routes(service)
        + proofs_api.routes(service)
        + leader_routes
        + channels.routes(service)
        + openapi.routes(lambda: served)
        + ui.routes(service)
    )
    served.extend(routes)
    guard = GuardPolicy.from_settings(settings)
    app = LedgerApp(
        service=service,
        guard=guard,
        routes=routes,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
        middleware=[
            Middleware(RequestGuard, policy=guard),
            # Inside the guard: a forged Host or foreign Origin is refused before any forwarding.
            Middleware(ForwardToLeader, service=service, routes=LeaderRoutes(leader_routes)),
        ],
    )
    # Route once per request: one lookup by segment count and literal segments (TableRouter)
    # instead of trying the routes one after the other.
    app.router = TableRouter(routes, lifespan=lifespan)
    app.state.service = service
    return app
