"""The four fan-out channels of docs/wire.md: thin adapters between the hub and a connection.

Each adapter parses and checks the request (`query`), takes a `Subscription` from the hub, and
moves its batches of pre-encoded records to the client: SSE through sse-starlette (`sse`),
WebSocket frames (`websocket`), JSONL lines (`jsonl`), or one long-poll JSON body (`longpoll`).
What they share, opening a stream, its traces and the hub's refusals, is `context`. What to send
next, and from where, is the hub's and the cursor's business (streams/fanout/hub.py,
streams/fanout/cursor.py); nothing here re-encodes a record.

With a shared store of P partitions (docs/wire.md, "Partitions") a stream reads one partition's
hub: the tenant's (its token's, or the one its `tenant` filter names), or for an operator's
unscoped stream the `partition=N` it names (`"partition": N` in the WebSocket's first frame);
every replica has every partition's hub.
"""

from __future__ import annotations

from streams.fanout.channels.context import ChannelContext
from streams.fanout.channels.jsonl import JsonlChannel
from streams.fanout.channels.longpoll import LongPollChannel
from streams.fanout.channels.sse import SseChannel
from streams.fanout.channels.websocket import WebSocketChannel
from streams.server.service import Service
from streams.web.routing import RawRoute

__all__ = ["routes"]


def routes(service: Service) -> list[RawRoute]:
    context = ChannelContext(service)
    return [
        RawRoute("/v1/stream/sse", {"GET": SseChannel(context).sse}),
        RawRoute("/v1/stream/ws", {"WEBSOCKET": WebSocketChannel(context).ws}, websocket=True),
        RawRoute("/v1/stream/jsonl", {"GET": JsonlChannel(context).jsonl}),
        RawRoute("/v1/events", {"GET": LongPollChannel(context).events}),
    ]
