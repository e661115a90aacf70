"""The Starlette application: routes, error handlers and the service's lifespan."""

from __future__ import annotations

import contextlib

from starlette.applications import Starlette
from starlette.middleware import Middleware

from . import api, openapi, search_api, status, ui
from .errors import EXCEPTION_HANDLERS
from .forwarding import ForwardToLeader, LeaderRoutes
from .guards import GuardPolicy, RequestGuard
from .routing import TableRouter
from .service import Service
from .settings import Settings


def create_app(settings: Settings, service: Service | None = None) -> Starlette:
    from . import channels

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
    leader_routes = api.routes(service) + search_api.routes(service)
    routes = (
        status.routes(service)
        + leader_routes
        + channels.routes(service)
        + openapi.routes()
        + ui.routes(service)
    )
    app = Starlette(
        routes=routes,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
        middleware=[
            Middleware(RequestGuard, policy=GuardPolicy.from_settings(settings)),
            # Inside the guard: a forged Host or foreign Origin is refused before any forwarding.
            Middleware(ForwardToLeader, service=service, routes=LeaderRoutes(leader_routes)),
        ],
    )
    # Route once per request: one lookup by segment count and literal segments (TableRouter)
    # instead of trying the routes one after the other.
    app.router = TableRouter(routes, lifespan=lifespan)
    app.state.service = service
    return app
