"""The four fan-out channels of docs/wire.md: thin adapters between the hub and a connection.

Each adapter parses and checks the request, takes a `Subscription` from the hub, and moves its
batches of pre-encoded records to the client: SSE through sse-starlette, WebSocket frames, JSONL
lines, or one long-poll JSON body. What to send next, and from where, is the hub's and the
cursor's business (streams/fanout/hub.py, streams/fanout/cursor.py); nothing here re-encodes a record.

With a shared store of P partitions (docs/wire.md, "Partitions") a stream reads one partition's hub:
the tenant's (its token's, or the one its `tenant` filter names), or for an operator's unscoped
stream the `partition=N` it names (`"partition": N` in the WebSocket's first frame); every
replica has every partition's hub. Stream traces (`stream.opened`/`closed`, long-poll's
`polled`) are appended to the tenant's partition only where this replica leads it; elsewhere
they are skipped and counted (`ledgermem_stream_traces_skipped_total`), since a trace must never
hold up or refuse a stream on a replica that cannot append (docs/scale-out-replicas.md).

Where the server offers a writer to the connection (streams/web/extensions.py: `BODY_WRITER`,
`FRAME_WRITER`), the SSE and WebSocket adapters hand their subscription a `LiveWriter`, so the
hub writes live records to a waiting subscriber at publish time, and a WebSocket batch goes out
as one transport write of frames encoded once per record, instead of an ASGI message per frame.
Without one (another ASGI server) they fall back to plain ASGI messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable
from typing import NamedTuple
from urllib.parse import parse_qsl

from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from eventstore.errors import InvalidPayload, LedgerError
from eventstore.filters import RecordFilter
from eventstore.identifiers import is_identifier
from eventstore.jcs import MAX_SAFE_INTEGER, loads_strict
from sections.specs import command_specs as specs
from streams.apidoc import Reply, operation, undescribed
from streams.fanout.channel_models import (
    CACHE_CONTROL,
    LAST_EVENT_ID,
    REFUSED,
    JsonlQuery,
    LongPollQuery,
    LongPollReply,
    SseEvent,
    SseQuery,
)
from streams.fanout.fanout_errors import FanoutError, HubClosed, TooManySubscribers
from streams.fanout.hub import Delivery, EncodedRecord, Hub, Slot, Subscription, ws_text_frame
from streams.server.service import NotLeaderHere
from streams.web.auth import Principal
from streams.web.errors import ApiError, error_response
from streams.web.extensions import BODY_WRITER, FRAME_WRITER, BodyWriter, FrameWriter
from streams.web.library_overrides import EventStream
from streams.web.responses import dumps
from streams.web.routing import RawRoute

FILTER_KEYS = ("tenant", "session", "section", "type")
DEFAULT_LIMIT = 100
DEFAULT_WAIT = 30.0
KEEP_ALIVE_LINE = b"\n"  # what an idle JSONL stream sends every heartbeat_seconds
FIRST_FRAME_SECONDS = 30.0
WS_POLICY_VIOLATION = 1008
WS_GOING_AWAY = 1001
WS_TRY_AGAIN_LATER = 1013
_INTEGER = re.compile(r"-?[0-9]{1,19}")
STREAM_HEADERS = [(b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]
JSONL_HEADERS = [(b"content-type", b"application/x-ndjson"), *STREAM_HEADERS]
READ_TYPE = "items.read"  # traces only: delivering them to a long-poll is not traced (no echo)
log = logging.getLogger("ledgermem.fanout")


class Refusal(NamedTuple):
    status: int  # the HTTP status, also of a refused WebSocket handshake
    close_code: int  # a WebSocket's close code once it is open


# How the hub's refusals reach a client, whatever the channel. A refusal not named here answers
# as its nearest base class does.
REFUSALS: dict[type[FanoutError], Refusal] = {
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


def _error_response(exc: ApiError | FanoutError) -> Response:
    error = api_error(exc)
    return error_response(error.status, error.code, error.message)


def _bad(message: str) -> ApiError:
    return ApiError(400, "invalid_input", message)


# ---- request parsing (shared by every channel) ---------------------------------------------


def query_params(
    scope: Scope, allowed: tuple[str, ...], filters: bool = True
) -> dict[str, list[str]]:
    """The query string as name -> values; a name outside `allowed`, the filters (when taken)
    and `token` is a 400."""
    params: dict[str, list[str]] = {}
    raw = scope.get("query_string", b"").decode("latin-1")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise _bad("the query string is not UTF-8") from None
    for name, value in pairs:
        if name not in allowed and (not filters or name not in FILTER_KEYS) and name != "token":
            known = ", ".join((*allowed, *(FILTER_KEYS if filters else ()), "token"))
            raise _bad(f"unknown query parameter {name!r}: this stream takes {known}")
        params.setdefault(name, []).append(value)
    return params


def _single(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise _bad(f"query parameter {name} is given {len(values)} times; give it once")
    return values[0]


def parse_cursor(value: object, name: str = "after") -> int:
    """A cursor: the seq of the last record seen, or -1 for the start of the log."""
    if type(value) is int:
        cursor = value
    elif isinstance(value, str) and _INTEGER.fullmatch(value):
        cursor = int(value)
    else:
        raise _bad(f"{name} must be a seq (an integer >= -1), not {value!r}")
    if cursor < -1:
        raise _bad(f"{name} must be a seq (an integer >= -1), not {cursor}; -1 is the start")
    if cursor > MAX_SAFE_INTEGER:  # no seq is larger (docs/format.md): a typo, not a position
        raise _bad(f"{name} must be a seq (at most 2**53-1), not {cursor}")
    return cursor


def _after(params: dict[str, list[str]]) -> int:
    """The query's cursor: -1 (the start) when not given; given empty, it is no seq (400)."""
    value = _single(params, "after")
    return -1 if value is None else parse_cursor(value)


def _flag(params: dict[str, list[str]], name: str, default: bool) -> bool:
    value = _single(params, name)
    if value is None:
        return default
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    raise _bad(f"{name} must be 0 or 1, not {value!r}")


def _number(params: dict, name: str, default: float, low: float, high: float) -> float:
    value = _single(params, name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not low <= number:  # also refuses NaN
        raise _bad(f"{name} must be a number >= {low:g}, not {value!r}")
    return min(number, high)


def _filter_values(name: str, values: object) -> list[str]:
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise _bad(f"filter {name} must be a string or a non-empty list of strings")
    for value in values:
        if not is_identifier(value):
            raise _bad(
                f"filter {name} value {value!r} is not an identifier: use 1 to 128 characters "
                "of A-Z a-z 0-9 . _ : @ / + -"
            )
    return values


def scoped_filter(
    fields: dict[str, list[str]], principal: Principal, tenants: bool
) -> RecordFilter:
    """The subscriber's filter, with its tenant forced when credentials are configured.

    With tokens a principal sees its own tenant only, and so never the control records (`_log`);
    without tokens (one tenant) every record is visible, as docs/wire.md says.
    """
    if tenants:
        asked = fields.get("tenant")
        if asked is not None and principal.tenant not in asked:
            raise ApiError(403, "forbidden", f"this token reads tenant {principal.tenant!r} only")
        fields = {**fields, "tenant": [principal.tenant]}
    return RecordFilter.of(**fields)


def _query_filter(params: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: _filter_values(name, params[name]) for name in FILTER_KEYS if name in params}


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


def parse_partition(value: object, partitions: int) -> int | None:
    """A stream's `partition=N` (0 <= N < P), or None when not given. A number beyond the
    partitions is 404, as under /v1/log/partitions/: no such partition (yet) exists."""
    if value is None:
        return None
    if type(value) is int or (isinstance(value, str) and _INTEGER.fullmatch(value)):
        number = int(value)
        if 0 <= number < partitions:
            return number
        if number >= partitions:
            raise ApiError(
                404, "not_found", f"no partition {number}: partitions are 0..{partitions - 1}"
            )
    raise _bad(f"partition must be one of 0..{partitions - 1}, not {value!r}")


def stream_partition(
    given: int | None, where: RecordFilter, principal: Principal, scoped: bool, service
) -> int:
    """Which partition a stream reads (docs/wire.md, "Partitions"): the tenant's when the token or the
    filter names one; else the one given; with P = 1, partition 0."""
    partitions = service.partitions
    if partitions == 1:
        return 0 if given is None else given
    tenants = sorted(where.tenant) if where.tenant is not None else None
    if scoped:
        tenants = [principal.tenant]
    if tenants:
        found = {service.cluster.partition_of(tenant) for tenant in tenants}
        if len(found) > 1:
            raise _bad(
                f"the tenants {', '.join(tenants)} live in partitions "
                f"{', '.join(map(str, sorted(found)))}: a stream reads one partition"
            )
        (partition,) = found
        if given is not None and given != partition:
            raise _bad(f"the tenants of this stream live in partition {partition}, not {given}")
        return partition
    if given is None:
        raise _bad(
            f"this store has {partitions} partitions (0..{partitions - 1}): name the one to "
            "read with partition=N, or filter on a tenant"
        )
    return given


def parse_subscribe_frame(text: str | None) -> tuple[int, dict[str, list[str]], object]:
    """The WebSocket's first frame: `{"after": N, "filter": {...}, "partition": N}`, all
    optional: (after, filter fields, the partition as given or None, unchecked)."""
    if text is None:
        raise _bad('the first frame must be a text frame {"after": N, "filter": {...}}')
    try:
        frame = loads_strict(text)
    except InvalidPayload as exc:
        raise _bad(f"first frame: {exc}") from None
    if type(frame) is not dict:
        raise _bad('the first frame must be a JSON object {"after": N, "filter": {...}}')
    unknown = set(frame) - {"after", "filter", "partition"}
    if unknown:
        raise _bad(
            f"unknown key {sorted(unknown)[0]!r} in the first frame: use after, filter, partition"
        )
    after = frame.get("after", -1)
    if type(after) is not int:
        raise _bad(f"after must be a seq (an integer >= -1), not {after!r}")
    after = parse_cursor(after)
    given = frame.get("filter", {})
    if type(given) is not dict:
        raise _bad("filter must be an object of tenant, session, section, type")
    unknown = set(given) - set(FILTER_KEYS)
    if unknown:
        name = sorted(unknown)[0]
        raise _bad(f"unknown filter {name!r}: filter on tenant, session, section, type")
    fields = {name: _filter_values(name, values) for name, values in given.items()}
    return after, fields, frame.get("partition")


# ---- writing -----------------------------------------------------------------------------------


class _SseLive:
    """The hub's writes to an SSE subscriber: the records' events as one body chunk."""

    __slots__ = ("body", "frame")

    def __init__(self, body: BodyWriter, frame) -> None:
        self.body, self.frame = body, frame

    def ready(self) -> bool:
        return self.body.ready()

    def write(self, items: list[EncodedRecord]) -> None:
        frame = self.frame
        self.body.write(b"".join([frame(item) for item in items]))


class _WebSocketLive:
    """The hub's writes to a WebSocket subscriber: the records' frames, one transport write."""

    __slots__ = ("frames",)

    def __init__(self, frames: FrameWriter) -> None:
        self.frames = frames

    def ready(self) -> bool:
        return self.frames.ready()

    def write(self, items: list[EncodedRecord]) -> None:
        _write_frames(self.frames, items)


def _caught_up(seq: int) -> bytes:
    return b'{"control":"caught_up","seq":%d}' % seq


def _write_frames(
    frames: FrameWriter, items: list[EncodedRecord], caught_up: int | None = None
) -> None:
    """A WebSocket batch in one write: the caught-up notice, if any, then one text frame per
    record (docs/wire.md), as the hub encoded them when the connection has no extension."""
    if frames.raw:
        data = b"".join([item.ws_frame() for item in items])
        if caught_up is not None:
            data = ws_text_frame(_caught_up(caught_up)) + data
        frames.write_frames(data)
    else:
        texts = [item.line for item in items]
        if caught_up is not None:
            texts.insert(0, _caught_up(caught_up))
        frames.write_texts(texts)


# ---- the adapters ----------------------------------------------------------------------------


async def _until_disconnect(
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


class Channels:
    def __init__(self, service) -> None:
        self.service = service
        self._closing_watch: asyncio.Task | None = None

    def _begin(self, scope: Scope, allowed: tuple[str, ...]):
        """Authenticate, parse the query, build the filter and find the partition's hub:
        (principal, params, filter, hub)."""
        self._watch_closing()
        principal = self.service.principal(HTTPConnection(scope), "read")
        params = query_params(scope, (*allowed, "partition"))
        scoped = bool(self.service.settings.tokens)
        where = scoped_filter(_query_filter(params), principal, scoped)
        hub = self._hub(_single(params, "partition"), where, principal)
        return principal, params, where, hub

    def _hub(self, given: object, where: RecordFilter, principal: Principal) -> Hub:
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

    # -- traces: one record when a stream opens, one when it closes (sections/runtime/read_traces.py)

    async def _trace(self, principal: Principal, event: str, stream: dict) -> None:
        try:
            memory = self.service.memory_for(principal)
        except NotLeaderHere:
            self.service.metrics.stream_trace_skipped()
            return
        with self.service.write():
            await memory.run_async(specs.TRACE_STREAM, principal.tenant, None, (event, stream))

    @contextlib.asynccontextmanager
    async def _traced(
        self, principal: Principal, subscription: Subscription, stream: dict
    ) -> AsyncIterator[None]:
        """Trace the opening (before anything is sent: a failure refuses the stream) and the
        closing, with the last seq delivered (best effort: at shutdown the log may be closed)."""
        with subscription:
            await self._trace(principal, "opened", stream)
            try:
                yield
            finally:
                closing = {**stream, "last": subscription.delivered}
                try:
                    await asyncio.shield(self._trace(principal, "closed", closing))
                except (ApiError, LedgerError, asyncio.CancelledError) as exc:
                    log.warning("stream close not traced (%s): %s", stream["channel"], exc)

    def _watch_closing(self) -> None:
        """End every stream as soon as shutdown begins (uvicorn then waits for connections)."""
        if self._closing_watch is None and self.service.closing is not None:
            self._closing_watch = asyncio.ensure_future(self._close_on_shutdown())

    async def _close_on_shutdown(self) -> None:
        await self.service.closing.wait()
        for hub in self._hubs():
            await hub.close()

    # -- SSE

    @operation(
        "streamSse",
        "Server-Sent Events: each record as `id: <seq>` and `data: <record>`; stays open",
        description="Never ends by itself (a `: ping` comment every heartbeat_seconds while "
        "idle): resume with Last-Event-ID, which browsers send themselves. docs/wire.md.",
        query=SseQuery,
        headers=(LAST_EVENT_ID,),
        replies={
            200: Reply(
                SseEvent, "the event stream: the schema is each event's",
                media_type="text/event-stream", headers=(CACHE_CONTROL,),
            ),
            **REFUSED,
        },
        tags=("streams",),
    )  # fmt: skip
    async def sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            principal, params, where, hub = self._begin(scope, ("after", "typed"))
            after = _after(params)  # checked even when Last-Event-ID wins
            last_event_id = HTTPConnection(scope).headers.get("last-event-id")
            if last_event_id:
                after = parse_cursor(last_event_id, "Last-Event-ID")
            typed = _flag(params, "typed", False)
            subscription = hub.subscribe(after, where, "sse", client=client_address(scope))
        except (ApiError, FanoutError) as exc:
            await _error_response(exc)(scope, receive, send)
            return
        frame = EncodedRecord.sse_typed if typed else EncodedRecord.sse
        body = scope.get("extensions", {}).get(BODY_WRITER)

        async def events() -> AsyncIterator[bytes]:
            # Frames are encoded once per record by the hub; sse-starlette passes bytes through.
            # From the first wait on, the hub writes live records itself while this waits.
            if body is not None:
                subscription.writer = _SseLive(body, frame)
            async for delivery in subscription:
                if delivery.items:
                    yield b"".join([frame(item) for item in delivery.items])

        try:
            async with self._traced(principal, subscription, _stream(scope, "sse", where, after)):
                response = EventStream(
                    events(),
                    headers=dict((k.decode(), v.decode()) for k, v in STREAM_HEADERS),
                    ping=self.service.settings.heartbeat_seconds,
                    sep="\n",
                )
                await response(scope, receive, send)
        except ApiError as exc:  # the opening could not be traced: nothing was sent
            await _error_response(exc)(scope, receive, send)

    # -- JSONL

    @operation(
        "streamJsonl",
        "JSON lines: one record a line; with follow=false the stream ends at the head",
        description="An empty line (no record) every heartbeat_seconds while idle. docs/wire.md.",
        query=JsonlQuery,
        replies={
            200: Reply(
                description="one record a line", media_type="application/x-ndjson",
                headers=(CACHE_CONTROL,),
            ),
            **REFUSED,
        },
        tags=("streams",),
    )  # fmt: skip
    async def jsonl(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            principal, params, where, hub = self._begin(scope, ("after", "follow"))
            after = _after(params)
            follow = _flag(params, "follow", True)
            subscription = hub.subscribe(
                after,
                where,
                "jsonl",
                client=client_address(scope),
                stop_after=None if follow else hub.head,
            )
        except (ApiError, FanoutError) as exc:
            await _error_response(exc)(scope, receive, send)
            return

        beat = self.service.settings.heartbeat_seconds

        async def stream() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": JSONL_HEADERS})
            while (delivery := await subscription.next(beat)) is not None:
                if delivery.items:
                    body = b"\n".join([item.line for item in delivery.items]) + b"\n"
                elif delivery.caught_up is None:
                    # Idle for `beat` seconds: an empty line, which is no record, so that clients
                    # and proxies can tell a quiet stream from a dead one (docs/wire.md).
                    body = KEEP_ALIVE_LINE
                else:
                    continue
                await send({"type": "http.response.body", "body": body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            async with self._traced(principal, subscription, _stream(scope, "jsonl", where, after)):
                await _until_disconnect(receive, stream())
        except ApiError as exc:  # the opening could not be traced: nothing was sent
            await _error_response(exc)(scope, receive, send)

    # -- long-poll

    @operation(
        "pollRecords",
        "long-poll: the records after `after`, waiting up to `wait` seconds for one",
        query=LongPollQuery,
        replies={
            200: Reply(LongPollReply, headers=(CACHE_CONTROL,)),
            **REFUSED,
        },
        tags=("streams",),
    )
    async def events(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.service.settings
        try:
            principal, params, where, hub = self._begin(scope, ("after", "limit", "wait"))
            after = _after(params)
            limit = _number(params, "limit", DEFAULT_LIMIT, 1, settings.max_batch_items)
            if limit != int(limit):
                raise _bad(f"limit must be an integer, not {limit:g}")
            wait = _number(params, "wait", DEFAULT_WAIT, 0, settings.long_poll_max_wait)
            subscription = hub.subscribe(
                after, where, "longpoll", client=client_address(scope), batch=int(limit)
            )
        except (ApiError, FanoutError) as exc:
            await _error_response(exc)(scope, receive, send)
            return

        async def poll() -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            records: list[EncodedRecord] = []
            while True:
                delivery = await subscription.next(max(0.0, deadline - loop.time()))
                if delivery is None or delivery.items or delivery.caught_up is None:
                    break  # records, the end (shutdown), or the wait is over
            if delivery is not None:
                records = delivery.items
            if any(item.type != READ_TYPE for item in records):  # one trace per answer with content
                polled = {**_stream(scope, "longpoll", where, after), "last": records[-1].seq}
                await self._trace(principal, "polled", polled)
            body = b'{"records":[%s],"next":%d,"head":%d}' % (
                b",".join([item.line for item in records]),
                records[-1].seq if records else after,
                hub.head,
            )
            headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        try:
            with subscription:
                await _until_disconnect(receive, poll())
        except ApiError as exc:  # the read could not be traced: nothing was sent
            await _error_response(exc)(scope, receive, send)

    # -- WebSocket

    @undescribed("a WebSocket, which OpenAPI cannot describe: docs/wire.md has its frames")
    async def ws(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        try:
            self._watch_closing()
            principal = self.service.principal(HTTPConnection(scope), "read")
            query_params(scope, (), filters=False)  # the filter comes in the first frame
            # The client's slot is taken before the first frame says which partition it reads:
            # on the tenant's partition's hub (partition 0 for an operator) until then.
            default = (
                0 if self.service.partitions == 1 or not self.service.settings.tokens else None
            )
            slots = [self.service.hub_for(principal, default).reserve(client_address(scope))]
        except (ApiError, FanoutError) as exc:
            await _deny(scope, send, api_error(exc))
            return
        frames = scope.get("extensions", {}).get(FRAME_WRITER)
        try:
            await send({"type": "websocket.accept"})
            await self._ws_session(principal, slots, receive, send, frames)
        except OSError:
            pass  # the client went away
        finally:
            for slot in slots:
                slot.release()

    async def _ws_session(
        self,
        principal: Principal,
        slots: list[Slot],
        receive: Receive,
        send: Send,
        frames: FrameWriter | None,
    ):
        try:
            message = await asyncio.wait_for(receive(), FIRST_FRAME_SECONDS)
        except TimeoutError:
            await _close(send, WS_POLICY_VIOLATION, "no subscription frame arrived in time")
            return
        if message["type"] != "websocket.receive":
            return  # websocket.disconnect
        try:
            after, fields, given = parse_subscribe_frame(message.get("text"))
            where = scoped_filter(fields, principal, bool(self.service.settings.tokens))
            hub = self._hub(given, where, principal)
            slot = slots[-1]
            if slot.hub is not hub:  # another partition than the one reserved on
                slot.release()
                slot = hub.reserve(slot.client)
                slots.append(slot)
            subscription = hub.subscribe(after, where, "ws", slot=slot)
        except ApiError as exc:
            await _close(send, WS_POLICY_VIOLATION, exc.message)
            return
        except FanoutError as exc:
            await _close(send, refusal(exc).close_code, exc.message)
            return

        async def pump() -> None:
            if frames is not None:
                subscription.writer = _WebSocketLive(frames)
            async for delivery in subscription:
                if frames is not None:
                    await frames.drained()
                    _write_frames(frames, delivery.items, delivery.caught_up)
                else:
                    await _send_frames(send, delivery)
            await _close(send, WS_GOING_AWAY, "the server is shutting down; resume with after")

        try:
            async with self._traced(
                principal, subscription, _stream(None, "ws", where, after, slot.client)
            ):
                await _until_disconnect(receive, pump(), "websocket.disconnect")
        except ApiError as exc:  # the opening could not be traced: nothing was sent
            await _close(send, WS_TRY_AGAIN_LATER, exc.message)


def _stream(
    scope: Scope | None, channel: str, where: RecordFilter, after: int, client: str | None = None
) -> dict:
    """What a stream's traces say about it: channel, client address, filter, starting cursor."""
    fields = {k: sorted(getattr(where, k)) for k in FILTER_KEYS if getattr(where, k) is not None}
    address = client if client is not None else client_address(scope or {})
    return {"channel": channel, "client": address, "filter": fields, "after": after}


async def _send_frames(send: Send, delivery: Delivery) -> None:
    """A WebSocket batch as plain ASGI messages, one per frame (a server without FRAME_WRITER)."""
    if delivery.caught_up is not None:
        await send({"type": "websocket.send", "text": _caught_up(delivery.caught_up).decode()})
    for item in delivery.items:
        await send({"type": "websocket.send", "text": item.text()})


async def _close(send: Send, code: int, reason: str) -> None:
    # A close reason is at most 123 bytes of UTF-8.
    data = reason.encode()[:123].decode("utf-8", "ignore")
    with contextlib.suppress(OSError):
        await send({"type": "websocket.close", "code": code, "reason": data})


async def _deny(scope: Scope, send: Send, exc: ApiError) -> None:
    """Refuse a WebSocket handshake with the same 4xx JSON error as HTTP, where the server can."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await _close(send, WS_POLICY_VIOLATION, exc.message)
        return
    body = dumps({"error": {"code": exc.code, "message": exc.message}})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "websocket.http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


def routes(service) -> list[RawRoute]:
    channels = Channels(service)
    return [
        RawRoute("/v1/stream/sse", {"GET": channels.sse}),
        RawRoute("/v1/stream/ws", {"WEBSOCKET": channels.ws}, websocket=True),
        RawRoute("/v1/stream/jsonl", {"GET": channels.jsonl}),
        RawRoute("/v1/events", {"GET": channels.events}),
    ]
