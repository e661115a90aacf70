"""`ledgermem serve [--data DIR] [--host H] [--port P] [--config FILE]`: run the service.

Binds the socket itself so that `--port 0` works and the printed URL has the real port, then
runs uvicorn on it. SIGTERM and SIGINT shut down gracefully (streams/server/service.py).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from eventstore.errors import LedgerError

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from streams.cluster import Cluster
    from streams.server.service import Service

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


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
        "--allowed-host",
        action="append",
        help="a name of this service that Host may carry, besides loopback and --host "
        "(repeatable; LEDGERMEM_ALLOWED_HOSTS, comma-separated)",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        help="an origin whose pages may call this service, answered with CORS "
        "(repeatable; LEDGERMEM_ALLOWED_ORIGINS, comma-separated)",
    )
    parser.add_argument(
        "--seg-bits", type=int, help="log segment size as a power of two (new logs only)"
    )
    parser.add_argument(
        "--store",
        help="a shared store's postgresql:// or redis:// URL (made by `ledgermem init-store`); without it, "
        "the file log in the data directory (LEDGERMEM_STORE)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        help="a partition leader's lease on the shared store (default 5; LEDGERMEM_LEASE_SECONDS)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=os.environ.get("LEDGERMEM_LOG_LEVEL", "warning"),
        help="uvicorn's log level (default warning; LEDGERMEM_LOG_LEVEL); at info or debug each "
        "request is logged on stderr as one access line",
    )
    parser.add_argument(
        "--advertise-url",
        help="the URL other replicas forward to (default http://<host>:<bound port>; "
        "LEDGERMEM_ADVERTISE_URL)",
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from streams.server.service import Service
    from streams.server.settings import load_settings
    from streams.server.telemetry import Telemetry
    from streams.web.app import create_app
    from streams.web.connections import ConnectionBudget
    from streams.web.library_overrides import (
        QuietExitServer,
        framed_websocket_protocol,
        http_protocol,
    )

    if args.log_level not in LOG_LEVELS:  # a bad LEDGERMEM_LOG_LEVEL; argparse checks the flag
        return _refuse(f"log level {args.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
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
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
            store=args.store,
            lease_seconds=args.lease_seconds,
            advertise_url=args.advertise_url,
        )
        budget = ConnectionBudget.from_rlimit(settings.fd_reserve)
        sock = _listen(settings.host, settings.port, budget.backlog)
    except (LedgerError, OSError) as exc:
        return _refuse(startup_problem(exc, args.data or "the data directory"))
    port = sock.getsockname()[1]
    host = f"[{settings.host}]" if sock.family == socket.AF_INET6 else settings.host
    url = f"http://{host}:{port}"

    def announce(service: Service) -> None:
        if service.cluster is not None:
            announce_replica(service.cluster, url)
            return
        memory = service.own_memory
        key = memory.key
        assert key is not None, "a memory opened on its data directory holds its key"
        created = " (created now, mode 0600)" if key.created else ""
        if settings.unsafe_no_fsync:
            print(
                "WARNING: --unsafe-no-fsync: writes are acknowledged before they are durable",
                flush=True,
            )
        print(f"data directory  {memory.data.root}", flush=True)
        print(f"signing key     {key.path}{created}", flush=True)
        print(f"vkey            {key.key.vkey}", flush=True)
        print(f"connections     {budget.describe()}", flush=True)
        print(f"listening on {url}", flush=True)

    try:
        telemetry = Telemetry.from_env()  # None unless OTEL_* ask for traces
    except ValueError as exc:
        return _refuse(str(exc))
    service = Service(settings, announce, url)
    app: ASGIApp = create_app(settings, service)
    if telemetry is not None:
        service.tracing = telemetry.tracing
        app = telemetry.instrument(app)

    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        # Below info uvicorn never prints an access line, yet with access_log on it still
        # formats each request's client and quoted path for one (a few microseconds apiece).
        access_log=args.log_level in ("info", "debug", "trace"),
        log_config=_log_config(),
        ws_ping_interval=settings.heartbeat_seconds,
        ws_ping_timeout=settings.heartbeat_seconds * 2,
        timeout_graceful_shutdown=10,
        # Read deadlines and the connection budget (streams/web/connections.py); a response's
        # head and body leave in one write (streams/web/coalesce.py).
        http=http_protocol(budget, settings.header_timeout, settings.body_timeout),
        ws=framed_websocket_protocol(),
        backlog=budget.backlog,
        # The service starts and stops around uvicorn (below), not in a lifespan: a failed
        # start-up then reaches us as the exception it is, not as uvicorn's traceback and exit 3.
        lifespan="off",
    )
    # End the streams before uvicorn waits for connections to close; a clean stop exits with 0
    # (streams/web/library_overrides.py).
    server = QuietExitServer(config, on_exit=service.begin_shutdown_threadsafe)

    phase = ["start"]

    async def serve() -> None:
        await service.startup()
        tune_gc()
        phase[0] = "serve"
        try:
            await server.serve(sockets=[sock])
        finally:
            phase[0] = "stop"
            await service.shutdown()
            if telemetry is not None:
                await asyncio.to_thread(telemetry.shutdown)  # the last spans exported

    try:
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(serve())
    except (LedgerError, OSError) as exc:
        if phase[0] == "start":
            return _refuse(startup_problem(exc, settings.data, settings.store))
        what = "shutdown failed" if phase[0] == "stop" else "stopped"
        return _refuse(f"{what}: {exc}; run `ledgermem verify` on {settings.data}", 1)
    problem = final_checkpoint_problem(service)
    if problem:
        return _refuse(problem, 1)
    return 0


# Generation 0 collects after this many net new container objects (the interpreter's default is
# 700: a collection every few requests); generations 1 and 2 after 20 and 10 of the one below.
GC_THRESHOLD = (50_000, 20, 10)
DEFAULT_GC_THRESHOLD = (700, 10, 10)


def tune_gc() -> None:
    """Once start-up is over: collect, then `gc.freeze()` what is left (the rebuilt memory, the
    modules, the route tables), so later collections, generation 2 above all, no longer walk it;
    and raise the thresholds from the interpreter's default so collections come less often.
    A process that set its own thresholds (an embedding, a benchmark's experiment) keeps them.
    Garbage is still collected: only objects alive at start-up are exempt, and a cycle made later
    waits at most GC_THRESHOLD[0] allocations for its first collection."""
    gc.collect()
    gc.freeze()
    if gc.get_threshold() == DEFAULT_GC_THRESHOLD:
        gc.set_threshold(*GC_THRESHOLD)


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only then, and
    # without it every response on a kept-alive connection waits ~40 ms for delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)  # connections queue from now on, even before uvicorn accepts them
    return sock


def _log_config() -> dict[str, Any]:
    """uvicorn's logging, with the access lines on stderr beside its other lines: stdout holds
    only what start-up announces (the URL last), which scripts and tests read."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def _refuse(message: str, code: int = 2) -> int:
    print(f"ledgermem serve: {message}", file=sys.stderr)
    return code


def announce_replica(cluster: Cluster, url: str) -> None:
    """What a replica of a shared store prints once it serves (tests read the last line)."""
    from eventstore.shared import redact_url

    print(f"store           {redact_url(cluster.store_url)}", flush=True)
    print(f"replica         {cluster.replica_id} (advertised as {cluster.url})", flush=True)
    print(f"partitions      {cluster.partitions}", flush=True)
    print(f"signing key     {cluster.key.path}", flush=True)
    for partition, vkey in enumerate(cluster.info.vkeys):
        print(f"vkey p{partition}         {vkey}", flush=True)
    print(f"listening on {url}", flush=True)


def startup_problem(exc: BaseException, data: str, store: str | None = None) -> str:
    """One line: what is wrong and what to do about it."""
    from eventstore.errors import BadKey, LockHeld
    from sections.errors import ConfigError

    if store and isinstance(exc, LockHeld):
        # Two replicas on one data directory would both feed its mirrors (every line twice).
        return (
            f"the data directory {data} is in use by another replica ({exc.holder}); give each "
            "replica its own --data, with a copy of the keys/ directory of the init-store one"
        )
    if store and isinstance(exc, BadKey):
        # The message names both vkeys and says to copy keys/ from the init-store directory.
        return " ".join(str(exc).split())

    if isinstance(exc, LockHeld):
        return str(exc)  # names the holder and says what to do
    if isinstance(exc, ConfigError):
        return f"{exc}; fix the sections config given with --memory-config (docs/sections.md)"
    if isinstance(exc, BadKey):
        return (
            f"{exc}; restore {data}/keys from a backup, or use another --data for a new log "
            "with a new key"
        )
    if isinstance(exc, PermissionError | IsADirectoryError | NotADirectoryError) or (
        isinstance(exc, OSError) and exc.errno == errno.EROFS
    ):
        where = exc.filename or data
        return (
            f"cannot write {where}: {exc.strerror}; make {data} a writable directory for this "
            "user, or choose another with --data"
        )
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"{exc.strerror}; stop what listens there, or choose another --port"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc} ({exc.filename or data})"
    return str(exc)


def final_checkpoint_problem(service: Service) -> str | None:
    """Whether the shutdown left a signed checkpoint covering every record, `log.close` included.

    The writer stops quietly when the final checkpoint cannot be written; the process must then
    not exit 0 as if the log were closed cleanly.
    """
    from eventstore.checkpoint import parse_checkpoint
    from eventstore.layout import CHECKPOINT

    memory = service.memory
    if memory is None or memory.key is None:
        return None
    path = memory.data.log / CHECKPOINT
    try:
        checkpoint = parse_checkpoint(path.read_text("utf-8"), memory.key.key.vkey)
        covered = checkpoint.size
    except (OSError, LedgerError, ValueError) as exc:
        return f"the final checkpoint could not be read back ({exc}); run `ledgermem verify`"
    if covered < memory.writer.next_seq:
        return (
            f"the final checkpoint was not written: {path} covers {covered} of "
            f"{memory.writer.next_seq} records; run `ledgermem verify` on {memory.data.root} "
            "(its records are intact, the next start writes a new checkpoint)"
        )
    return None
