"""What every channel shares: opening a stream on the right partition's hub, its traces, how the
hub's refusals reach a client, and ending every stream when shutdown begins.

Stream traces (`stream.opened`/`closed`, long-poll's `polled`) are appended to the tenant's
partition only where this replica leads it; elsewhere they are skipped and counted
(`ledgermem_stream_traces_skipped_total`), since a trace must never hold up or refuse a stream
on a replica that cannot append (docs/scale-out-replicas.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, NamedTuple

from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import Receive, Scope

from eventstore.errors import LedgerError
from eventstore.filters import RecordFilter
from sections.specs import command_specs as specs
from streams.fanout.channels.query import (
    FILTER_KEYS,
    client_address,
    parse_partition,
    query_filter,
    query_params,
    scoped_filter,
    single,
    stream_partition,
)
from streams.fanout.fanout_errors import (
    CursorBeyondHead,
    FanoutError,
    HubClosed,
    TooManySubscribers,
)
from streams.fanout.hub import Hub, Subscription
from streams.server.service import NotLeaderHere, Service
from streams.web.auth import Principal
from streams.web.errors import ApiError, error_response

WS_POLICY_VIOLATION = 1008
WS_GOING_AWAY = 1001
WS_TRY_AGAIN_LATER = 1013
STREAM_HEADERS = [(b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]
log = logging.getLogger("ledgermem.fanout")


class Refusal(NamedTuple):
    status: int  # the HTTP status, also of a refused WebSocket handshake
    close_code: int  # a WebSocket's close code once it is open


# How the hub's refusals reach a client, whatever the channel. A refusal not named here answers
# as its nearest base class does. A cursor beyond the head is a well-formed request in conflict
# with the log's state (a position of another history), hence 409 (docs/wire.md).
REFUSALS: dict[type[FanoutError], Refusal] = {
    CursorBeyondHead: Refusal(409, WS_POLICY_VIOLATION),
    HubClosed: Refusal(503, WS_TRY_AGAIN_LATER),
    TooManySubscribers: Refusal(429, WS_POLICY_VIOLATION),
    FanoutError: Refusal(503, WS_TRY_AGAIN_LATER),
}


def refusal(exc: FanoutError) -> Refusal:
    for kind in type(exc).__mro__:
        if kind in REFUSALS:
            return REFUSALS[kind]
    raise TypeError(f"{type(exc).__name__} is not a FanoutError")


def api_error(exc: ApiError | FanoutError) -> ApiError:
    """The HTTP error to answer: an `ApiError` as it is; a hub's refusal with its status from
    REFUSALS and its own code and message."""
    if isinstance(exc, FanoutError):
        return ApiError(refusal(exc).status, exc.code, exc.message)
    return exc


def refusal_response(exc: ApiError | FanoutError) -> Response:
    error = api_error(exc)
    return error_response(error.status, error.code, error.message)


def stream_fields(
    scope: Scope | None, channel: str, where: RecordFilter, after: int, client: str | None = None
) -> dict[str, Any]:
    """What a stream's traces say about it: channel, client address, filter, starting cursor."""
    fields = {k: sorted(getattr(where, k)) for k in FILTER_KEYS if getattr(where, k) is not None}
    address = client if client is not None else client_address(scope or {})
    return {"channel": channel, "client": address, "filter": fields, "after": after}


async def until_disconnect(
    receive: Receive, work: Awaitable[None], disconnect: str = "http.disconnect"
) -> None:
    """Run `work` until it ends or the client goes away, whichever comes first. Anything else
    the client sends meanwhile (a WebSocket's frames after the first) is ignored."""

    async def disconnected() -> None:
        while (await receive())["type"] != disconnect:
            pass

    tasks = [asyncio.ensure_future(work), asyncio.ensure_future(disconnected())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, OSError):
            raise result  # OSError: the client went away mid-send


class Opened(NamedTuple):
    """A stream's request, checked: who asks, the query, the filter, and the hub to read."""

    principal: Principal
    params: dict[str, list[str]]
    where: RecordFilter
    hub: Hub


class ChannelContext:
    """The service as the channels see it; one for the four channels of an app."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._closing_watch: asyncio.Task[None] | None = None

    def begin(self, scope: Scope, allowed: tuple[str, ...]) -> Opened:
        """Authenticate, parse the query, build the filter and find the partition's hub."""
        self.watch_closing()
        principal = self.service.principal(HTTPConnection(scope), "read")
        params = query_params(scope, (*allowed, "partition"))
        scoped = bool(self.service.settings.tokens)
        where = scoped_filter(query_filter(params), principal, scoped)
        hub = self.hub(single(params, "partition"), where, principal)
        return Opened(principal, params, where, hub)

    def hub(self, given: object, where: RecordFilter, principal: Principal) -> Hub:
        service = self.service
        partition = parse_partition(given, service.partitions)
        scoped = bool(service.settings.tokens)
        partition = stream_partition(partition, where, principal, scoped, service)
        return service.hub_for(principal, partition)

    def _hubs(self) -> list[Hub]:
        service = self.service
        if service.cluster is None:
            return [service.hub] if service.hub is not None else []
        return [service.cluster.hub(p) for p in range(service.partitions)]

    # -- traces: one record when a stream opens, one when it closes (sections/retrieval/read_traces.py)

    async def trace(self, principal: Principal, event: str, stream: dict[str, Any]) -> None:
        try:
            memory = self.service.memory_for(principal)
        except NotLeaderHere:
            self.service.metrics.stream_trace_skipped()
            return
        with self.service.write():
            await memory.run_async(specs.TRACE_STREAM, principal.tenant, None, (event, stream))

    @contextlib.asynccontextmanager
    async def traced(
        self, principal: Principal, subscription: Subscription, stream: dict[str, Any]
    ) -> AsyncIterator[None]:
        """Trace the opening (before anything is sent: a failure refuses the stream) and the
        closing, with the last seq delivered (best effort: at shutdown the log may be closed)."""
        with subscription:
            await self.trace(principal, "opened", stream)
            try:
                yield
            finally:
                closing = {**stream, "last": subscription.delivered}
                try:
                    await asyncio.shield(self.trace(principal, "closed", closing))
                except (ApiError, LedgerError, asyncio.CancelledError) as exc:
                    log.warning("stream close not traced (%s): %s", stream["channel"], exc)

    def watch_closing(self) -> None:
        """End every stream as soon as shutdown begins (uvicorn then waits for connections)."""
        if self._closing_watch is None and self.service.closing is not None:
            self._closing_watch = asyncio.ensure_future(self._close_on_shutdown())

    async def _close_on_shutdown(self) -> None:
        await self.service.closing.wait()
        for hub in self._hubs():
            await hub.close()
