"""Server-Sent Events (docs/wire.md): each record as `id: <seq>` and `data: <record>`, through
sse-starlette, resuming from `Last-Event-ID`.

Where the server offers a `BODY_WRITER` (streams/web/extensions.py), the subscription gets a
`LiveWriter` that writes a waiting subscriber's live events as one body chunk at publish time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send

from streams.apidoc import Reply, operation
from streams.fanout.channel_models import (
    CACHE_CONTROL,
    LAST_EVENT_ID,
    REFUSED,
    SseEvent,
    SseQuery,
)
from streams.fanout.channels.context import (
    STREAM_HEADERS,
    ChannelContext,
    refusal_response,
    stream_fields,
)
from streams.fanout.channels.query import after_of, client_address, flag, parse_cursor
from streams.fanout.fanout_errors import FanoutError
from streams.fanout.hub import EncodedRecord
from streams.web.errors import ApiError
from streams.web.extensions import BODY_WRITER, BodyWriter
from streams.web.library_overrides import EventStream

Frame = Callable[[EncodedRecord], bytes]


class SseLive:
    """The hub's writes to an SSE subscriber: the records' events as one body chunk."""

    __slots__ = ("body", "frame")

    def __init__(self, body: BodyWriter, frame: Frame) -> None:
        self.body, self.frame = body, frame

    def ready(self) -> bool:
        return self.body.ready()

    def write(self, items: list[EncodedRecord]) -> None:
        frame = self.frame
        self.body.write(b"".join([frame(item) for item in items]))


class SseChannel:
    def __init__(self, context: ChannelContext) -> None:
        self.context = context

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
        context = self.context
        try:
            principal, params, where, hub = context.begin(scope, ("after", "typed"))
            after = after_of(params)  # checked even when Last-Event-ID wins
            last_event_id = HTTPConnection(scope).headers.get("last-event-id")
            if last_event_id:
                after = parse_cursor(last_event_id, "Last-Event-ID")
            typed = flag(params, "typed", False)
            subscription = hub.subscribe(after, where, "sse", client=client_address(scope))
        except (ApiError, FanoutError) as exc:
            await refusal_response(exc)(scope, receive, send)
            return
        frame: Frame = EncodedRecord.sse_typed if typed else EncodedRecord.sse
        body: BodyWriter | None = scope.get("extensions", {}).get(BODY_WRITER)

        async def events() -> AsyncIterator[bytes]:
            # Frames are encoded once per record by the hub; sse-starlette passes bytes through.
            # From the first wait on, the hub writes live records itself while this waits.
            if body is not None:
                subscription.writer = SseLive(body, frame)
            async for delivery in subscription:
                if delivery.items:
                    yield b"".join([frame(item) for item in delivery.items])

        stream = stream_fields(scope, "sse", where, after)
        try:
            async with context.traced(principal, subscription, stream):
                response = EventStream(
                    events(),
                    headers=dict((k.decode(), v.decode()) for k, v in STREAM_HEADERS),
                    ping=context.service.settings.heartbeat_seconds,
                    sep="\n",
                )
                await response(scope, receive, send)
        except ApiError as exc:  # the opening could not be traced: nothing was sent
            await refusal_response(exc)(scope, receive, send)
