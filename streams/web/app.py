"""The Starlette application: routes, error handlers and the service's lifespan.

Routing is one lookup (streams/web/routing.py `RouteTable`; streams/web/library_overrides.py
`TableRoutedStarlette`).

The express lane: a request for a lean route (streams/routes/api.py, `lean`: the item POST) skips
the rest of the middleware chain when every middleware would pass it through untouched: the guard
neither refuses it nor adds CORS headers, nothing is forwarded (file mode), and the route takes
its body. The route then runs with the one route lookup and the same answers, its refusals
answered by the route itself as the exception handlers would. `ExpressLane` is the outermost
middleware, inside Starlette's `ServerErrorMiddleware`, so an unexpected error is a 500 as on
the whole chain. Any other request takes the whole chain.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from streams.cluster.forwarding import ForwardToLeader, LeaderRoutes, leader_route_list
from streams.fanout import channels
from streams.routes import proofs_api, status
from streams.seeds import agentops_api
from streams.server.service import Service
from streams.server.settings import Settings
from streams.web import openapi, ui
from streams.web.errors import EXCEPTION_HANDLERS
from streams.web.guards import GuardPolicy, RequestGuard, body_refusal
from streams.web.library_overrides import TableRoutedStarlette
from streams.web.routing import ROUTE, RawRoute, RouteTable, is_lean


class ExpressLane:
    """The middleware that runs a lean route's endpoint at once (the module's docstring)."""

    def __init__(
        self, app: ASGIApp, *, service: Service, guard: GuardPolicy, table: RouteTable
    ) -> None:
        self.app = app
        self.service = service
        self.guard = guard
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.service.cluster is None:
            endpoint = self._lean(scope)
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _lean(self, scope: Scope) -> ASGIApp | None:
        """Find the route once; the endpoint (with the scope filled in as the router would)
        when it is a lean endpoint that the middleware chain and the route's own checks would
        let through, else None."""
        match, child = self.table.matches(scope)
        if match is not Match.FULL:
            return None
        route = child[ROUTE]
        endpoint = route.endpoints[scope["method"]]
        if not is_lean(endpoint) or not self.guard.passes(scope):
            return None
        if body_refusal(scope) is not None:
            return None
        scope["router"] = scope["app"].router
        scope.update(child)
        return endpoint


def create_app(settings: Settings, service: Service | None = None) -> Starlette:
    """The service's ASGI app over `service` (made from `settings` when not given)."""
    service = service or Service(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.startup()
        try:
            yield
        finally:
            await service.shutdown()

    # The routes that need the partition's leader (store mode forwards them to it); the others
    # every replica answers from its own hub and mirror.
    leader_routes = leader_route_list(service)
    served: list[RawRoute] = []  # /openapi.json describes the routes served, filled in below
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
    # Route once per request: one lookup by segment count and literal segments, instead of
    # trying the routes one after the other.
    table = RouteTable(routes)
    app = TableRoutedStarlette(
        table=table,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
        middleware=[
            Middleware(ExpressLane, service=service, guard=guard, table=table),
            Middleware(RequestGuard, policy=guard),
            # Inside the guard: a forged Host or foreign Origin is refused before any forwarding.
            Middleware(ForwardToLeader, service=service, routes=LeaderRoutes(leader_routes)),
        ],
    )
    app.state.service = service
    return app
