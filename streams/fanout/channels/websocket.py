"""WebSocket (docs/wire.md): the subscription comes in the first frame, then each record as a
text frame, a `caught_up` control frame when the log is read up to the head.

Where the server offers a `FRAME_WRITER` (streams/web/extensions.py), a batch goes out as one
transport write of frames the hub encoded once per record, and the subscription gets a
`LiveWriter` that writes a waiting subscriber's live frames at publish time. Without one
(another ASGI server) each frame is a plain ASGI message.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send

from streams.apidoc import undescribed
from streams.fanout.channels.context import (
    WS_GOING_AWAY,
    WS_POLICY_VIOLATION,
    WS_TRY_AGAIN_LATER,
    ChannelContext,
    api_error,
    refusal,
    stream_fields,
    until_disconnect,
)
from streams.fanout.channels.query import (
    client_address,
    parse_subscribe_frame,
    query_params,
    scoped_filter,
)
from streams.fanout.fanout_errors import FanoutError
from streams.fanout.hub import Delivery, EncodedRecord, Slot, ws_text_frame
from streams.web.auth import Principal
from streams.web.errors import ApiError
from streams.web.extensions import FRAME_WRITER, FrameWriter
from streams.web.responses import dumps

FIRST_FRAME_SECONDS = 30.0


class WebSocketLive:
    """The hub's writes to a WebSocket subscriber: the records' frames, one transport write."""

    __slots__ = ("frames",)

    def __init__(self, frames: FrameWriter) -> None:
        self.frames = frames

    def ready(self) -> bool:
        return self.frames.ready()

    def write(self, items: list[EncodedRecord]) -> None:
        write_frames(self.frames, items)


def caught_up_notice(seq: int) -> bytes:
    return b'{"control":"caught_up","seq":%d}' % seq


def write_frames(
    frames: FrameWriter, items: list[EncodedRecord], caught_up: int | None = None
) -> None:
    """A WebSocket batch in one write: the caught-up notice, if any, then one text frame per
    record (docs/wire.md), as the hub encoded them when the connection has no extension."""
    if frames.raw:
        data = b"".join([item.ws_frame() for item in items])
        if caught_up is not None:
            data = ws_text_frame(caught_up_notice(caught_up)) + data
        frames.write_frames(data)
    else:
        texts = [item.line for item in items]
        if caught_up is not None:
            texts.insert(0, caught_up_notice(caught_up))
        frames.write_texts(texts)


class WebSocketChannel:
    def __init__(self, context: ChannelContext) -> None:
        self.context = context

    @undescribed("a WebSocket, which OpenAPI cannot describe: docs/wire.md has its frames")
    async def ws(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        service = self.context.service
        try:
            self.context.watch_closing()
            principal = service.principal(HTTPConnection(scope), "read")
            query_params(scope, (), filters=False)  # the filter comes in the first frame
            # The client's slot is taken before the first frame says which partition it reads:
            # on the tenant's partition's hub (partition 0 for an operator) until then.
            default = 0 if service.partitions == 1 or not service.settings.tokens else None
            slots = [service.hub_for(principal, default).reserve(client_address(scope))]
        except (ApiError, FanoutError) as exc:
            await deny(scope, send, api_error(exc))
            return
        frames: FrameWriter | None = scope.get("extensions", {}).get(FRAME_WRITER)
        try:
            await send({"type": "websocket.accept"})
            await self._session(principal, slots, receive, send, frames)
        except OSError:
            pass  # the client went away
        finally:
            for slot in slots:
                slot.release()

    async def _session(
        self,
        principal: Principal,
        slots: list[Slot],
        receive: Receive,
        send: Send,
        frames: FrameWriter | None,
    ) -> None:
        context = self.context
        try:
            message = await asyncio.wait_for(receive(), FIRST_FRAME_SECONDS)
        except TimeoutError:
            await close(send, WS_POLICY_VIOLATION, "no subscription frame arrived in time")
            return
        if message["type"] != "websocket.receive":
            return  # websocket.disconnect
        try:
            after, fields, given = parse_subscribe_frame(message.get("text"))
            where = scoped_filter(fields, principal, bool(context.service.settings.tokens))
            hub = context.hub(given, where, principal)
            slot = slots[-1]
            if slot.hub is not hub:  # another partition than the one reserved on
                slot.release()
                slot = hub.reserve(slot.client)
                slots.append(slot)
            subscription = hub.subscribe(after, where, "ws", slot=slot)
        except ApiError as exc:
            await close(send, WS_POLICY_VIOLATION, exc.message)
            return
        except FanoutError as exc:
            await close(send, refusal(exc).close_code, exc.message)
            return

        async def pump() -> None:
            if frames is not None:
                subscription.writer = WebSocketLive(frames)
            async for delivery in subscription:
                if frames is not None:
                    await frames.drained()
                    write_frames(frames, delivery.items, delivery.caught_up)
                else:
                    await send_frames(send, delivery)
            await close(send, WS_GOING_AWAY, "the server is shutting down; resume with after")

        try:
            stream = stream_fields(None, "ws", where, after, slot.client)
            async with context.traced(principal, subscription, stream):
                await until_disconnect(receive, pump(), "websocket.disconnect")
        except ApiError as exc:  # the opening could not be traced: nothing was sent
            await close(send, WS_TRY_AGAIN_LATER, exc.message)


async def send_frames(send: Send, delivery: Delivery) -> None:
    """A WebSocket batch as plain ASGI messages, one per frame (a server without FRAME_WRITER)."""
    if delivery.caught_up is not None:
        notice = caught_up_notice(delivery.caught_up).decode()
        await send({"type": "websocket.send", "text": notice})
    for item in delivery.items:
        await send({"type": "websocket.send", "text": item.text()})


async def close(send: Send, code: int, reason: str) -> None:
    # A close reason is at most 123 bytes of UTF-8.
    data = reason.encode()[:123].decode("utf-8", "ignore")
    with contextlib.suppress(OSError):
        await send({"type": "websocket.close", "code": code, "reason": data})


async def deny(scope: Scope, send: Send, exc: ApiError) -> None:
    """Refuse a WebSocket handshake with the same 4xx JSON error as HTTP, where the server can."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await close(send, WS_POLICY_VIOLATION, exc.message)
        return
    body = dumps({"error": {"code": exc.code, "message": exc.message}})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "websocket.http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
