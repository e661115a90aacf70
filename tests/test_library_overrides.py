"""Each override of a library's internals (streams/web/library_overrides.py) still fits the
library installed: one test per override, failing with what moved when a library changes.

They check what each override reaches for (a private method's signature, the attributes it
reads, the framing it copies), and where they can, compare the override's output with the
library's own. The behaviour itself is the subject of the channel, guard and CLI tests.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import logging
import textwrap
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import uvicorn.server
from packaging.requirements import Requirement
from packaging.version import Version
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Router
from starlette.testclient import TestClient
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol

from streams.fanout.hub import ws_text_frame
from streams.web.connections import ConnectionBudget
from streams.web.library_overrides import (
    WRITTEN_FOR,
    CycleBodyWriter,
    EventStream,
    QuietExitServer,
    TableRoutedStarlette,
    TableRouter,
    framed_websocket_protocol,
    http_protocol,
)
from streams.web.routing import RawRoute, RouteTable

ROOT = Path(__file__).resolve().parent.parent


def written_for(distribution: str) -> None:
    """The installed `distribution` is one the overrides were written for."""
    low, high = WRITTEN_FOR[distribution]
    installed = Version(version(distribution))
    assert Version(low) <= installed < Version(high), (
        f"{distribution} {installed} is installed, but streams/web/library_overrides.py was "
        f"written for {low} <= {distribution} < {high}: re-read what it overrides there"
    )


def parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)


def assigned_in_init(cls: type) -> set[str]:
    """The `self.<name>` attributes `cls.__init__` assigns."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    names = set()
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for target in targets:
            if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "self":
                names.add(target.attr)
    return names


def source(function: object) -> str:
    return inspect.getsource(function)


def missing(expected: set[str], cls: type) -> set[str]:
    return expected - assigned_in_init(cls)


def test_pyproject_pins_each_bent_library_to_the_versions_its_override_was_written_for():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        pinned[requirement.name] = requirement.specifier
    for distribution, (low, high) in WRITTEN_FOR.items():
        specifier = pinned[distribution]
        assert {str(s) for s in specifier} == {f">={low}", f"<{high}"}, (
            f"pyproject.toml pins {distribution}{specifier}; library_overrides.WRITTEN_FOR "
            f"says >={low},<{high}: make them agree"
        )
        written_for(distribution)


# ---- 1. sse-starlette: EventStream._send_with_timeout ------------------------------------------


class _Gone(OSError):
    pass


async def _send_ok(message: dict) -> None:
    sent.append(message)


async def _send_fails(message: dict) -> None:
    raise _Gone("the client went away")


sent: list[dict] = []


async def _empty():
    if False:
        yield b""


async def _state_after(send_with_timeout, send) -> tuple[bool, type | None]:
    """What a send leaves behind on a fresh response: `_send_interrupted`, and what it raised."""
    response = EventStream(_empty())
    raised = None
    try:
        await send_with_timeout(response, send, {"type": "http.response.body", "body": b"x"})
    except BaseException as exc:
        raised = type(exc)
    return response._send_interrupted, raised


def test_event_stream_sends_without_a_timeout_as_sse_starlette_does_minus_the_cancel_scope():
    written_for("sse-starlette")
    library = EventSourceResponse._send_with_timeout
    assert parameters(library) == ["self", "send", "message"], (
        "sse-starlette changed EventSourceResponse._send_with_timeout's signature"
    )
    assert missing({"send_timeout", "_send_interrupted"}, EventSourceResponse) == set(), (
        "EventSourceResponse.__init__ no longer sets send_timeout/_send_interrupted"
    )
    assert "_send_interrupted" in source(EventSourceResponse.__call__), (
        "sse-starlette's __call__ no longer reads _send_interrupted: re-read the override"
    )
    for send in (_send_ok, _send_fails):
        sent.clear()
        theirs = asyncio.run(_state_after(library, send))
        their_messages = list(sent)
        sent.clear()
        ours = asyncio.run(_state_after(EventStream._send_with_timeout, send))
        assert ours == theirs, f"{send.__name__}: the override left {ours}, the library {theirs}"
        assert sent == their_messages


# ---- 2. uvicorn: GuardedHttpProtocol's callbacks ------------------------------------------------


def test_the_guarded_http_protocol_overrides_callbacks_uvicorn_still_has_and_reads_its_state():
    written_for("uvicorn")
    protocol = http_protocol(ConnectionBudget(1024, 10, 10, 8, 996), 5.0, 5.0)
    guarded = protocol.__mro__[1]
    assert guarded.__name__ == "GuardedHttpProtocol" and guarded.__mro__[1] is HttpToolsProtocol
    callbacks = {
        "connection_made": ["self", "transport"],
        "data_received": ["self", "data"],
        "on_message_begin": ["self"],
        "on_headers_complete": ["self"],
        "on_message_complete": ["self"],
        "handle_websocket_upgrade": ["self"],
        "connection_lost": ["self", "exc"],
        "on_header": ["self", "name", "value"],
        "send_400_response": ["self", "msg"],
    }
    for name, expected in callbacks.items():
        assert parameters(getattr(HttpToolsProtocol, name)) == expected, (
            f"uvicorn's HttpToolsProtocol.{name} changed its signature"
        )
    state = {"connections", "loop", "transport", "cycle", "scope"}
    assert missing(state, HttpToolsProtocol) == set(), "HttpToolsProtocol's state moved"
    # The body deadline is armed after the cycle is made there, and the body writer needs it.
    assert "RequestResponseCycle(" in source(HttpToolsProtocol.on_headers_complete)
    # The head's bounds: uvicorn keeps the target in `url` and each header line in `headers`,
    # and answers a parser error (a refusing callback's exception) with `send_400_response`.
    assert "self.url += url" in source(HttpToolsProtocol.on_url)
    assert "self.headers.append(" in source(HttpToolsProtocol.on_header)
    assert "parse_url(self.url)" in source(HttpToolsProtocol.on_headers_complete)
    assert "send_400_response(" in source(HttpToolsProtocol.data_received)


# ---- 3. uvicorn: CycleBodyWriter --------------------------------------------------------------


class _Transport:
    """The socket end of a request cycle: records what is written."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False


def _started_cycle() -> tuple[RequestResponseCycle, _Transport]:
    transport = _Transport()
    cycle = RequestResponseCycle(
        scope={"type": "http", "method": "GET", "http_version": "1.1", "path": "/", "headers": []},
        transport=transport,
        flow=FlowControl(transport),
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )
    asyncio.run(cycle.send({"type": "http.response.start", "status": 200, "headers": []}))
    transport.written.clear()
    return cycle, transport


def test_the_body_writer_frames_a_chunk_as_uvicorn_frames_a_body_message():
    written_for("uvicorn")
    assert parameters(RequestResponseCycle.__init__) == [
        "self", "scope", "transport", "flow", "logger", "access_logger", "access_log",
        "default_headers", "message_event", "expect_100_continue", "keep_alive", "on_response",
    ], "uvicorn's RequestResponseCycle takes other arguments now"  # fmt: skip
    state = {
        "response_started",
        "response_complete",
        "chunked_encoding",
        "disconnected",
        "flow",
        "transport",
    }
    assert missing(state, RequestResponseCycle) == set(), "RequestResponseCycle's state moved"
    assert "write_paused" in assigned_in_init(FlowControl)

    for body in (b"x", b"a record\n" * 300):
        cycle, transport = _started_cycle()
        message = {"type": "http.response.body", "body": body, "more_body": True}
        asyncio.run(cycle.send(message))
        theirs = b"".join(transport.written)
        transport.written.clear()
        writer = CycleBodyWriter(cycle)
        assert writer.ready()
        writer.write(body)
        assert b"".join(transport.written) == theirs


# ---- 4. uvicorn: CoalescingHttpProtocol's transport ---------------------------------------------


def test_the_coalescing_protocol_swaps_the_transport_each_request_and_upgrade_take():
    written_for("uvicorn")
    protocol = http_protocol(ConnectionBudget(1024, 10, 10, 8, 996), 5.0, 5.0)
    assert protocol.__name__ == "CoalescingHttpProtocol"
    # Each request's cycle writes through the protocol's transport, taken when its headers are
    # in; a WebSocket upgrade hands the protocol's transport to the WebSocket protocol.
    assert "transport=self.transport" in source(HttpToolsProtocol.on_headers_complete)
    assert "connection_made(self.transport)" in source(HttpToolsProtocol.handle_websocket_upgrade)
    assert "self.transport.write(" in source(HttpToolsProtocol.send_400_response)


# ---- 5. uvicorn: FramedWebSocketProtocol and ProtocolFrameWriter --------------------------------


def test_the_frame_writer_reads_state_uvicorns_websocket_protocol_still_keeps():
    written_for("uvicorn")
    protocol = framed_websocket_protocol()
    assert protocol.__mro__[1] is WebSocketsSansIOProtocol
    assert parameters(WebSocketsSansIOProtocol.handle_connect) == ["self", "event"]
    state = {
        "conn",
        "handshake_complete",
        "close_sent",
        "disconnected",
        "initial_response",
        "writable",
        "transport",
    }
    assert missing(state, WebSocketsSansIOProtocol) == set(), "its state moved"
    # The scope the app gets is made in handle_connect, with an extensions dict to add to.
    handle_connect = source(WebSocketsSansIOProtocol.handle_connect)
    assert "self.scope" in handle_connect and '"extensions"' in handle_connect


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536])
def test_a_frame_encoded_once_is_the_frame_websockets_sends_on_a_connection_without_extensions(
    size,
):
    payload = b"r" * size
    assert ws_text_frame(payload) == Frame(Opcode.TEXT, payload).serialize(mask=False)
    conn = ServerProtocol(state=State.OPEN)
    conn.send_text(payload)
    assert b"".join(conn.data_to_send()) == ws_text_frame(payload)


# ---- 6. uvicorn: QuietExitServer.handle_exit --------------------------------------------------


def test_the_quiet_exit_server_overrides_the_signal_handler_that_would_raise_the_signal_again():
    written_for("uvicorn")
    # sse-starlette replaces uvicorn.Server.handle_exit when imported: read uvicorn's own.
    tree = ast.parse(inspect.getsource(uvicorn.server))
    (server,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Server"]
    methods = {n.name: n for n in server.body if isinstance(n, ast.FunctionDef)}
    handle_exit = methods["handle_exit"]
    assert [a.arg for a in handle_exit.args.args] == ["self", "sig", "frame"]
    assert "_captured_signals" in ast.unparse(handle_exit), (
        "uvicorn's handle_exit no longer records the signal: is the override still needed?"
    )
    assert "raise_signal" in ast.unparse(methods["capture_signals"])
    assert parameters(uvicorn.Server.__init__) == ["self", "config"]
    assert {"should_exit", "force_exit"} <= assigned_in_init(uvicorn.Server)
    assert QuietExitServer.__mro__[1] is uvicorn.Server


# ---- 7. Starlette: TableRoutedStarlette and TableRouter ------------------------------------------


def test_the_table_router_takes_the_place_of_the_router_starlette_makes_before_its_first_call():
    written_for("starlette")
    assert {"routes", "lifespan", "middleware", "exception_handlers"} <= set(
        parameters(Starlette.__init__)
    )
    assert {"router", "middleware_stack"} <= assigned_in_init(Starlette)
    assert parameters(Router.__init__)[:2] == ["self", "routes"]
    assert "lifespan" in parameters(Router.__init__)
    assert parameters(Router.app) == ["self", "scope", "receive", "send"]

    table = RouteTable([RawRoute("/ping", {"GET": _ping})])
    app = TableRoutedStarlette(table=table, middleware=[Middleware(_Passthrough)])
    # The stack is built at the first call, and ends in whatever `router` is then.
    assert app.middleware_stack is None, "Starlette builds its middleware stack eagerly now"
    innermost = app.build_middleware_stack()
    while not isinstance(innermost, Router):
        innermost = innermost.app
    assert innermost is app.router and isinstance(app.router, TableRouter)
    assert app.routes == table.routes
    assert TestClient(app).get("/ping").text == "pong"


async def _ping(scope, receive, send) -> None:
    await PlainTextResponse("pong")(scope, receive, send)


class _Passthrough:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)
