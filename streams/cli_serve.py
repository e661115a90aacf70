"""`ledgermem serve [--data DIR] [--host H] [--port P] [--config FILE]`: run the service.

Binds the socket itself so that `--port 0` works and the printed URL has the real port, then
runs uvicorn on it. SIGTERM and SIGINT shut down gracefully (streams/service.py).
"""

from __future__ import annotations

import argparse
import socket
import sys

from eventstore.errors import LedgerError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="data directory (default ./ledgermem-data; LEDGERMEM_DATA)")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; LEDGERMEM_HOST)")
    parser.add_argument(
        "--port", type=int, help="port (default 8000, 0 for any free one; LEDGERMEM_PORT)"
    )
    parser.add_argument("--config", help="settings TOML file (LEDGERMEM_CONFIG)")
    parser.add_argument("--memory-config", help="sections config TOML file (docs/sections.md)")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        default=None,
        help="listen beyond loopback without API tokens",
    )
    parser.add_argument(
        "--unsafe-no-fsync",
        action="store_true",
        default=None,
        help="acknowledge writes before fsync: tests and benchmarks only, a crash loses acknowledged writes",
    )
    parser.add_argument(
        "--seg-bits", type=int, help="log segment size as a power of two (new logs only)"
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .service import Service
    from .settings import load_settings

    try:
        settings = load_settings(
            args.config,
            data=args.data,
            host=args.host,
            port=args.port,
            allow_remote=args.allow_remote,
            unsafe_no_fsync=args.unsafe_no_fsync,
            memory_config=args.memory_config,
            seg_bits=args.seg_bits,
        )
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only then, and
        # without it every response on a kept-alive connection waits ~40 ms for delayed ACKs.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.port))
        sock.listen(2048)  # connections queue from now on, even before uvicorn accepts them
    except (LedgerError, OSError) as exc:
        print(f"ledgermem serve: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    host = f"[{settings.host}]" if family == socket.AF_INET6 else settings.host
    url = f"http://{host}:{port}"

    def announce(service: Service) -> None:
        key = service.memory.key
        created = " (created now, mode 0600)" if key.created else ""
        if settings.unsafe_no_fsync:
            print(
                "WARNING: --unsafe-no-fsync: writes are acknowledged before they are durable",
                flush=True,
            )
        print(f"data directory  {service.memory.data.root}", flush=True)
        print(f"signing key     {key.path}{created}", flush=True)
        print(f"vkey            {key.key.vkey}", flush=True)
        print(f"listening on {url}", flush=True)

    service = Service(settings, announce)
    app = create_app(settings, service)

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # End the streams before uvicorn waits for connections to close. The signal is not
            # handed back after shutdown (uvicorn's default), so a clean stop exits with 0.
            service.begin_shutdown_threadsafe()
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True

    config = uvicorn.Config(
        app,
        log_level="warning",
        ws_ping_interval=settings.heartbeat_seconds,
        ws_ping_timeout=settings.heartbeat_seconds * 2,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    server = Server(config)
    try:
        server.run(sockets=[sock])
    except LedgerError as exc:
        print(f"ledgermem serve: {exc}", file=sys.stderr)
        return 2
    return 0
