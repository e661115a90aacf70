"""A response in one write: what uvicorn writes for a request within one event-loop turn goes to
the socket as one `write`, at the end of that turn.

uvicorn writes a response's status line and headers when the app sends `http.response.start` and
the body when it sends `http.response.body`: two `write` calls, so two `send` system calls and,
with TCP_NODELAY (streams/cli_serve.py), two TCP segments for every small JSON answer, and two
wake-ups of the client. The app sends both messages in the same loop turn, so holding the bytes
until the turn ends (`loop.call_soon`) joins them, with no delay a client could see: a streamed
response's head still leaves in the turn that wrote it, its later chunks in theirs.

`coalesced(protocol_class)` is the HTTP protocol class with a `TurnTransport` in front of each
connection's transport. Closing, or anything else asked of the transport, first writes what is
held, so bytes never pass each other.
"""

from __future__ import annotations

import asyncio


class TurnTransport:
    """A transport whose writes within one loop turn go out as one write at the turn's end."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self._loop.call_soon(self.flush)
        else:
            self._held.append(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def detach(self) -> asyncio.Transport:
        """The connection's own transport, once what is held has been written."""
        self.flush()
        return self._transport

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str):  # anything else: the connection's own transport, flushed
        self.flush()
        return getattr(self._transport, name)


def coalesced(protocol_class: type) -> type:
    """`protocol_class` (uvicorn's httptools protocol or a subclass) writing through a
    `TurnTransport`: the connection's every write, the protocol's own (a 400, a 408) as well as
    its requests' responses, so they stay in order. A WebSocket upgrade hands its protocol the
    connection's own transport (what was held is written first): frames are the fan-out's
    business (streams/channels.py), not this module's."""

    class CoalescingHttpProtocol(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not transport.is_closing():  # not refused at once
                self.transport = TurnTransport(transport, self.loop)

        def handle_websocket_upgrade(self) -> None:
            if isinstance(self.transport, TurnTransport):
                self.transport = self.transport.detach()
            super().handle_websocket_upgrade()

    return CoalescingHttpProtocol
