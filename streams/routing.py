"""Routing on the raw path, so percent-encoded ids holding `/`, `+`, `:` or `@` work (wire.md).

Starlette matches routes against the decoded path, where `s%2F1` has become `s/1` and splits a
session id in two. These routes split `raw_path` at `/` first and percent-decode each segment
after, so an id is always exactly one segment.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from .errors import error_response
from .guards import body_refusal


def _segments(raw_path: bytes) -> list[str] | None:
    try:
        return [unquote(part.decode("ascii"), errors="strict") for part in raw_path.split(b"/")[1:]]
    except (UnicodeDecodeError, UnicodeError):
        return None


class RawRoute(BaseRoute):
    """`pattern` like `/v1/sessions/{session}/items`; `endpoints` maps methods to handlers."""

    def __init__(
        self, pattern: str, endpoints: dict[str, Callable], websocket: bool = False, name: str = ""
    ) -> None:
        self.pattern = pattern
        self.parts = pattern.split("/")[1:]
        self.endpoints = endpoints
        self.websocket = websocket
        self.name = name or pattern

    def _params(self, scope: Scope) -> dict[str, str] | None:
        raw = scope.get("raw_path") or scope["path"].encode()
        raw = raw.split(b"?", 1)[0]
        segments = _segments(raw)
        if segments is None or len(segments) != len(self.parts):
            return None
        params = {}
        for part, value in zip(self.parts, segments, strict=True):
            if part.startswith("{"):
                if not value:
                    return None
                params[part[1:-1]] = value
            elif part != value:
                return None
        return params

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

    def url_path_for(self, name: str, /, **path_params: str):  # pragma: no cover - unused
        raise NotImplementedError
