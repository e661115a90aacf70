"""The HTTP layer's own CPU per item POST, in one process, without sockets or uvicorn.

Prints one JSON object. The app of `streams/web/app.py` (`create_app`, the service started as
`ledgermem serve` starts it: real files, real fdatasync) is called as an ASGI callable by 32
asyncio tasks, each posting one item after the other to its own session; then the same adds go
straight to `Memory.run_async` (the command the route runs), in the same process, interleaved
round by round (app, direct, direct, app, ...). The event-loop thread's CPU per request
(`time.thread_time`) is measured for both; their difference is what the HTTP layer (routing,
middleware, auth, body, JSON, response) adds to a write, apart from uvicorn's protocol and the
socket. Thread CPU is what to read on a shared machine: wall rates move with the neighbours.

Usage: PYTHONPATH=<tree> .venv/bin/python bench/http_app.py [--requests N] [--rounds R]
                                                           [--batch ITEMS]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

CONNECTIONS = 32
TEXT = (
    "the user prefers short answers with code examples in python and wants the assistant to "
    "remember project names deadlines review notes and the style guide for every reply about "
    "the ledger format merkle proofs checkpoints replay fan-out latency budget tests release"
)


async def measure(mode: str, requests: int, batch: int, root: Path) -> dict:
    from sections.specs import command_specs as specs
    from streams.server.service import Service
    from streams.server.settings import Settings
    from streams.web.app import create_app

    data = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=root))
    settings = Settings(data=str(data))
    service = Service(settings)
    app = create_app(settings, service)
    await service.startup()
    gc.collect()
    gc.freeze()  # as `ledgermem serve` does after start-up (streams/server/cli_serve.py)
    sessions = [f"s{k}" for k in range(CONNECTIONS)]
    memory = service.memory
    for session in sessions:
        await memory.run_async(
            specs.GET_OR_CREATE_SESSION, "default", session, (memory.config, None)
        )
    items = [{"content": f"{TEXT} {k}"} for k in range(batch or 1)]
    body = json.dumps({"items": items} if batch else items[0]).encode()
    statuses: dict[int, int] = {}

    async def via_app(session: str) -> None:
        path = f"/v1/sessions/{session}/sections/messages/items"
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1:8000"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        given = False

        async def receive() -> dict:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays: never a disconnect
            raise AssertionError

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                statuses[message["status"]] = statuses.get(message["status"], 0) + 1

        await app(scope, receive, send)

    async def direct(session: str) -> None:
        await memory.run_async(specs.ADD_ITEMS, "default", session, ("messages", items))

    one = via_app if mode == "app" else direct
    left = [requests]

    async def connection(session: str) -> None:
        while left[0] > 0:
            left[0] -= 1
            await one(session)

    await asyncio.gather(*(one(s) for s in sessions))  # warm-up
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    await asyncio.gather(*(connection(s) for s in sessions))
    cpu1, wall1 = time.thread_time(), time.perf_counter()
    await service.shutdown()
    gc.unfreeze()
    shutil.rmtree(data, ignore_errors=True)
    return {
        "mode": mode,
        "requests": requests,
        "loop_cpu_us_per_request": round((cpu1 - cpu0) / requests * 1e6, 1),
        "requests_per_s": round(requests / (wall1 - wall0), 1),
        "statuses": statuses,
    }


def run(mode: str, requests: int, batch: int, root: Path) -> dict:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(measure(mode, requests, batch, root))
    return uvloop.run(measure(mode, requests, batch, root))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of app, direct, direct, app")
    parser.add_argument("--batch", type=int, default=0, help="items per POST (0: one item)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ledgermem-bench-http-app-"))
    runs = []
    try:
        for _ in range(args.rounds):
            for mode in ("app", "direct", "direct", "app"):
                runs.append(run(mode, args.requests, args.batch, root))
                print(f"[bench/http_app] {runs[-1]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def mean(mode: str) -> float:
        values = [r["loop_cpu_us_per_request"] for r in runs if r["mode"] == mode]
        return round(sum(values) / len(values), 1)

    import streams

    print(
        json.dumps(
            {
                "bench": "http_app",
                "tree": str(Path(streams.__file__).resolve().parent.parent),
                "batch_items": args.batch,
                "connections": CONNECTIONS,
                "loadavg": [round(x, 2) for x in os.getloadavg()],
                "runs": runs,
                "app_loop_cpu_us_per_request": mean("app"),
                "direct_loop_cpu_us_per_request": mean("direct"),
                "http_layer_us_per_request": round(mean("app") - mean("direct"), 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
