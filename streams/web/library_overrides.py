"""Every place ledgermem reaches into a library's internals, and nowhere else.

Each override below is there for speed or for behaviour the library offers no public way to
get. Each was written for, and checked against, the versions in `WRITTEN_FOR`, which
pyproject.toml pins as bounds; tests/test_library_overrides.py has one test per override that
fails, naming what moved, when a library changes under it. Before raising a bound, re-read the
library's code each override names and run those tests.

1. `EventStream._send_with_timeout` (sse-starlette >=3.7.1,<3.8, read on 3.7.1: a private
   method; speed). sse-starlette opens an `anyio.move_on_after(send_timeout)` cancel scope
   around every send, also when there is no timeout, where it cancels nothing and was about a
   seventh of an SSE delivery's CPU (docs/benchmarks.md, "Where the time goes"). Without a
   timeout we send directly, marking an interrupted send exactly as the library does
   (`_send_interrupted`, which its `__call__` reads; 3.5.0 had no such flag).

2. `GuardedHttpProtocol`, made by `http_protocol` (uvicorn >=0.52.1,<0.56, read on 0.54.0 and
   0.55.0: `HttpToolsProtocol`'s callbacks `connection_made`, `data_received`,
   `on_message_begin`, `on_headers_complete`, `on_message_complete`,
   `handle_websocket_upgrade`, `connection_lost`, and its `connections`, `loop`, `transport`,
   `cycle`, `scope`; behaviour). uvicorn has no deadline for a request's headers or body and
   accepts connections until the process runs out of descriptors: the connection budget and
   the two read deadlines of streams/web/connections.py live here. Nor does it bound a
   request's head (httptools buffers a header line whole, uvicorn every line): the head's
   bounds live here too (`on_header`, `send_400_response`, `url`, `headers`), fed to the parser
   a bounded piece at a time, and the authority of an absolute-form target, which uvicorn
   drops, goes into the scope (`TARGET_AUTHORITY`) for the Host check.

3. `CycleBodyWriter` (uvicorn, as 2: `RequestResponseCycle`'s `response_started`,
   `response_complete`, `chunked_encoding`, `disconnected`, `flow.write_paused`, `transport`,
   and its chunk framing `%x\\r\\n<body>\\r\\n`; speed). The fan-out writes a stream's chunks
   straight to the transport (streams/web/extensions.py `BODY_WRITER`), framed as uvicorn frames
   an `http.response.body`, instead of an ASGI message per record.

4. `CoalescingHttpProtocol`, the class `http_protocol` returns (uvicorn, as 2:
   `HttpToolsProtocol.transport`, which each request's cycle takes at `on_headers_complete`;
   speed). A `TurnTransport` (streams/web/coalesce.py) in its place holds a response's head
   until its body, so a small answer is one write.

5. `FramedWebSocketProtocol` and `ProtocolFrameWriter` (uvicorn, as 2:
   `WebSocketsSansIOProtocol`'s `handle_connect`, `scope`, `conn`, `handshake_complete`,
   `close_sent`, `disconnected`, `initial_response`, `writable`, `transport`; speed). The
   fan-out writes a batch of text frames in one transport write (`FRAME_WRITER`), frames the
   hub encoded once for every subscriber (streams/fanout/hub.py `ws_text_frame`, the bytes
   websockets' `Frame.serialize` gives a server's unmasked text frame) when no extension was
   negotiated.

6. `QuietExitServer.handle_exit` (uvicorn, as 2: `Server.handle_exit`; behaviour). On SIGTERM
   or SIGINT uvicorn records the signal and raises it again once the server has stopped, so a
   clean stop would exit by the signal rather than with 0, after the log's final checkpoint;
   and the service must end its streams before uvicorn waits for connections to close
   (`on_exit`).

7. `TableRoutedStarlette` and `TableRouter` (Starlette >=1.7,<1.11, read on 1.7.0 and 1.10.0:
   `Starlette.router`, which its constructor makes and its middleware stack, built at the first
   call, ends in; `Router.app`; speed). Starlette tries its routes one after the other;
   `TableRouter` finds the route with one `RouteTable` lookup (streams/web/routing.py) and
   otherwise takes Starlette's own path (the trailing-slash redirect, then the 404). Starlette
   takes no router from outside, so the constructor puts this one in place of its own, before
   the app can be called. `routes` stays the list of routes, as `app.routes` shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

import uvicorn
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.routing import Match, Router
from starlette.types import Lifespan, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request
from websockets.protocol import State

from streams.web.coalesce import TurnTransport
from streams.web.connections import (
    HEAD_TOO_LARGE,
    MAX_HEAD_BYTES,
    MAX_HEADER_LINES,
    REFUSED_LINGER,
    TOO_MANY,
    TOO_MANY_HEADERS,
    TOO_SLOW,
    ConnectionBudget,
)
from streams.web.extensions import BODY_WRITER, FRAME_WRITER, TARGET_AUTHORITY
from streams.web.routing import ROUTE, RouteTable

# The distributions whose internals this module reaches into: [lowest, highest) versions each
# override was checked against. pyproject.toml pins the same bounds.
WRITTEN_FOR: dict[str, tuple[str, str]] = {
    "uvicorn": ("0.52.1", "0.56"),
    "sse-starlette": ("3.7.1", "3.8"),
    "starlette": ("1.7", "1.11"),
}


# ---- 1. sse-starlette ---------------------------------------------------------------------------


class EventStream(EventSourceResponse):
    """sse-starlette's response, minus the cancel scope around a send without a timeout."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is not None:
            await super()._send_with_timeout(send, message)
            return
        try:
            await send(message)
        except BaseException:
            self._send_interrupted = True
            raise


# ---- 2, 3, 4. uvicorn's HTTP protocol: deadlines, the budget, the body writer, one write --------


def _stream_transport(transport: asyncio.BaseTransport) -> asyncio.Transport:
    """The transport an event loop gives a stream protocol, typed as asyncio documents it (a
    read-write `Transport`); uvicorn's protocols take it so."""
    return cast(asyncio.Transport, transport)


def http_protocol(
    budget: ConnectionBudget, header_timeout: float, body_timeout: float
) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol class with the budget and the two read deadlines
    (streams/web/connections.py), a `BODY_WRITER` in each GET request's scope, and a response's
    head and body in one write (streams/web/coalesce.py)."""

    class GuardedHttpProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _refused = False
        _in_head = True  # the parser is between requests or inside a request's head
        _head_bytes = 0  # bytes fed to the parser since the current head began (about)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transport = _stream_transport(transport)
            super().connection_made(transport)
            if len(self.connections) > budget.max_connections:
                self._refused = True
                transport.write(TOO_MANY)
                transport.close()
                return
            self._arm(header_timeout)

        def data_received(self, data: bytes) -> None:
            # A head is fed to the parser at most MAX_HEAD_BYTES at a time: one that has not
            # ended by then is refused before the parser (or uvicorn) holds more of it.
            while data and not self._refused:
                if not self._in_head:
                    self._feed(data)
                    return
                room = MAX_HEAD_BYTES - self._head_bytes
                if room <= 0:
                    self._refuse(HEAD_TOO_LARGE)
                    return
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
                self._feed(piece)

        def _feed(self, data: bytes) -> None:
            # `_HeadRefused` is raised by a parser callback, as httptools passes it on
            with contextlib.suppress(_HeadRefused):
                super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            if not self._refused:  # else a callback refused the head: answered already
                super().send_400_response(msg)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # a kept-alive connection's next request
                self._arm(header_timeout)

        def on_header(self, name: bytes, value: bytes) -> None:
            if len(self.headers) >= MAX_HEADER_LINES:
                self._refuse(TOO_MANY_HEADERS)
                raise _HeadRefused()  # stops the parser; uvicorn's 400 is skipped above
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            url = self.url
            if url[:1] != b"/" and url != b"*":  # absolute-form: its authority names the host
                authority = url.partition(b"://")[2].partition(b"/")[0].partition(b"?")[0]
                target: dict[str, Any] = self.scope.setdefault("extensions", {})
                target[TARGET_AUTHORITY] = authority.rpartition(b"@")[2]
            super().on_headers_complete()
            self._arm(body_timeout)
            cycle = self.cycle
            # Only streams (GET) write bodies this way; the app's task has not run yet.
            if cycle is not None and cycle.scope is self.scope and self.scope["method"] == "GET":
                extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
                extensions[BODY_WRITER] = CycleBodyWriter(cycle)

        def on_message_complete(self) -> None:
            self._disarm()
            self._in_head = True
            self._head_bytes = 0
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

        def _refuse(self, answer: bytes) -> None:
            """Answer 431 and close: the write side at once, the connection once the client
            has had `REFUSED_LINGER` seconds to read the answer (what it still sends meanwhile
            is dropped unread; closing with it unread would reset the connection, and the
            client might never see the answer)."""
            self._refused = True
            self._disarm()
            transport = self.transport
            if transport.is_closing():
                return
            transport.write(answer)
            if transport.can_write_eof():
                transport.write_eof()
                self.loop.call_later(REFUSED_LINGER, transport.close)
            else:
                transport.close()

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(TOO_SLOW)
            self.transport.close()

    class CoalescingHttpProtocol(GuardedHttpProtocol):
        """Writes through a `TurnTransport`: the connection's every write, the protocol's own
        (a 400, a 408) as well as its requests' responses, so they stay in order. A WebSocket
        upgrade hands its protocol the connection's own transport (what was held is written
        first)."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if not transport.is_closing():  # not refused at once
                turn = TurnTransport(_stream_transport(transport), self.loop)
                self.transport = turn  # type: ignore[assignment]  # why: a TurnTransport stands in for the transport, forwarding what it does not define itself

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            transport: object = self.transport
            if isinstance(transport, TurnTransport):
                transport.hold_next = True

        def handle_websocket_upgrade(self) -> None:
            transport: object = self.transport
            if isinstance(transport, TurnTransport):
                self.transport = transport.detach()
            super().handle_websocket_upgrade()

    return CoalescingHttpProtocol


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a refused head."""


class CycleBodyWriter:
    """`BodyWriter` (streams/web/extensions.py) over uvicorn's request cycle.

    It holds the cycle weakly: the scope holds the writer and the cycle the scope, and a strong
    reference would make every GET request a reference cycle, garbage only the collector frees."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = weakref.ref(cycle)

    def ready(self) -> bool:
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


# ---- 5. uvicorn's WebSocket protocol: frames in one write ---------------------------------------


class ProtocolFrameWriter:
    """`FrameWriter` (streams/web/extensions.py) over uvicorn's websockets (sans-I/O) protocol.
    It holds the protocol weakly, as `CycleBodyWriter` its cycle: the protocol holds the scope
    that holds it."""

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
        return not self.protocol.conn.extensions

    def ready(self) -> bool:
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
        """Call only when `ready()` and `raw`."""
        self.protocol.transport.write(frames)

    def write_texts(self, texts: list[bytes]) -> None:
        """Through the connection's encoder (which compresses, when negotiated); call only when
        `ready()`."""
        conn = self.protocol.conn
        for text in texts:
            conn.send_text(text)
        self.protocol.transport.write(b"".join(conn.data_to_send()))

    async def drained(self) -> None:
        """As uvicorn's `websocket.send` waits; `ClientDisconnected` (an OSError) when the
        connection is gone or closing."""
        await self.protocol.writable.wait()
        if not self.ready():
            raise ClientDisconnected()


def framed_websocket_protocol() -> type[WebSocketsSansIOProtocol]:
    """uvicorn's websockets protocol (sans-I/O), with `FRAME_WRITER` in each scope."""

    class FramedWebSocketProtocol(WebSocketsSansIOProtocol):
        def handle_connect(self, event: Request) -> None:
            super().handle_connect(event)
            scope = getattr(self, "scope", None)
            if scope is not None:  # accepted for the app (its task has not run yet)
                scope["extensions"][FRAME_WRITER] = ProtocolFrameWriter(self)

    return FramedWebSocketProtocol


# ---- 6. uvicorn's server: a clean stop exits 0 ---------------------------------------------------


class QuietExitServer(uvicorn.Server):
    """uvicorn's server whose SIGTERM/SIGINT handler calls `on_exit` first (the service ends its
    streams there, before uvicorn waits for connections) and does not raise the signal again
    once the server has stopped; a second signal forces the exit."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.on_exit is not None:
            self.on_exit()
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


# ---- 7. Starlette: one lookup to route -----------------------------------------------------------


class TableRouter(Router):
    """Starlette's router over `table`'s routes that finds the route by one lookup in it."""

    def __init__(self, table: RouteTable, lifespan: Lifespan[Any] | None = None) -> None:
        super().__init__(table.routes, lifespan=lifespan)
        self.table = table

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            match, child = self.table.matches(scope)
            if match is not Match.NONE:
                if "router" not in scope:
                    scope["router"] = self
                route = child[ROUTE]
                scope["route"] = route
                scope.update(child)
                await route.handle(scope, receive, send)
                return
        await super().app(scope, receive, send)


class TableRoutedStarlette(Starlette):
    """Starlette routing with a `TableRouter` over `table`."""

    def __init__(
        self, *, table: RouteTable, lifespan: Lifespan[Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(routes=table.routes, lifespan=lifespan, **kwargs)
        self.router = TableRouter(table, lifespan=lifespan)
