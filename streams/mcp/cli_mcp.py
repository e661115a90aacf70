"""`ledgermem mcp`: the MCP server over stdio (default) or streamable HTTP (docs/mcp.md).

Behind it, a data directory opened in this process (`--data DIR`, one tenant: `--tenant`), or a
running service (`--url URL --token T`, the token's tenant and scopes, as any REST client). Over
stdio nothing but the protocol goes to stdout; the one-line refusals go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from eventstore.errors import InvalidInput, LedgerError
from streams.server.settings import DEFAULT_TENANT

if TYPE_CHECKING:
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context

    from streams.mcp.mcp_tools import Backend


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--data",
        help="a data directory to open in this process (default ./ledgermem-data; LEDGERMEM_DATA)",
    )
    where.add_argument("--url", help="a running service's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument(
        "--token", help="the API token for --url (LEDGERMEM_TOKEN); it decides the tenant"
    )
    parser.add_argument(
        "--tenant", help=f"the tenant to act as with --data (default {DEFAULT_TENANT})"
    )
    parser.add_argument(
        "--session",
        help="the session that session-scoped saves and mem_context use (default mcp; created "
        "on first use)",
    )
    parser.add_argument(
        "--user",
        help="the user the connection acts for: a new session gets it as metadata user_id, "
        "mem_save saves for it by default, and no other user's memory is seen (docs/mcp.md)",
    )
    parser.add_argument(
        "--transport", choices=("stdio", "http"), default="stdio", help="default stdio"
    )
    parser.add_argument("--host", default="127.0.0.1", help="with --transport http (loopback)")
    parser.add_argument(
        "--port", type=int, default=8765, help="with --transport http (default 8765, 0: any)"
    )


def run(args: argparse.Namespace) -> int:
    from streams.mcp.mcp_mount import available

    if not available():
        raise LedgerError(
            "the mcp package is not installed: pip install 'ledgermem[mcp]' (docs/mcp.md)"
        )
    import anyio

    from streams.mcp.mcp_tools import checked_session, checked_user, default_session

    user = checked_user(args.user)
    session = checked_session(args.session) if args.session else default_session(user)
    token = args.token or os.environ.get("LEDGERMEM_TOKEN")
    if args.url is None and (args.token is not None):
        raise InvalidInput("--token goes with --url; a data directory has no tokens")
    if args.url is not None and args.tenant is not None:
        raise InvalidInput("--tenant goes with --data; with --url the token decides the tenant")
    if args.transport == "http" and args.host not in ("127.0.0.1", "localhost", "::1"):
        raise InvalidInput(
            "ledgermem mcp listens on loopback only and has no tokens of its own; to serve MCP "
            "beyond this machine use the service's /mcp (ledgermem serve)"
        )
    if args.url is not None:
        return anyio.run(_serve_url, args, args.url, token, session, user)
    from eventstore.identifiers import check_identifier

    tenant = check_identifier("tenant", args.tenant or DEFAULT_TENANT)
    data = args.data or os.environ.get("LEDGERMEM_DATA") or "ledgermem-data"
    return anyio.run(_serve_data, args, data, tenant, session, user)


async def _serve_data(
    args: argparse.Namespace, data: str, tenant: str, session: str, user: str | None
) -> int:
    from sections.runtime.memory import Memory
    from streams.mcp.mcp_backends import EmbeddedBackend

    memory = Memory.open(data)
    try:
        await _serve(args, EmbeddedBackend(memory, tenant), session, user)
    finally:
        memory.close()
    return 0


async def _serve_url(
    args: argparse.Namespace, url: str, token: str | None, session: str, user: str | None
) -> int:
    from streams.mcp.mcp_backends import HttpBackend

    backend = HttpBackend(url, token)
    try:
        await _serve(args, backend, session, user)
    finally:
        await backend.aclose()
    return 0


async def _serve(
    args: argparse.Namespace, backend: Backend, session: str, user: str | None
) -> None:
    from streams.mcp.mcp_server import Caller, build_server

    caller = Caller(backend, session, user)

    async def resolve(_ctx: Context, _need: str) -> Caller:
        return caller  # one caller for the process: its tenant was chosen at start

    server = build_server(resolve)
    if args.transport == "stdio":
        await server.run_stdio_async()
        return
    await _serve_http(server, args.host, args.port)


async def _serve_http(server: MCPServer, host: str, port: int) -> None:
    """Streamable HTTP at /mcp on loopback, with the SDK's Host and Origin checks; the port
    is printed on stderr once bound (`--port 0` picks a free one)."""
    import socket

    import uvicorn

    from streams.web.library_overrides import QuietExitServer

    app = server.streamable_http_app(host=host)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait from the moment the port is printed
    bound = sock.getsockname()[1]
    name = f"[{host}]" if ":" in host else host

    config = uvicorn.Config(app, log_level="warning", access_log=False)
    print(f"listening on http://{name}:{bound}/mcp", file=sys.stderr, flush=True)
    # SIGTERM/SIGINT stop serving; the signal is not raised again afterwards (uvicorn's default),
    # so the memory still closes its log and the exit code is 0.
    await QuietExitServer(config).serve(sockets=[sock])
