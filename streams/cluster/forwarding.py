"""Requests that need a partition's leader reach it from any replica (docs/scale-out-forwarding.md).

Every replica answers every request. A request whose route reads or writes a session's
projection (the leader routes: the tables of streams/routes/api.py and streams/routes/search_api.py) needs the
`Memory` of the caller's tenant's partition, which only that partition's leader holds. This ASGI
middleware sits in front of the app in store mode and, for those requests only:

1. authenticates the caller (token -> tenant and scopes) exactly as the route would;
2. asks the cluster who leads `partition_of(tenant)`:
   - this replica (`Local`): the app runs the request here, untouched;
   - another replica (`Remote(url)`): the request is proxied there over httpx: method, raw path
     and query, body, the caller's headers (Idempotency-Key and If-Match among them) minus its
     credentials, plus the caller's principal signed with the replica secret
     (streams/cluster/replica_sig.py); status, headers and body come back as they are, streamed;
   - nobody (`NoLeader(retry_after)`): 503 `no_leader` with `Retry-After`.
3. A leader that was fenced between our look and its answer says 421, and one that died refuses
   the connection. Either way the forwarder waits for the cluster's next look at lm_head (its
   route cache changes within two ticks) and tries once more, here or at the new leader; a second miss is 503 with `Retry-After`,
   never a loop.

Streams (SSE, WebSocket, JSONL, long-poll), status, health, metrics and the dashboard are served
by every replica from its own hub and mirror, so they are never forwarded. Neither is a request
that already carries the forwarding headers: it is judged by its signature where it arrives
(streams/web/auth.py), which is also what keeps two replicas with different views of the leader from
bouncing a request between them.

An error in the transport after the request was sent (the leader died mid-request) is 503
`leader_unreachable`: whether a write took effect is unknown, which is what Idempotency-Key is
for; it is not retried here because a request without one could then apply twice.

4. While a forwarded request waits for the leader's answer, the partition's route is watched
   (issue 30): a leader that stalled or froze loses its lease, and the route moves (to nobody,
   then to the replica that took the partition over) within a lease and a tick. When it moves
   before the answer came, the forward is cut (its connection closed) and, if the request is
   safe to send again (GET, HEAD, PUT, or any request with an Idempotency-Key: the new leader
   recovered the log from the table, and the key is in it if the first send landed), it is sent
   on the new route once: served here when this replica took the partition over, or forwarded
   to the new leader. A request without that safety gets 503 `leader_unreachable` with
   `Retry-After` instead of a second send. So a forwarded request never waits on a leader that
   lost its partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streams.cluster.replica_sig import request_target, sign
from streams.cluster.routes import NoLeader, Remote, Route
from streams.web.auth import authenticate, is_forwarded
from streams.web.errors import ApiError, error_response
from streams.web.json_body import read_body
from streams.web.routing import RawRoute, RouteTable

if TYPE_CHECKING:
    import httpx

    from streams.cluster.cluster import Cluster
    from streams.server.service import Service
    from streams.web.auth import Principal

log = logging.getLogger("ledgermem.forwarding")

# Connection-level headers (RFC 9110 7.6.1) and what the forwarder itself sets or must not pass:
# the caller's credentials stay here (the principal travels signed instead); Origin and the
# Sec-Fetch-* headers stay too: this replica's guard has judged them (streams/web/guards.py), CORS is
# answered by the replica the browser talks to, and the leader would otherwise refuse an allowed
# cross-origin call for coming from a page.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = _HOP_BY_HOP | {
    "host",
    "content-length",
    "authorization",
    "cookie",
    "origin",
    "sec-fetch-site",
    "sec-fetch-mode",
    "sec-fetch-dest",
    "sec-fetch-user",
}
# uvicorn adds its own `date` and `server`; the leader's would come twice.
_NOT_RETURNED = _HOP_BY_HOP | {"date", "server"}
CONNECT_TIMEOUT = 2.0  # a leader that does not accept within it is treated as gone
READ_TIMEOUT = 60.0  # a leader route answers well within it (long waits are streams, not here)
NO_LEADER_RETRY_AFTER = 1
REFRESH_POLL = 0.02  # seconds between looks at the cluster's routes after a miss
# Safe to send to a new leader after the old one got it: nothing applies twice.
_RESENDABLE = frozenset({"GET", "HEAD", "PUT", "OPTIONS"})


class RouteMoved(Exception):
    """The partition's route changed while a forwarded request waited for its answer."""


class LeaderRoutes:
    """Which requests need the partition's leader: those one of the leader routes matches.

    Built from the route tables themselves (their patterns), so a new session route is forwarded
    without anyone keeping a list of paths in step. The method does not matter: a wrong one is
    the leader's 405 to give. Matching is the router's own lookup (`RouteTable`) on the path's
    segments split once per request (`path_segments`, kept in the scope for the router after it);
    a websocket is never a leader route.
    """

    def __init__(self, routes: Iterable[RawRoute]) -> None:
        self.routes = list(routes)
        self._table = RouteTable(self.routes)

    def __contains__(self, scope: Scope) -> bool:
        if scope["type"] != "http":
            return False
        return bool(self._table.candidates(scope))


def leader_route_list(service: Service) -> list[RawRoute]:
    """The routes that need the partition's leader (store mode forwards them to it): every
    route that reads or writes a tenant's memory. The app serves these very routes."""
    from streams.mcp import mcp_mount
    from streams.routes import api, capture_api, facts_api, retention_api, search_api
    from streams.seeds import agentops_api, kaos_api

    return (
        api.routes(service)
        + search_api.routes(service)
        + facts_api.routes(service)
        + agentops_api.routes(service)  # docs/agentops.md
        + capture_api.routes(service)
        + retention_api.routes(service)
        + kaos_api.routes(service)  # KAOS's /memory/* (docs/adapters/kaos.md)
        + mcp_mount.routes(service)  # stateless JSON POSTs; none without the mcp extra
    )


def leader_routes(service: Service) -> LeaderRoutes:
    return LeaderRoutes(leader_route_list(service))


def route_kind(route: Route) -> str:
    """`local`, `remote` or `none`, for the cluster's Local / Remote / NoLeader answers."""
    if isinstance(route, Remote):
        return "remote"
    if isinstance(route, NoLeader):
        return "none"
    return "local"


class ForwardToLeader:
    """The middleware. `service` gives `cluster` (None in file mode: nothing is forwarded),
    `settings` and `replica_secret`, read on each request (both are set at startup)."""

    def __init__(self, app: ASGIApp, service: Service, routes: LeaderRoutes) -> None:
        self.app = app
        self.service = service
        self.routes = routes
        self._client: httpx.AsyncClient | None = None  # made on the first forwarded request
        self.forwarded = 0  # requests proxied (for tests and metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cluster = getattr(self.service, "cluster", None)
        if cluster is None or scope["type"] != "http" or scope not in self.routes:
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        if is_forwarded(conn):  # a replica sent it: answer here (421 when we do not lead)
            await self.app(scope, receive, send)
            return
        try:
            principal = authenticate(conn, self.service.settings, self.service.replica_secret)
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
            return
        partition = cluster.partition_of(principal.tenant)
        route = cluster.route(partition)
        if route_kind(route) == "local":
            await self.app(scope, receive, send)
            return
        try:
            httpx = _httpx()
            secret = self.service.replica_secret
            if secret is None:
                raise ApiError(
                    503,
                    "no_replica_secret",
                    "this replica cannot forward to the partition's leader: no replica secret is "
                    "configured (LEDGERMEM_REPLICA_SECRET or DATA/keys/replica.secret)",
                )
            body = await read_body(scope, receive, self.service.settings.max_body_bytes)
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
            return
        for attempt in (1, 2):
            kind = route_kind(route)
            if kind == "none":
                self._count("no_leader")
                await _no_leader(route, scope, receive, send)
                return
            if kind == "local":
                await self.app(scope, _replay(body, receive), send)
                return
            try:
                upstream = await self._send_while_routed(
                    cluster, partition, route, scope, body, principal, secret
                )
            except RouteMoved:
                if not _resendable(scope):
                    self._count("unreachable")
                    await _moved(route.url, scope, receive, send)
                    return
                if attempt == 1:
                    self._count("rerouted")
                    route = await _led_again(cluster, partition)
                    continue
                upstream = None  # moved twice: 503 below
            except (httpx.ConnectError, httpx.ConnectTimeout):
                upstream = None  # nothing was sent: safe to try the refreshed route
            except httpx.TransportError as exc:
                self._count("unreachable")
                await _unreachable(route.url, exc, scope, receive, send)
                return
            if upstream is not None and upstream.status_code != 421:
                self._count("answered")
                await self._relay(upstream, send)
                return
            if upstream is not None:
                await upstream.aread()
                await upstream.aclose()
                if _error_code(upstream.content) != "not_leader":
                    # A 421 of another kind (the leader does not know the Host we used: its
                    # allowed_hosts lacks the advertised name) is a configuration problem a
                    # retry cannot fix: the caller gets the leader's answer naming it.
                    self._count("answered")
                    await self._relay_read(upstream, send)
                    return
            if attempt == 1:
                self._count("retried")
                route = await _refreshed(cluster, partition, route)
        self._count("no_leader")
        await error_response(
            503,
            "no_leader",
            f"partition {partition} is changing leaders; retry shortly",
            {"Retry-After": str(NO_LEADER_RETRY_AFTER)},
        )(scope, receive, send)

    def _count(self, outcome: str) -> None:
        metrics = getattr(self.service, "metrics", None)
        if metrics is not None:
            metrics.forwarded.labels(outcome).inc()

    def client(self) -> httpx.AsyncClient:
        """One httpx.AsyncClient (a keep-alive pool) for every forwarded request."""
        httpx = _httpx()
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT, pool=None),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
                follow_redirects=False,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _send_while_routed(
        self,
        cluster: Cluster,
        partition: int,
        route: Route,
        scope: Scope,
        body: bytes,
        principal: Principal,
        secret: bytes,
    ) -> httpx.Response:
        """`_send` to the route's leader, cut (RouteMoved) if the partition's route changes
        before the leader's answer starts."""
        assert isinstance(route, Remote)
        sending = asyncio.ensure_future(self._send(route.url, scope, body, principal, secret))
        watching = asyncio.ensure_future(_route_moves(cluster, partition, route))
        try:
            await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not sending.done():
                sending.cancel()  # closes the connection to the old leader
                with contextlib.suppress(BaseException):
                    await sending
        if sending.cancelled():
            raise RouteMoved(partition)
        return sending.result()

    async def _send(
        self, base_url: str, scope: Scope, body: bytes, principal: Principal, secret: bytes
    ) -> httpx.Response:
        raw_path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        target = request_target(raw_path, query)
        method = scope["method"]
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name.decode("latin-1").lower() not in _NOT_FORWARDED
        ]
        signed = sign(
            secret,
            method,
            target,
            principal.tenant,
            principal.scopes,
            time.time(),
        )
        headers.extend(signed.items())
        if getattr(self.service, "tracing", None) is not None:
            headers = _traced(headers)
        request = self.client().build_request(
            method,
            # The raw target, so percent-encoded ids reach the leader byte for byte.
            _httpx().URL(base_url.rstrip("/") + target),
            headers=headers,
            content=body,
        )
        self.forwarded += 1
        return await self.client().send(request, stream=True)

    async def _relay_read(self, upstream: httpx.Response, send: Send) -> None:
        """An answer already read whole (its body is `upstream.content`)."""
        body = upstream.content
        headers = [
            (name, value)
            for name, value in upstream.headers.raw
            if name.decode("latin-1").lower() not in _NOT_RETURNED | {"content-length"}
        ]
        headers.append((b"content-length", str(len(body)).encode()))
        await send(
            {"type": "http.response.start", "status": upstream.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _relay(self, upstream: httpx.Response, send: Send) -> None:
        headers = [
            (name, value)
            for name, value in upstream.headers.raw
            if name.decode("latin-1").lower() not in _NOT_RETURNED
        ]
        try:
            await send(
                {"type": "http.response.start", "status": upstream.status_code, "headers": headers}
            )
            async for chunk in upstream.aiter_raw():
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await upstream.aclose()


def _error_code(body: bytes) -> str | None:
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def _httpx() -> ModuleType:
    """httpx, imported on the first forwarded request: file mode never needs it (it is in the
    `postgresql` extra with the driver)."""
    try:
        import httpx
    except ImportError:
        raise ApiError(
            503,
            "forwarding_unavailable",
            "this replica cannot forward to the partition's leader: httpx is not installed "
            "(pip install 'ledgermem[postgresql]')",
        ) from None
    return httpx


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the already-read body once, then the client's own messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refreshed(cluster: Cluster, partition: int, stale: Route) -> Route:
    """The route once the cluster has looked at lm_head again.

    `Cluster.refresh()` reads lm_head and lm_replica now (on a worker thread: it blocks). Without
    it (or when the store cannot be reached for it), the route cache is refreshed by the
    leadership loop every `tick` (at most half a second): wait up to two ticks for the answer to
    change from the one that failed, and take whatever it says then (still the same leader, or
    none, is answered 503 by the caller).
    """
    refresh = getattr(cluster, "refresh", None)
    if refresh is not None:
        try:
            await asyncio.to_thread(refresh)
        except Exception as exc:  # the store is unreachable: fall back on the loop's next look
            log.warning("refreshing the route of partition %d failed: %s", partition, exc)
        else:
            return cluster.route(partition)
    deadline = time.monotonic() + 2 * getattr(cluster, "tick", 0.5)
    while True:
        route = cluster.route(partition)
        if route != stale or time.monotonic() >= deadline:
            return route
        await asyncio.sleep(REFRESH_POLL)


def _resendable(scope: Scope) -> bool:
    if scope["method"] in _RESENDABLE:
        return True
    return any(name.lower() == b"idempotency-key" for name, _ in scope["headers"])


async def _route_moves(cluster: Cluster, partition: int, route: Route) -> None:
    """Returns once the cluster's route for `partition` is not `route` any more. The routes
    change when the leadership loop looks at the store (every tick; `Cluster.looks` counts the
    looks), so the route is read again only after a new look, seen within half a tick. A
    cluster that does not count its looks is not watched."""
    every = max(REFRESH_POLL, getattr(cluster, "tick", 0.5) / 2)
    seen = getattr(cluster, "looks", None)
    if seen is None:
        await asyncio.Event().wait()  # never: the forward is not watched
    while True:
        await asyncio.sleep(every)
        looks = cluster.looks
        if looks != seen:
            seen = looks
            if cluster.route(partition) != route:
                return


async def _led_again(cluster: Cluster, partition: int) -> Route:
    """The partition's route once somebody leads it again, or NoLeader after two leases and two
    ticks: when the route moved off a leader that lost its lease, a replica takes the partition
    within a tick or two and its takeover (a sync and a recovery) takes about a lease; beyond
    that the caller gets 503 with Retry-After rather than a longer wait."""
    tick = getattr(cluster, "tick", 0.5)
    limit = time.monotonic() + 2 * getattr(cluster, "lease_seconds", 5.0) + 2 * tick
    while True:
        route = cluster.route(partition)
        if route_kind(route) != "none" or time.monotonic() >= limit:
            return route
        await asyncio.sleep(max(REFRESH_POLL, tick / 2))


async def _moved(url: str, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(
        503,
        "leader_unreachable",
        f"the partition's leader at {url} lost the partition before it answered; a write may "
        "or may not have taken effect: retry with an Idempotency-Key",
        {"Retry-After": str(NO_LEADER_RETRY_AFTER)},
    )(scope, receive, send)


async def _no_leader(route: Route, scope: Scope, receive: Receive, send: Send) -> None:
    seconds = max(1, math.ceil(getattr(route, "retry_after", NO_LEADER_RETRY_AFTER)))
    await error_response(
        503,
        "no_leader",
        "no replica leads this tenant's partition right now; retry after the lease passes",
        {"Retry-After": str(seconds)},
    )(scope, receive, send)


async def _unreachable(
    url: str, exc: Exception, scope: Scope, receive: Receive, send: Send
) -> None:
    await error_response(
        503,
        "leader_unreachable",
        f"the partition's leader at {url} failed mid-request ({type(exc).__name__}); a write "
        "may or may not have taken effect: retry with the same Idempotency-Key",
        {"Retry-After": str(NO_LEADER_RETRY_AFTER)},
    )(scope, receive, send)


def _traced(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """With tracing on (streams/server/telemetry.py): the current span's context in place of the
    caller's `traceparent` / `tracestate` / `baggage` (OTEL_PROPAGATORS), so the leader's spans
    continue this replica's server span, in the caller's trace."""
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    replaced = {name.lower() for name in carrier} | {"traceparent", "tracestate"}
    return [h for h in headers if h[0].lower() not in replaced] + list(carrier.items())
