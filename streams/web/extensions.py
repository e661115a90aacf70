"""The ASGI extensions our server offers a stream's connection (docs/fanout.md, "Writing").

A connection served by `ledgermem serve` carries a writer in its scope's `extensions`, under one
of these keys, through which the fan-out writes bytes the hub encoded once for every subscriber,
several records in one `transport.write`, instead of an ASGI message per record:

- `BODY_WRITER` (GET requests): chunks of a chunked response body the app has started;
- `FRAME_WRITER` (WebSockets): text frames, pre-encoded when the connection negotiated no
  extension, otherwise each through the connection's own encoder (permessage-deflate).

These are the interfaces the channels (streams/fanout/) write through; the server's side, which
reaches into uvicorn to provide them, is streams/web/library_overrides.py. Under another ASGI
server the keys are absent and the channels send plain ASGI messages.
"""

from __future__ import annotations

from typing import Protocol

BODY_WRITER = "ledgermem.http.body_writer"
FRAME_WRITER = "ledgermem.websocket.frame_writer"
# Not a writer: the authority (`host[:port]`, bytes) of a request sent in absolute form
# (`GET http://host/path HTTP/1.1`), which names the host in place of `Host` (RFC 9112, 3.2.2);
# the guard (streams/web/guards.py) checks it. uvicorn keeps only the target's path.
TARGET_AUTHORITY = "ledgermem.http.target_authority"


class BodyWriter(Protocol):
    """Writes chunks of a started chunked response body straight to the connection."""

    def ready(self) -> bool:
        """True when a chunk written now goes out in order without waiting: the app has sent
        the response start (chunked), not the end, and the connection is open and not paused."""
        ...

    def write(self, body: bytes) -> None:
        """One chunk of the body (call only when `ready()`)."""
        ...


class FrameWriter(Protocol):
    """Writes text frames to an accepted WebSocket, several in one transport write."""

    @property
    def raw(self) -> bool:
        """No extension negotiated: a server's text frame is the same bytes on every
        connection, so frames encoded once may be written as they are (`write_frames`)."""
        ...

    def ready(self) -> bool:
        """True when frames written now go out without waiting (open, not paused)."""
        ...

    def write_frames(self, frames: bytes) -> None:
        """Text frames already encoded for a connection without extensions, in one write."""
        ...

    def write_texts(self, texts: list[bytes]) -> None:
        """Each of `texts` (UTF-8) as a text frame through the connection's encoder."""
        ...

    async def drained(self) -> None:
        """Wait until the write buffer is below its mark; an OSError once the connection is
        gone or closing."""
        ...
