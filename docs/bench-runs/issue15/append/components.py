"""Thread CPU per call of the pieces of one append, best of 7 (PYTHONPATH=<tree>): one JSON line."""

import asyncio
import os
import sys
import time
import timeit
from pathlib import Path

import orjson

import eventstore

sys.path.insert(0, str(Path(eventstore.__file__).resolve().parents[1] / "bench"))
import append as bench  # noqa: E402

from eventstore.entry import Entry  # noqa: E402
from eventstore.jcs import canonical, check_value  # noqa: E402
from eventstore.merkle import CompactRange  # noqa: E402
from eventstore.record import genesis, new_record  # noqa: E402

P = bench.make_payloads(1024)
p = P[0]
jcs = canonical(p)
prev = genesis("bench.local/x")
salt = os.urandom(16)
tree = CompactRange()
N = 20_000


def best(fn, n: int = N) -> float:
    return round(min(timeit.repeat(fn, number=n, repeat=7, timer=time.thread_time)) / n * 1e6, 3)


def bare_asyncio() -> float:
    """64 tasks awaiting a fresh future each, resolved per turn by one callback: the asyncio
    part of an append, with nothing else."""
    count, conc = 64_000, 64

    async def main():
        loop = asyncio.get_running_loop()
        pending: list = []

        def resolve(fs):
            for f in fs:
                f.set_result(None)

        def flush():
            fs = pending[:]
            pending.clear()
            loop.call_soon(resolve, fs)

        async def task():
            for _ in range(count // conc):
                f = loop.create_future()
                if not pending:
                    loop.call_soon(flush)
                pending.append(f)
                await f

        await asyncio.gather(*(task() for _ in range(conc)))

    runs = []
    for _ in range(5):
        t = time.thread_time()
        asyncio.run(main())
        runs.append((time.thread_time() - t) / count * 1e6)
    return round(min(runs), 3)


print(
    orjson.dumps(
        {
            "eventstore": str(Path(eventstore.__file__).parent),
            "us_per_call": {
                "Entry()": best(lambda: Entry("acme", "session-0001", "messages", "item.added", p)),
                "check_value": best(lambda: check_value(p)),
                "orjson.dumps sorted": best(lambda: orjson.dumps(p, option=orjson.OPT_SORT_KEYS)),
                "new_record": best(
                    lambda: new_record(
                        prev,
                        5,
                        1_700_000_000_000_000,
                        "acme",
                        "session-0001",
                        "messages",
                        "item.added",
                        salt,
                        p,
                        jcs,
                    )
                ),  # fmt: skip
                "CompactRange.append": best(lambda: tree.append(prev), 200_000),
                "bare asyncio await cycle (64 tasks)": bare_asyncio(),
            },
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
    ).decode()
)
