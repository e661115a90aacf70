"""CPU per record of the path sections/runner.py takes for a batch of commands: one
`writer.submit(entries)` of many entries, then one `wait_async()` (or `wait()` on a thread).

Prints one JSON object. Real fdatasync; bench/append.py's payloads; `callers` asyncio tasks (or
threads), each submitting `batch` entries at a time until `records` were appended.
Usage: PYTHONPATH=<tree> .venv/bin/python docs/bench-runs/issue15/append/submit_batch.py
       [--family asyncio|threads] [--callers 8] [--batch 64] [--records 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

import eventstore

sys.path.insert(0, str(Path(eventstore.__file__).resolve().parents[1] / "bench"))
import append as bench  # noqa: E402  (the tree's own bench/append.py: payloads, machine noise)
from machine import cpu_times, idle_fraction  # noqa: E402

from eventstore.entry import Entry  # noqa: E402
from eventstore.store import open_log  # noqa: E402
from eventstore.writer import Durability  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="asyncio", choices=("asyncio", "threads"))
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    payloads = bench.make_payloads(1024)
    tenant, section, type_ = bench.IDENTS
    root = Path(tempfile.mkdtemp(prefix="submit-batch-"))
    writer, _ = open_log(root / "data", durability=Durability.FSYNC)
    rounds = args.records // (args.callers * args.batch)

    def batch(k: int, r: int) -> list[Entry]:
        base = (k * rounds + r) * args.batch
        return [
            Entry(tenant, bench.SESSIONS[k & 15], section, type_, payloads[(base + i) % 1024])
            for i in range(args.batch)
        ]

    async def task(k: int) -> None:
        for r in range(rounds):
            await writer.submit(batch(k, r)).wait_async()

    async def tasks() -> None:
        await asyncio.gather(*(task(k) for k in range(args.callers)))

    def thread(k: int) -> None:
        for r in range(rounds):
            writer.submit(batch(k, r)).wait()

    load0, idle0 = os.getloadavg()[0], cpu_times()
    cpu0, wall0, size0 = time.process_time(), time.perf_counter(), writer.size
    if args.family == "asyncio":
        asyncio.run(tasks())
    else:
        workers = [threading.Thread(target=thread, args=(k,)) for k in range(args.callers)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    cpu, wall, appended = (
        time.process_time() - cpu0,
        time.perf_counter() - wall0,
        writer.size - size0,
    )
    idle = idle_fraction(idle0, cpu_times())
    writer.close()
    shutil.rmtree(root)
    print(
        orjson.dumps(
            {
                "eventstore": str(Path(eventstore.__file__).parent),
                "family": args.family,
                "callers": args.callers,
                "batch": args.batch,
                "records": appended,
                "records_per_s": round(appended / wall),
                "cpu_us_per_record": round(cpu / appended * 1e6, 2),
                "loadavg_1m_before": round(load0, 2),
                "machine_idle": idle,
                "neighbour_cores_est": round(
                    max(0.0, (1 - idle) * (os.cpu_count() or 1) - cpu / wall), 2
                ),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
