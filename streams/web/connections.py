"""Connections that cannot pin the service's file descriptors: read deadlines and a budget.

uvicorn reads a request's headers before the app sees anything, with no time limit, and accepts
connections until the process runs out of file descriptors. A client that dribbles header bytes
holds its descriptor for ever, and enough of them make the *writer* the one that gets EMFILE when
it opens its next segment or checkpoint file: a failed write, which stops the memory. So:

- `guarded_protocol(budget, header_timeout, body_timeout)` is uvicorn's httptools protocol with
  two deadlines per request: the headers must be in within `header_timeout` of the connection (or,
  on a kept-alive one, of the request's first byte), the body within `body_timeout` of the
  headers. A late client gets 408 and its connection is closed. Only the request is timed: a
  response may stream for as long as it likes (SSE, JSONL, long-poll), and a WebSocket leaves the
  HTTP protocol at its upgrade; such streams are bounded by `max_subscribers_per_client` instead.
- `ConnectionBudget` derives the most connections from `RLIMIT_NOFILE`: the soft limit (raised
  to the hard one first) less the descriptors already open, less `fd_reserve` kept for the log's
  files and the reader threads, less the listen backlog (connections the event loop may accept in
  one go before it can refuse any). Past it a new connection gets 503 and is closed at once.

Both protocols also give the fan-out a way to write to a stream's connection without an ASGI
message per record (docs/fanout.md, "Writing"): an ASGI extension in the scope, whose writer says
whether a write would go out now (open, below the transport's high-water mark) and writes bytes
the hub encoded once for every subscriber, several records in one `transport.write`:

- `BODY_WRITER` (GET requests): a chunk of a chunked response body that the app has started;
- `FRAME_WRITER` (WebSockets, `framed_websocket_protocol`): text frames, pre-encoded when the
  connection negotiated no extension, otherwise each through the connection's own encoder
  (permessage-deflate); and `send()`, which waits for the write buffer to drain as uvicorn's
  `websocket.send` does.
"""

from __future__ import annotations

import os
import resource
import weakref
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from eventstore.errors import InvalidInput

MIN_CONNECTIONS = 16
MAX_BACKLOG = 2048
BODY_WRITER = "ledgermem.http.body_writer"
FRAME_WRITER = "ledgermem.websocket.frame_writer"


@dataclass(frozen=True)
class ConnectionBudget:
    fd_limit: int  # RLIMIT_NOFILE's soft limit, after raising it to the hard one
    in_use: int  # descriptors open at start-up
    reserve: int  # kept for the log and the reader threads
    backlog: int  # the listen backlog
    max_connections: int

    @classmethod
    def from_rlimit(cls, reserve: int) -> ConnectionBudget:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass  # keep the soft limit we were given
        in_use = _open_descriptors()
        free = soft - in_use - reserve
        backlog = max(8, min(MAX_BACKLOG, free // 8))
        budget = cls(soft, in_use, reserve, backlog, free - backlog)
        if budget.max_connections < MIN_CONNECTIONS:
            raise InvalidInput(
                f"RLIMIT_NOFILE is {soft} with {in_use} descriptors open and fd_reserve {reserve}: "
                f"room for {budget.max_connections} connections, fewer than {MIN_CONNECTIONS}; "
                "raise it (ulimit -n 4096) or lower fd_reserve"
            )
        return budget

    def describe(self) -> str:
        return (
            f"at most {self.max_connections} (RLIMIT_NOFILE {self.fd_limit}: {self.in_use} open, "
            f"{self.reserve} kept for the log, backlog {self.backlog})"
        )


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: count what is open the slow way
        count = 0
        for fd in range(min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)):
            try:
                os.fstat(fd)
                count += 1
            except OSError:
                pass
        return count


def _plain_response(status: bytes, message: bytes) -> bytes:
    return b"".join(
        [
            b"HTTP/1.1 " + status + b"\r\n",
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(message),
            b"connection: close\r\n\r\n",
            message,
        ]
    )


TOO_MANY = _plain_response(b"503 Service Unavailable", b"too many connections; retry later\n")
TOO_SLOW = _plain_response(b"408 Request Timeout", b"the request took too long to arrive\n")


def guarded_protocol(
    budget: ConnectionBudget, header_timeout: float, body_timeout: float
) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol class with the budget and the two read deadlines."""

    class GuardedHttpProtocol(HttpToolsProtocol):
        _deadline = None
        _refused = False

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > budget.max_connections:
                self._refused = True
                transport.write(TOO_MANY)
                transport.close()
                return
            self._arm(header_timeout)

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # a kept-alive connection's next request
                self._arm(header_timeout)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._arm(body_timeout)
            cycle = self.cycle
            # Only streams (GET) write bodies this way; the app's task has not run yet.
            if cycle is not None and cycle.scope is self.scope and self.scope["method"] == "GET":
                self.scope.setdefault("extensions", {})[BODY_WRITER] = BodyWriter(cycle)

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._disarm()  # the WebSocket protocol owns the connection from here
            super().handle_websocket_upgrade()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(TOO_SLOW)
            self.transport.close()

    return GuardedHttpProtocol


class BodyWriter:
    """Writes chunks of a started chunked response body straight to the transport.

    It holds its request cycle weakly: the scope holds the writer and the cycle the scope, and
    a strong reference would make every GET request a reference cycle, garbage that only the
    collector frees."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = weakref.ref(cycle)

    def ready(self) -> bool:
        """True when a chunk written now goes out in order without waiting: the app has sent
        the response start (chunked), not the end, and the transport is open and not paused."""
        cycle = self._cycle()
        return (
            cycle is not None
            and cycle.response_started
            and not cycle.response_complete
            and cycle.chunked_encoding is True
            and not cycle.disconnected
            and not cycle.flow.write_paused
            and not cycle.transport.is_closing()
        )

    def write(self, body: bytes) -> None:
        """One chunk, framed as uvicorn frames `http.response.body` (call only when ready)."""
        cycle = self._cycle()
        if body and cycle is not None:
            cycle.transport.write(b"%x\r\n%s\r\n" % (len(body), body))


class FrameWriter:
    """Writes text frames to an accepted WebSocket, several in one transport write. It holds
    the protocol weakly, as `BodyWriter` its cycle: the protocol holds the scope that holds it."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketsSansIOProtocol) -> None:
        self._protocol = weakref.ref(protocol)

    @property
    def protocol(self) -> WebSocketsSansIOProtocol:
        protocol = self._protocol()
        if protocol is None:  # the connection is gone and so is its app
            raise ClientDisconnected()
        return protocol

    @property
    def raw(self) -> bool:
        """No extension negotiated: a server's text frame is the same bytes on every
        connection, so frames encoded once may be written as they are."""
        return not self.protocol.conn.extensions

    def ready(self) -> bool:
        """True when frames written now go out without waiting (open, not paused)."""
        p = self._protocol()
        return (
            p is not None
            and p.handshake_complete
            and not p.close_sent
            and not p.disconnected
            and p.initial_response is None
            and p.writable.is_set()
            and p.conn.state is State.OPEN
            and not p.transport.is_closing()
        )

    def write_frames(self, frames: bytes) -> None:
        """Text frames already encoded for a connection without extensions (`raw`), in one
        transport write. Call only when `ready()`."""
        self.protocol.transport.write(frames)

    def write_texts(self, texts: list[bytes]) -> None:
        """Each of `texts` (UTF-8) as a text frame through the connection's encoder (which
        compresses, when negotiated), in one transport write. Call only when `ready()`."""
        conn = self.protocol.conn
        for text in texts:
            conn.send_text(text)
        self.protocol.transport.write(b"".join(conn.data_to_send()))

    async def drained(self) -> None:
        """Wait, as uvicorn's `websocket.send` does, until the write buffer is below its mark;
        `ClientDisconnected` (an OSError) when the connection is gone or closing."""
        await self.protocol.writable.wait()
        if not self.ready():
            raise ClientDisconnected()


def framed_websocket_protocol() -> type[WebSocketsSansIOProtocol]:
    """uvicorn's websockets protocol (sans-I/O), with `FRAME_WRITER` in each scope."""

    class FramedWebSocketProtocol(WebSocketsSansIOProtocol):
        def handle_connect(self, event) -> None:  # type: ignore[no-untyped-def]
            super().handle_connect(event)
            scope = getattr(self, "scope", None)
            if scope is not None:  # accepted for the app (its task has not run yet)
                scope["extensions"][FRAME_WRITER] = FrameWriter(self)

    return FramedWebSocketProtocol
