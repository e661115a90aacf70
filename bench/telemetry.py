"""What tracing costs: CPU per add with tracing off (no OTEL_* set: no tracer provider, the
memory's hook None, the app not wrapped) and on (a tracer provider with a BatchSpanProcessor into
the SDK's InMemorySpanExporter, as `ledgermem serve` would set up with OTLP, minus the network),
side by side.

Prints one JSON object on stdout (progress on stderr). Modes: `off`; `on` (every span recorded
and exported); `sampled` (a parent-based 1% trace-id ratio sampler, as
OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG=0.01 would give: most
spans are started but not recorded). Three ways in, each run in every mode, in alternating
order, `--rounds` times, the median of each kept:

- `add`: one thread calling `Session.add` (one ~300-byte item) on 64 sessions in turn: a command
  span and an append span per add;
- `add_async`: 64 asyncio tasks calling `Session.add_async` on 64 sessions: the adds of one
  event-loop turn share a group, so fewer append spans than adds;
- `http`: the service's ASGI app (create_app, the lean item POST) called in-process with a raw
  scope by 64 tasks, so the server span is in the figure too, and no client or socket is.

CPU is the process's (`time.process_time`: the caller, the writer's thread and the span
processor's export thread together), per add. Durability.UNSAFE_NO_FSYNC, so the disk adds no
wait and the figure is CPU; the machine's other load shows up as noise, hence the rounds. The
garbage collector is tuned as `ledgermem serve` tunes it (`tune_gc`): spans are allocations, and
with the interpreter's default thresholds their collections would be counted against tracing.

Usage: .venv/bin/python bench/telemetry.py [--adds N] [--rounds R]
Figures and how to read them: docs/telemetry.md, "Cost".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eventstore.writer import Durability  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402
from streams.server.cli_serve import tune_gc  # noqa: E402
from streams.server.service import Service  # noqa: E402
from streams.server.settings import Settings  # noqa: E402
from streams.server.telemetry import Telemetry  # noqa: E402
from streams.web.app import create_app  # noqa: E402

SESSIONS = 64
TEXT = "x" * 300


def telemetry(mode: str) -> tuple[Telemetry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    # `sampled`: OTEL_TRACES_SAMPLER=parentbased_traceidratio, OTEL_TRACES_SAMPLER_ARG=0.01
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(0.01)) if mode == "sampled" else None
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Telemetry(provider), exporter


def bench_add(adds: int, mode: str) -> dict:
    data = Path(tempfile.mkdtemp(prefix="bench-otel-"))
    mem = Memory.open(data, durability=Durability.UNSAFE_NO_FSYNC)
    tele, exporter = telemetry(mode) if mode != "off" else (None, None)
    mem.tracing = tele.tracing if tele else None
    sessions = [mem.session(f"s{k}") for k in range(SESSIONS)]
    for s in sessions:  # warm-up
        s.add("messages", TEXT, role="user")
    if tele:
        tele.provider.force_flush()
        exporter.clear()
    cpu0 = time.process_time()
    for k in range(adds):
        sessions[k % SESSIONS].add("messages", TEXT, role="user")
    if tele:
        tele.provider.force_flush()  # the export of every span counted
    cpu = time.process_time() - cpu0
    spans = len(exporter.get_finished_spans()) if exporter else 0
    mem.close()
    if tele:
        tele.shutdown()
    shutil.rmtree(data, ignore_errors=True)
    return {"cpu_us_per_add": cpu / adds * 1e6, "spans": spans}


def bench_add_async(adds: int, mode: str) -> dict:
    data = Path(tempfile.mkdtemp(prefix="bench-otel-"))
    mem = Memory.open(data, durability=Durability.UNSAFE_NO_FSYNC)
    tele, exporter = telemetry(mode) if mode != "off" else (None, None)
    mem.tracing = tele.tracing if tele else None
    sessions = [mem.session(f"s{k}") for k in range(SESSIONS)]

    async def run() -> float:
        await asyncio.gather(*(s.add_async("messages", TEXT, role="user") for s in sessions))
        left = [adds]
        if tele:
            tele.provider.force_flush()
            exporter.clear()

        async def caller(s) -> None:
            while left[0] > 0:
                left[0] -= 1
                await s.add_async("messages", TEXT, role="user")

        cpu0 = time.process_time()
        await asyncio.gather(*(caller(s) for s in sessions))
        if tele:
            tele.provider.force_flush()
        return time.process_time() - cpu0

    cpu = asyncio.run(run())
    spans = len(exporter.get_finished_spans()) if exporter else 0
    mem.close()
    if tele:
        tele.shutdown()
    shutil.rmtree(data, ignore_errors=True)
    return {"cpu_us_per_add": cpu / adds * 1e6, "spans": spans}


def bench_http(adds: int, mode: str) -> dict:
    data = Path(tempfile.mkdtemp(prefix="bench-otel-"))
    settings = Settings(data=str(data), unsafe_no_fsync=True)
    service = Service(settings)
    app = create_app(settings, service)
    tele, exporter = telemetry(mode) if mode != "off" else (None, None)
    if tele:
        service.tracing = tele.tracing
        app = tele.instrument(app)
    body = json.dumps({"content": TEXT, "role": "user"}).encode()
    statuses: dict[int, int] = {}

    async def post(session: str) -> None:
        path = f"/v1/sessions/{session}/sections/messages/items"
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
            "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        }  # fmt: skip
        given = False

        async def receive() -> dict:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays
            raise AssertionError

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                statuses[message["status"]] = statuses.get(message["status"], 0) + 1

        await app(scope, receive, send)

    async def run() -> float:
        await service.startup()
        sessions = [f"s{k}" for k in range(SESSIONS)]
        for s in sessions:
            service.memory.session(s)
        await asyncio.gather(*(post(s) for s in sessions))  # warm-up
        left = [adds]
        if tele:
            tele.provider.force_flush()
            exporter.clear()

        async def connection(s: str) -> None:
            while left[0] > 0:
                left[0] -= 1
                await post(s)

        cpu0 = time.process_time()
        await asyncio.gather(*(connection(s) for s in sessions))
        if tele:
            tele.provider.force_flush()
        cpu = time.process_time() - cpu0
        await service.shutdown()
        return cpu

    cpu = asyncio.run(run())
    spans = len(exporter.get_finished_spans()) if exporter else 0
    if tele:
        tele.shutdown()
    shutil.rmtree(data, ignore_errors=True)
    assert set(statuses) == {201}, statuses
    return {"cpu_us_per_add": cpu / adds * 1e6, "spans": spans}


MODES = ("off", "on", "sampled")
CASES = {"add": bench_add, "add_async": bench_add_async, "http": bench_http}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tune_gc()  # the collector's thresholds `ledgermem serve` runs with (cli_serve.py)
    out: dict = {"adds": args.adds, "rounds": args.rounds, "sessions": SESSIONS}
    for name, bench in CASES.items():
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else reversed(MODES):
                runs[mode].append(bench(args.adds, mode))
                print(f"{name} {mode} round {r}: {runs[mode][-1]}", file=sys.stderr, flush=True)
        medians = {m: statistics.median(x["cpu_us_per_add"] for x in runs[m]) for m in MODES}
        out[name] = {
            **{f"{m}_cpu_us_per_add": round(medians[m], 1) for m in MODES},
            **{f"{m}_minus_off_us": round(medians[m] - medians["off"], 1) for m in MODES[1:]},
            **{f"{m}_runs": [round(x["cpu_us_per_add"], 1) for x in runs[m]] for m in MODES},
            "spans_per_add_on": round(runs["on"][-1]["spans"] / args.adds, 2),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
