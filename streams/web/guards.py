"""Requests a web page must not be able to make: foreign origins, forged Hosts, non-JSON bodies.

Without tokens every caller is tenant `default` with every scope, so between a page the user
happens to open and the memory there is only the browser's same-origin policy, and that policy
still lets any page *send* a "simple" request (a form POST, a `text/plain` fetch, an `<img>`) to
any origin, and lets a DNS-rebinding page *read* answers by giving the service's address its own
name. So, before any route runs:

- `Host` must name the service: the loopback names, the bound host, and `allowed_hosts`. A
  rebinding page's requests carry its own name. An empty `Host` and two `Host` lines name
  none of them; a target in absolute form (`GET http://name/path`) names its host in place of
  `Host`, as RFC 9112 has it, and that name is checked. A request without `Host` (HTTP/1.0)
  passes. (Bound to a wildcard address with no
  `allowed_hosts`, the service cannot know its names and accepts any.)
- `Origin`, which browsers send on every cross-origin request and every POST, must be the
  service's own or in `allowed_origins`. Without `Origin`, a browser's `Sec-Fetch-Site` still
  tells a cross-site subresource (an `<img>`, a `<script>`) from a same-origin call; only a
  top-level navigation may come from elsewhere.
- A body is JSON, sent as `application/json`: the media types a page may send without asking
  the service first (`text/plain`, the form types) are refused with 415 (`body_refusal`, checked
  by the route once it knows the method is allowed, so a wrong method is still a 405).

CORS headers go only to `allowed_origins`; with none configured, CORS is off.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streams.web.errors import error_response
from streams.web.extensions import TARGET_AUTHORITY

if TYPE_CHECKING:
    from streams.server.settings import Settings

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CORS_METHODS = b"GET, POST, PUT, PATCH, DELETE"
CORS_MAX_AGE = b"600"
KEPT_VERDICTS = 256  # Host and Content-Type values whose verdicts are kept (short values only)


@dataclass(frozen=True)
class GuardPolicy:
    hosts: frozenset[str] | None  # the names `Host` may carry; None: any
    origins: frozenset[str]  # foreign origins allowed to call, answered with CORS headers
    # `passes`: raw Host value -> whether it names the service (bounded, emptied when full)
    _host_verdicts: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> GuardPolicy:
        configured = {host_name(h) for h in settings.allowed_hosts}
        if "*" in configured or (_is_wildcard(settings.host) and not configured):
            hosts = None
        else:
            hosts = frozenset(LOOPBACK_NAMES | {host_name(settings.host)} | configured)
        return cls(hosts, frozenset(_origin(o) for o in settings.allowed_origins))

    def passes(self, scope: Scope) -> bool:
        """Whether `RequestGuard` would hand this request to the app untouched: not refused, and
        no CORS to add (no `Origin`, or one that is not an allowed foreign origin). Without
        `Origin` and `Sec-Fetch-Site` only `Host` decides, and its verdict is kept per value."""
        headers = _headers(scope)
        if b"origin" not in headers and b"sec-fetch-site" not in headers:
            host = _named_host(scope, headers)
            if self.hosts is None or host is None:
                return True
            known = self._host_verdicts.get(host)
            if known is None:
                known = _names(self.hosts, host)
                if len(host) <= 128:
                    if len(self._host_verdicts) >= KEPT_VERDICTS:
                        self._host_verdicts.clear()
                    self._host_verdicts[host] = known
            return known
        if request_refusal(scope, self) is not None:
            return False
        origin = headers.get(b"origin")
        return origin is None or _origin(origin.decode("latin-1")) not in self.origins


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host in ("", "*")


def _origin(text: str) -> str:
    return text.strip().rstrip("/").lower()


def host_name(host: str) -> str:
    """`Host` without its port: `[::1]:8000` -> `::1`, `Example.COM:80` -> `example.com`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


_HEADERS = "ledgermem.headers"  # scope key: the header map below, built once per request


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by name (the last of repeated ones), built once per request and kept
    in the scope: the guard, the route's body check and the express lane (streams/web/app.py) all
    read it."""
    raw = scope.get("headers", ())
    cached = scope.get(_HEADERS)
    if cached is not None and cached[0] is raw:  # not a copy of the scope given other headers
        return cached[1]
    headers = {name: value for name, value in raw}
    if len(headers) < len(raw) and sum(name == b"host" for name, _ in raw) > 1:
        # Two Host lines name no one host: their list (`a, b`) is no name of the service.
        headers[b"host"] = b", ".join(value for name, value in raw if name == b"host")
    scope[_HEADERS] = (raw, headers)
    return headers


def _named_host(scope: Scope, headers: dict[bytes, bytes]) -> bytes | None:
    """The host the request names: an absolute-form target's authority (RFC 9112, 3.2.2: it
    takes the place of `Host`), else `Host` (None when absent, as HTTP/1.0 may send it)."""
    extensions = scope.get("extensions")
    if extensions:
        authority = extensions.get(TARGET_AUTHORITY)
        if authority is not None:
            return bytes(authority)
    return headers.get(b"host")


def _names(hosts: frozenset[str], host: bytes) -> bool:
    """Whether a `Host` value names one of `hosts`: empty names none, and neither does a list
    (two `Host` lines, joined by `_headers`)."""
    return b"," not in host and host_name(host.decode("latin-1")) in hosts


def request_refusal(scope: Scope, policy: GuardPolicy) -> tuple[int, str, str] | None:
    """Why this request is refused by its Host and Origin, as (status, code, message); or None."""
    headers = _headers(scope)
    named = _named_host(scope, headers)
    host = headers.get(b"host", b"").decode("latin-1")
    # An empty Host, two of them, or an absolute-form target naming another host: forged.
    if policy.hosts is not None and named is not None and not _names(policy.hosts, named):
        host = named.decode("latin-1")
        return (
            421,
            "unknown_host",
            f"Host {host!r} is not a name of this service; add it to allowed_hosts "
            "(LEDGERMEM_ALLOWED_HOSTS) if it is one",
        )
    origin = headers.get(b"origin")
    if origin is not None:
        given = _origin(origin.decode("latin-1"))
        scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        if given != f"{scheme}://{host.lower()}" and given not in policy.origins:
            return (
                403,
                "forbidden_origin",
                f"requests from origin {given!r} are refused; add it to allowed_origins "
                "(LEDGERMEM_ALLOWED_ORIGINS) to let its pages call this service",
            )
        return None
    site = headers.get(b"sec-fetch-site", b"").lower()
    mode = headers.get(b"sec-fetch-mode", b"").lower()
    if site in (b"cross-site", b"same-site") and not (
        mode == b"navigate" and scope.get("method") == "GET"
    ):
        return (
            403,
            "forbidden_origin",
            "a request another site's page made without an Origin is refused",
        )
    return None


def is_json_media_type(content_type: str) -> bool:
    """`application/json`, with any parameters but a charset other than UTF-8."""
    media_type, *params = content_type.split(";")
    if media_type.strip().lower() != "application/json":
        return False
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            return False
    return True


_content_type_verdicts: dict[bytes, bool] = {}


def _json_content_type(value: bytes) -> bool:
    """`is_json_media_type` of a raw header value, its verdict kept per (short) value."""
    known = _content_type_verdicts.get(value)
    if known is None:
        known = is_json_media_type(value.decode("latin-1"))
        if len(value) <= 128:
            if len(_content_type_verdicts) >= KEPT_VERDICTS:
                _content_type_verdicts.clear()
            _content_type_verdicts[value] = known
    return known


def body_refusal(scope: Scope) -> tuple[int, str, str] | None:
    """Why this request's body is refused: JSON only, and only as `application/json`."""
    headers = _headers(scope)
    content_type = headers.get(b"content-type")
    length = headers.get(b"content-length", b"").strip()
    has_body = b"transfer-encoding" in headers or length not in (b"", b"0")
    if not has_body and (content_type is None or scope.get("method") not in BODY_METHODS):
        return None
    if content_type is not None and _json_content_type(content_type):
        return None
    given = content_type.decode("latin-1") if content_type is not None else "none"
    return (
        415,
        "unsupported_media_type",
        f"request bodies are JSON sent with Content-Type: application/json, not {given!r}",
    )


class RequestGuard:
    """ASGI middleware: `request_refusal` before the app, CORS for the allowed origins."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = request_refusal(scope, self.policy)
        if refusal is not None:
            if scope["type"] == "websocket":
                # Closing before accepting makes the server answer the handshake with 403.
                await send({"type": "websocket.close", "code": 1008})
                return
            await error_response(*refusal)(scope, receive, send)
            return
        origin = _headers(scope).get(b"origin")
        if origin is None or _origin(origin.decode("latin-1")) not in self.policy.origins:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and _is_preflight(scope):
            await self._preflight(scope, origin, send)
            return
        await self.app(scope, receive, _with_cors(send, origin))

    async def _preflight(self, scope: Scope, origin: bytes, send: Send) -> None:
        requested = _headers(scope).get(b"access-control-request-headers", b"")
        headers = [
            *_cors_headers(origin),
            (b"access-control-allow-methods", CORS_METHODS),
            (b"access-control-max-age", CORS_MAX_AGE),
            (b"content-length", b"0"),
        ]
        if requested:
            headers.append((b"access-control-allow-headers", requested))
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _is_preflight(scope: Scope) -> bool:
    return scope["method"] == "OPTIONS" and b"access-control-request-method" in _headers(scope)


def _cors_headers(origin: bytes) -> Iterable[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin),
        (b"access-control-allow-credentials", b"true"),
        (b"access-control-expose-headers", b"ETag, Location"),
        (b"vary", b"Origin"),
    ]


def _with_cors(send: Send, origin: bytes) -> Send:
    async def send_with_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *_cors_headers(origin)]}
        await send(message)

    return send_with_cors
