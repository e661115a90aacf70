"""Who is calling: the tenant and scopes of an API token (docs/wire.md, Credentials).

A token may come as `Authorization: Bearer <token>`, a `token` query parameter, or a
`ledgermem_token` cookie (browsers' EventSource cannot send headers). With no tokens configured every caller is
tenant `default` with every scope, and the service listens on loopback only unless told
otherwise. The tenant always comes from the token, never from the request.

The one exception is a request another replica forwarded (streams/cluster/forwarding.py): it names the
caller's principal in `x-ledgermem-forwarded-*` headers, believed only when signed with the
replica secret (streams/cluster/replica_sig.py). A request carrying any of those headers is judged by
them alone: a bad or missing signature is a 401 even when a valid token came along, so a client
cannot talk its way into another tenant by adding headers.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.types import Scope

from streams.cluster.replica_sig import HEADERS, ForwardRefused, request_target, verify
from streams.server.settings import DEFAULT_TENANT, SCOPES, Settings
from streams.web.errors import ApiError

COOKIE = "ledgermem_token"


@dataclass(frozen=True)
class Principal:
    tenant: str
    scopes: frozenset[str]

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise ApiError(403, "forbidden", f"this token lacks the '{scope}' scope")


OPEN = Principal(DEFAULT_TENANT, frozenset(SCOPES))


def presented_token(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return conn.query_params.get("token") or conn.cookies.get(COOKIE)


def authenticate(
    conn: HTTPConnection, settings: Settings, replica_secret: bytes | None = None
) -> Principal:
    if is_forwarded(conn):
        return forwarded_principal(conn, replica_secret)
    given = presented_token(conn)
    if given is None and settings.agentops_tenant is not None:
        trusted = peer_principal(conn, settings)
        if trusted is not None:
            return trusted
    if not settings.tokens:
        return OPEN
    return _token_principal(given, settings)


# The first segment of AgentOps' routes (streams/seeds/agentops_api.py), which no /v1 path has
AGENTOPS_ROUTES = frozenset(
    ("sessions", "observations", "search", "context", "timeline", "stats", "export", "import")
)
PEER_SCOPES = frozenset(("read", "write"))


def peer_principal(conn: HTTPConnection, settings: Settings) -> Principal | None:
    """A call to AgentOps' routes with no credential at all, as the runtime agentops-core
    deploys makes it (it is given a URL, no token): the tenant `agentops_tenant` with `read`
    and `write`, when the TCP peer is loopback or in `agentops_networks`; else None (judged
    as any call without a token: 401 when tokens are configured). The peer is the connection's
    own address (uvicorn believes X-Forwarded-For from loopback proxies only), never a header
    the caller chooses; the guards (Host, Origin, JSON bodies) have run before."""
    segments = conn.scope.get("path", "").split("/")
    if len(segments) < 2 or segments[1] not in AGENTOPS_ROUTES:
        return None
    client = conn.client
    try:
        peer = ipaddress.ip_address(client.host if client is not None else "")
    except ValueError:
        return None
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped
    allowed = peer.is_loopback or any(
        peer in ipaddress.ip_network(net, strict=False) for net in settings.agentops_networks
    )
    if not allowed or settings.agentops_tenant is None:
        return None
    return Principal(settings.agentops_tenant, PEER_SCOPES)


def _token_principal(given: str | None, settings: Settings) -> Principal:
    if given:
        for token in settings.tokens:
            if hmac.compare_digest(token.token.encode(), given.encode()):
                return Principal(token.tenant, token.scopes)
    raise ApiError(
        401,
        "unauthorized",
        "a valid API token is required (Bearer header, token parameter or cookie)",
    )


_FORWARDED_NAMES = frozenset(name.encode("latin-1") for name in HEADERS)


def authenticate_scope(
    scope: Scope, settings: Settings, replica_secret: bytes | None = None
) -> Principal:
    """`authenticate` from the ASGI scope, for the lean routes (streams/routes/api.py): one pass over
    the raw headers, no `HTTPConnection`, when the headers alone decide (no forwarding headers;
    no tokens configured, or an `Authorization: Bearer` one). A token in the query or a cookie,
    and a forwarded request, take `authenticate` itself, so every answer is the same."""
    authorization = None
    for name, value in scope["headers"]:
        if name in _FORWARDED_NAMES:
            return authenticate(HTTPConnection(scope), settings, replica_secret)
        if name == b"authorization" and authorization is None:  # the first, as Headers.get
            authorization = value
    if not settings.tokens:
        return OPEN
    if authorization is not None:
        header = authorization.decode("latin-1")
        if header[:7].lower() == "bearer ":
            return _token_principal(header[7:].strip(), settings)
    return _token_principal(presented_token(HTTPConnection(scope)), settings)


def is_forwarded(conn: HTTPConnection) -> bool:
    return any(name in conn.headers for name in HEADERS)


def forwarded_principal(conn: HTTPConnection, replica_secret: bytes | None) -> Principal:
    """The principal a replica forwarded, or a 401 naming why it is not believed."""
    scope = conn.scope
    target = request_target(
        scope.get("raw_path") or scope["path"].encode(), scope.get("query_string", b"")
    )
    method = scope.get("method", "GET")
    headers = {name: conn.headers[name] for name in HEADERS if name in conn.headers}
    try:
        forwarded = verify(replica_secret, method, target, headers, time.time())
    except ForwardRefused as exc:
        raise ApiError(401, "unauthorized", str(exc)) from None
    return Principal(forwarded.tenant, forwarded.scopes)
