"""The REST API under /v1 of sessions, their sections and items, context, state and erasure: the
route table of the resources (sessions_api.py, items_api.py, context_api.py, state_api.py).

Every write returns only once its record is durable, with the record as the exact bytes of its
line under `record`. `Idempotency-Key` makes a retry return the first call's record; `If-Match`
carries the expected session version (a stale one is 409, nothing appended). Each handler is
given its body and query parsed by the models its operation documents them by (streams/apidoc).
"""

from __future__ import annotations

from collections.abc import Callable

from streams.routes.context_api import ContextApi
from streams.routes.items_api import ItemsApi
from streams.routes.resource import lean
from streams.routes.sessions_api import SessionsApi
from streams.routes.state_api import StateApi
from streams.server.service import Service
from streams.web.routing import RawRoute, routes_of


def routes(service: Service) -> list[RawRoute]:
    sessions, items = SessionsApi(service), ItemsApi(service)
    context, state = ContextApi(service), StateApi(service)
    s = "/v1/sessions/{session}"
    table: list[tuple[str, dict[str, Callable]]] = [
        ("/v1/sessions", {"GET": sessions.list_sessions, "POST": sessions.create_session}),
        ("/v1/stats", {"GET": sessions.tenant_stats}),
        ("/v1/state", {"GET": state.tenant_state}),
        (
            s,
            {
                "PUT": sessions.put_session,
                "GET": sessions.get_session,
                "DELETE": sessions.delete_session,
            },
        ),
        (s + "/stats", {"GET": sessions.stats}),
        (s + "/end", {"POST": sessions.end_session}),
        (s + "/turns/end", {"POST": sessions.end_turn}),
        (s + "/commit", {"POST": sessions.commit}),
        (s + "/compact", {"POST": context.compact}),
        (s + "/context", {"POST": context.context}),
        (s + "/state", {"GET": state.session_state}),
        (s + "/erase", {"POST": state.erase}),
        (s + "/items", {"GET": items.list_session_items}),
        (s + "/events", {"GET": items.get_events}),
        (s + "/sections/{section}", {"PUT": items.configure_section}),
        (
            s + "/sections/{section}/items",
            {"POST": lean(items.add_items), "GET": items.list_section_items},
        ),
        (
            s + "/sections/{section}/items/{item}",
            {"GET": items.get_item, "PATCH": items.update_item, "DELETE": items.remove_item},
        ),
    ]
    return routes_of(table)


__all__ = ["routes"]
