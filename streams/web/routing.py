"""Routing on the raw path, so percent-encoded ids holding `/`, `+`, `:` or `@` work (docs/wire.md).

Starlette matches routes against the decoded path, where `s%2F1` has become `s/1` and splits a
session id in two. These routes split `raw_path` at `/` first and percent-decode each segment
after, so an id is always exactly one segment.

Route once per request: `path_segments` splits and decodes the raw path once and keeps the result
in the scope (the leader-forwarding middleware and the router share it), and `RouteTable` picks
the route by segment count and literal segments with dict lookups instead of trying every route
in turn. It answers exactly as trying the routes in order would: the first route whose shape and
method match; else the first whose shape matches (its 405 with `Allow`); else none (404). The
app's router looks routes up in it (streams/web/library_overrides.py `TableRouter`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import unquote

from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, request_response
from starlette.types import Receive, Scope, Send

from streams.apidoc import keep_operation
from streams.web.errors import error_response
from streams.web.guards import body_refusal

_CACHE = "ledgermem.segments"  # scope key: (the raw path it was split from, its segments)
# RouteTable keeps the lookup of this many raw paths of at most SEEN_PATH_BYTES (~2 MiB at most).
SEEN_PATHS = 4096
SEEN_PATH_BYTES = 256


def _segments(raw_path: bytes) -> list[str] | None:
    try:
        return [
            unquote(part.decode("ascii"), errors="strict") if b"%" in part else part.decode("ascii")
            for part in raw_path.split(b"/")[1:]
        ]
    except UnicodeError:
        return None


def path_segments(scope: Scope) -> list[str] | None:
    """The raw path's percent-decoded segments (None when not ASCII or not UTF-8 once decoded),
    split once per request: kept in the scope along with the raw path they came from."""
    raw = scope.get("raw_path") or scope["path"].encode()
    cached = scope.get(_CACHE)
    if cached is not None and cached[0] == raw:
        return cached[1]
    segments = _segments(raw.split(b"?", 1)[0])
    scope[_CACHE] = (raw, segments)
    return segments


class RawRoute(BaseRoute):
    """`pattern` like `/v1/sessions/{session}/items`; `endpoints` maps methods to handlers."""

    def __init__(
        self, pattern: str, endpoints: dict[str, Callable], websocket: bool = False, name: str = ""
    ) -> None:
        self.pattern = pattern
        self.parts = pattern.split("/")[1:]
        # (position, name) of each `{name}` part, and the literal parts' positions and values
        self.params = tuple((i, p[1:-1]) for i, p in enumerate(self.parts) if p.startswith("{"))
        self.literal_positions = tuple(i for i, p in enumerate(self.parts) if not p.startswith("{"))
        self.literals = tuple(self.parts[i] for i in self.literal_positions)
        self.endpoints = endpoints
        self.websocket = websocket
        self.name = name or pattern

    def params_of(self, segments: list[str]) -> dict[str, str] | None:
        """The path parameters when `segments` (already of this route's length, literals already
        equal) give every parameter a non-empty value, else None."""
        params = {}
        for i, name in self.params:
            value = segments[i]
            if not value:
                return None
            params[name] = value
        return params

    def _params(self, scope: Scope) -> dict[str, str] | None:
        segments = path_segments(scope)
        if segments is None or len(segments) != len(self.parts):
            return None
        for i, literal in zip(self.literal_positions, self.literals, strict=True):
            if segments[i] != literal:
                return None
        return self.params_of(segments)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if (scope["type"] == "websocket") != self.websocket or scope["type"] not in (
            "http",
            "websocket",
        ):
            return Match.NONE, {}
        params = self._params(scope)
        if params is None:
            return Match.NONE, {}
        child = {"path_params": params, "endpoint": self.endpoints}
        if self.websocket or scope["method"] in self.endpoints:
            return Match.FULL, child
        return Match.PARTIAL, child

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.websocket:
            await self.endpoints["WEBSOCKET"](scope, receive, send)
            return
        endpoint = self.endpoints.get(scope["method"])
        if endpoint is None:
            allowed = self.allowed_methods()
            response = error_response(
                405,
                "method_not_allowed",
                f"{scope['method']} is not allowed on {self.pattern}; use {', '.join(allowed)}",
                {"Allow": ", ".join(allowed)},
            )
            await response(scope, receive, send)
            return
        refusal = body_refusal(scope)
        if refusal is not None:
            await error_response(*refusal)(scope, receive, send)
            return
        await endpoint(scope, receive, send)

    def allowed_methods(self) -> list[str]:
        """What a 405 lists in `Allow` (RFC 9110 15.5.6): exactly the methods routed here."""
        return sorted(self.endpoints)

    def url_path_for(self, name: str, /, **path_params: str) -> URLPath:  # pragma: no cover
        raise NotImplementedError  # no route is found by name


def is_lean(endpoint: Callable) -> bool:
    """Whether `endpoint` is a lean route (streams/routes/api.py `lean`): raw ASGI already."""
    return getattr(endpoint, "lean", False)


def endpoints_of(handlers: dict[str, Callable]) -> dict[str, Callable]:
    """Method -> ASGI endpoint: Starlette's `request_response` around each `Request -> Response`
    handler, a lean one (already raw ASGI: streams/routes/api.py `lean`) as it is; each endpoint keeps
    its handler's operation, which /openapi.json describes it by (streams/apidoc)."""
    return {
        method: handler if is_lean(handler) else keep_operation(request_response(handler), handler)
        for method, handler in handlers.items()
    }


def routes_of(table: Iterable[tuple[str, dict[str, Callable]]]) -> list[RawRoute]:
    """A route table's `(pattern, {method: handler})` rows as RawRoutes (`endpoints_of`)."""
    return [RawRoute(pattern, endpoints_of(handlers)) for pattern, handlers in table]


class RouteTable(BaseRoute):
    """Many `RawRoute`s as one route that finds its match by lookup: segment count, then, per set
    of literal positions among the routes of that length, the literal segments as a dict key.
    Equal to trying `routes` in order (the earliest full match, else the earliest partial)."""

    def __init__(self, routes: Iterable[RawRoute]) -> None:
        self.routes = list(routes)
        shapes: dict[int, dict[tuple[int, ...], dict[tuple[str, ...], list]]] = {}
        for index, route in enumerate(self.routes):
            by_literals = shapes.setdefault(len(route.parts), {})
            by_key = by_literals.setdefault(route.literal_positions, {})
            by_key.setdefault(route.literals, []).append((index, route))
        self._by_length = {
            n: tuple((positions, keys) for positions, keys in groups.items())
            for n, groups in shapes.items()
        }
        self._seen: dict[bytes, list[tuple[int, RawRoute, dict[str, str]]]] = {}

    def candidates(self, scope: Scope) -> list[tuple[int, RawRoute, dict[str, str]]]:
        """The routes whose shape matches the request's path (any method), in table order.

        A function of the raw path alone, so the answer is kept per raw path (a client posts to
        the same few paths over and over) in a bounded cache, emptied whenever it fills; callers
        copy the parameters before handing them on."""
        raw = scope.get("raw_path") or scope["path"].encode()
        found = self._seen.get(raw)
        if found is None:
            found = self._find(path_segments(scope))
            if len(raw) <= SEEN_PATH_BYTES:
                if len(self._seen) >= SEEN_PATHS:
                    self._seen.clear()
                self._seen[raw] = found
        return found

    def _find(self, segments: list[str] | None) -> list[tuple[int, RawRoute, dict[str, str]]]:
        if segments is None:
            return []
        groups = self._by_length.get(len(segments))
        if groups is None:
            return []
        found = []
        for positions, keys in groups:
            routes = keys.get(tuple([segments[i] for i in positions]))
            if routes is None:
                continue
            for index, route in routes:
                params = route.params_of(segments)
                if params is not None:
                    found.append((index, route, params))
        if len(found) > 1:
            found.sort(key=lambda entry: entry[0])
        return found

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return Match.NONE, {}
        websocket = kind == "websocket"
        partial = None
        for _, route, params in self.candidates(scope):
            if route.websocket != websocket:
                continue
            child = {"path_params": dict(params), "endpoint": route.endpoints, ROUTE: route}
            if websocket or scope["method"] in route.endpoints:
                return Match.FULL, child
            if partial is None:
                partial = child
        if partial is not None:
            return Match.PARTIAL, partial
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope[ROUTE].handle(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: str) -> URLPath:  # pragma: no cover
        raise NotImplementedError  # no route is found by name


ROUTE = "ledgermem.route"  # scope key: the RawRoute a RouteTable matched
