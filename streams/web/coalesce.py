"""A response in one write: its head waits for its body, at the latest until the loop turn ends.

uvicorn writes a response's status line and headers when the app sends `http.response.start` and
the body when it sends `http.response.body`: two `write` calls, so two `send` system calls and,
with TCP_NODELAY (streams/server/cli_serve.py), two TCP segments for every small JSON answer, and two
wake-ups of the client. The app sends both messages in the same loop turn, so holding the head
until the next write (or until the turn ends, `loop.call_soon`) joins them with no delay a client
could see: a streamed response's head still leaves in the turn that wrote it, and its later
chunks are written as they come, untouched (the fan-out's writes pay nothing here).

The server's HTTP protocol (streams/web/library_overrides.py, `http_protocol`) puts a
`TurnTransport` in front of each connection's transport and tells it when a request's headers are
in. Closing, or anything else asked of the transport, first writes what is held, so bytes never
pass each other.
"""

from __future__ import annotations

import asyncio
from typing import Any


class TurnTransport:
    """A transport that holds a response's head (the first write after a request's headers came
    in) until the next write joins it, or at the latest until the end of the loop turn."""

    __slots__ = ("_transport", "_loop", "_held", "hold_next")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self.hold_next = False  # set by the protocol when a request's headers are in

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:  # the body after its head: one write
            self._held = None
            self._transport.write(held + data)
        elif self.hold_next:
            self.hold_next = False
            self._held = data
            self._loop.call_soon(self.flush)
        else:  # a stream's later chunks, and anything else: as they come
            self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def detach(self) -> asyncio.Transport:
        """The connection's own transport, once what is held has been written."""
        self.flush()
        return self._transport

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(
        self, name: str
    ) -> Any:  # anything else: the connection's own transport, flushed
        self.flush()
        return getattr(self._transport, name)
