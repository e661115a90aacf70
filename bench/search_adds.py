"""Adds through `Memory` into the default sections (three of the four used are searchable), from
64 asyncio callers, durable and not, and from one caller in a loop, durable: what the search
index costs on the write path.

Prints one JSON object. Give another checkout's root to measure that code instead, and run the
two alternately to compare them side by side:

    python bench/search_adds.py [ROOT]
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1]))

from eventstore.writer import Durability  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402

ADDS, CALLERS = 12_000, 64
SECTIONS = ("messages", "findings", "working", "documents")  # `working` is not searchable


def texts() -> list[str]:
    """~400-character texts with a varied vocabulary (words with numbers)."""
    rng = random.Random(1)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    return [" ".join(rng.choice(words) + str(rng.randint(0, 999)) for _ in range(45))
            for _ in range(ADDS)]  # fmt: skip


def run(durability: Durability) -> dict:
    with tempfile.TemporaryDirectory(prefix="ledgermem-bench-adds-") as tmp:
        mem = Memory.open(tmp, durability=durability, snapshot_every=10**9)
        sessions = [mem.session(f"s{i}") for i in range(CALLERS)]
        contents = texts()

        async def caller(c: int) -> None:
            for i in range(c, ADDS, CALLERS):
                await sessions[c].add_async(SECTIONS[i % 4], contents[i], role="user")

        async def main() -> None:
            await asyncio.gather(*(caller(c) for c in range(CALLERS)))

        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        asyncio.run(main())
        elapsed, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        mem.close()
    return {"adds_per_s": round(ADDS / elapsed), "cpu_us_per_add": round(cpu / ADDS * 1e6, 1)}


def sequential(adds: int = 1500) -> dict:
    """One caller, durable adds alternating a searchable section and one that is not."""
    with tempfile.TemporaryDirectory(prefix="ledgermem-bench-adds-") as tmp:
        mem = Memory.open(tmp)
        session = mem.session("s")
        contents = texts()
        for i in range(200):  # warm-up
            session.add("documents", contents[i])
        start = time.perf_counter()
        for i in range(adds):
            session.add("documents" if i % 2 else "working", contents[i])
        elapsed = time.perf_counter() - start
        mem.close()
    return {"adds": adds, "us_per_add": round(elapsed / adds * 1e6)}


if __name__ == "__main__":
    result = {
        "fsync": run(Durability.FSYNC),
        "unsafe_no_fsync": run(Durability.UNSAFE_NO_FSYNC),
        "sequential_fsync": sequential(),
    }
    print(json.dumps(result))
