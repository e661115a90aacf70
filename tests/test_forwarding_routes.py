"""Which requests need the partition's leader: decided from the route tables (streams/web/app.py)."""

from __future__ import annotations

import pytest

from streams.cluster.forwarding import ForwardToLeader, LeaderRoutes
from streams.server.settings import Settings
from streams.web.app import create_app


@pytest.fixture(scope="module")
def leader_routes(tmp_path_factory) -> LeaderRoutes:
    app = create_app(Settings(data=str(tmp_path_factory.mktemp("routes"))))
    (forwarding,) = [m for m in app.user_middleware if m.cls is ForwardToLeader]
    return forwarding.kwargs["routes"]


def _scope(method: str, raw_path: bytes, kind: str = "http") -> dict:
    return {"type": kind, "method": method, "path": raw_path.decode(), "raw_path": raw_path,
            "query_string": b"", "headers": []}  # fmt: skip


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", b"/v1/sessions"),
        ("GET", b"/v1/stats"),
        ("GET", b"/v1/state"),
        ("PUT", b"/v1/sessions/a%2Fb"),
        ("GET", b"/v1/sessions/s"),
        ("DELETE", b"/v1/sessions/s"),
        ("GET", b"/v1/sessions/s/stats"),
        ("POST", b"/v1/sessions/s/end"),
        ("POST", b"/v1/sessions/s/turns/end"),
        ("POST", b"/v1/sessions/s/commit"),
        ("POST", b"/v1/sessions/s/context"),
        ("GET", b"/v1/sessions/s/state"),
        ("POST", b"/v1/sessions/s/erase"),
        ("GET", b"/v1/sessions/s/items"),
        ("POST", b"/v1/sessions"),
        ("GET", b"/v1/sessions/s/events"),
        ("PUT", b"/v1/sessions/s/sections/notes"),
        ("POST", b"/v1/sessions/s/sections/notes/items"),
        ("PATCH", b"/v1/sessions/s/sections/notes/items/i%2F1"),
        ("GET", b"/v1/search"),
        ("GET", b"/v1/sessions/s/search"),
        ("POST", b"/v1/observations"),
        ("POST", b"/v1/sessions/s/observations"),
        ("GET", b"/v1/summaries"),
        ("GET", b"/v1/sessions/s/summary"),
        ("GET", b"/memory/events"),  # KAOS's (streams/seeds/kaos_api.py)
        ("GET", b"/memory/sessions"),
        ("POST", b"/v1/sessions/s"),  # a wrong method still goes there: the leader says 405
    ],
)
def test_session_routes_need_the_leader(leader_routes, method, path):
    assert _scope(method, path) in leader_routes


@pytest.mark.parametrize(
    "method, path, kind",
    [
        ("GET", b"/v1/stream/sse", "http"),
        ("GET", b"/v1/stream/jsonl", "http"),
        ("GET", b"/v1/stream/ws", "websocket"),
        ("GET", b"/v1/events", "http"),
        ("GET", b"/v1/log/status", "http"),
        ("GET", b"/healthz", "http"),
        ("GET", b"/readyz", "http"),
        ("GET", b"/metrics", "http"),
        ("GET", b"/", "http"),
        ("GET", b"/ui/app.js", "http"),
        ("GET", b"/openapi.json", "http"),
        ("GET", b"/v1/nothing/here", "http"),
    ],
)
def test_streams_status_and_the_dashboard_are_answered_by_every_replica(
    leader_routes, method, path, kind
):
    assert _scope(method, path, kind) not in leader_routes
