"""JSON lines (docs/wire.md): one record a line, an empty line every heartbeat while idle; with
`follow=false` the stream ends at the head it started at."""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from streams.apidoc import Reply, operation
from streams.fanout.channel_models import CACHE_CONTROL, REFUSED, JsonlQuery
from streams.fanout.channels.context import (
    STREAM_HEADERS,
    ChannelContext,
    refusal_response,
    stream_fields,
    until_disconnect,
)
from streams.fanout.channels.query import after_of, client_address, flag
from streams.fanout.fanout_errors import FanoutError
from streams.web.errors import ApiError

KEEP_ALIVE_LINE = b"\n"  # what an idle JSONL stream sends every heartbeat_seconds
JSONL_HEADERS = [(b"content-type", b"application/x-ndjson"), *STREAM_HEADERS]


class JsonlChannel:
    def __init__(self, context: ChannelContext) -> None:
        self.context = context

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
        context = self.context
        try:
            principal, params, where, hub = context.begin(scope, ("after", "follow"))
            after = after_of(params)
            follow = flag(params, "follow", True)
            subscription = hub.subscribe(
                after,
                where,
                "jsonl",
                client=client_address(scope),
                stop_after=None if follow else hub.head,
            )
        except (ApiError, FanoutError) as exc:
            await refusal_response(exc)(scope, receive, send)
            return

        beat = context.service.settings.heartbeat_seconds

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
            fields = stream_fields(scope, "jsonl", where, after)
            async with context.traced(principal, subscription, fields):
                await until_disconnect(receive, stream())
        except ApiError as exc:  # the opening could not be traced: nothing was sent
            await refusal_response(exc)(scope, receive, send)
