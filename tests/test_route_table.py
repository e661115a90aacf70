"""`RouteTable` (one lookup per request) answers exactly as trying its `RawRoute`s in order."""

from __future__ import annotations

import itertools

from starlette.routing import Match

from streams.web.routing import RawRoute, RouteTable, path_segments

PATTERNS = [
    ("/", {"GET"}),
    ("/ui", {"GET"}),
    ("/ui/", {"GET"}),
    ("/ui/{asset}", {"GET"}),
    ("/v1/sessions", {"GET"}),
    ("/v1/log/status", {"GET"}),
    ("/v1/sessions/{session}", {"PUT", "GET", "DELETE"}),
    ("/v1/sessions/{session}/items", {"GET"}),
    ("/v1/sessions/{session}/sections/{section}", {"PUT"}),
    ("/v1/sessions/{session}/sections/{section}/items", {"POST", "GET"}),
    ("/v1/sessions/{session}/sections/{section}/items/{item}", {"GET", "PATCH", "DELETE"}),
    # overlapping shapes: order decides, a parameter route before a literal one and after it
    ("/v1/{kind}/stats", {"POST"}),
    ("/v1/sessions/stats", {"GET"}),
    ("/v1/{kind}/{name}", {"PATCH"}),
    ("/v1/stream/ws", {"WEBSOCKET"}),
]
PATHS = [
    b"/",
    b"",
    b"/ui",
    b"/ui/",
    b"/ui/app.js",
    b"/ui//",
    b"/v1/sessions",
    b"/v1/sessions/",
    b"/v1/sessions/s%2F1",
    b"/v1/sessions/s%2F1?x=1",
    b"/v1/sessions/s/1",
    b"/v1/sessions//items",
    b"/v1/sessions/a%20b/items",
    b"/v1/sessions/s1/sections/messages/items",
    b"/v1/sessions/s1/sections/m%2Fx/items/i%3A1",
    b"/v1/sessions/s1/sections//items",
    b"/v1/sessions/stats",
    b"/v1/log/stats",
    b"/v1/log/status",
    b"/v1/stream/ws",
    b"/v1/sessions/%ff",
    b"/v1/sessions/\xc3\xa9",
    b"/v1/sessions/%zz",
]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]


def routes() -> list[RawRoute]:
    return [
        RawRoute(p, {m: object() for m in methods}, websocket=methods == {"WEBSOCKET"})
        for p, methods in PATTERNS
    ]


def in_order(table: list[RawRoute], scope: dict) -> tuple[Match, RawRoute | None, dict]:
    """What Starlette's router does: the first full match, else the first partial one."""
    partial = None
    for route in table:
        match, child = route.matches(dict(scope))
        if match is Match.FULL:
            return match, route, child["path_params"]
        if match is Match.PARTIAL and partial is None:
            partial = (match, route, child["path_params"])
    return partial or (Match.NONE, None, {})


def test_the_table_answers_as_the_routes_tried_in_order():
    table = routes()
    lookup = RouteTable(table)
    kinds = [("http", m) for m in METHODS] + [("websocket", "GET")]
    for raw, (kind, method) in itertools.product(PATHS, kinds):
        scope = {"type": kind, "method": method, "raw_path": raw, "path": "/"}
        expected = in_order(table, scope)
        match, child = lookup.matches(dict(scope))
        got = (match, child.get("ledgermem.route"), child.get("path_params", {}))
        assert got == expected, (raw, kind, method)


def test_a_percent_encoded_slash_stays_one_segment_and_the_split_is_kept_in_the_scope():
    scope = {"type": "http", "method": "GET", "raw_path": b"/v1/sessions/s%2F1/items"}
    assert path_segments(scope) == ["v1", "sessions", "s/1", "items"]
    assert scope["ledgermem.segments"][1] == ["v1", "sessions", "s/1", "items"]
    match, child = RouteTable(routes()).matches(scope)
    assert match is Match.FULL and child["path_params"] == {"session": "s/1"}
    # a scope whose path changed (a redirect attempt) is split again, not served from the cache
    scope["raw_path"] = b"/v1/sessions/s%2F1"
    assert path_segments(scope) == ["v1", "sessions", "s/1"]
