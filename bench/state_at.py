"""Time travel under load: `GET /v1/state?at=` on a real `ledgermem serve` (issue 13, item 10).

Builds a log of ~17k records through the Python API (20 sessions, ~300-byte messages), restarts
it as a real server, then measures:

- the server's CPU per `state?at` call (utime + stime from /proc, over sequential calls at
  random seqs, after one warm-up call);
- the p50/p99 latency of single-item writes from one client, alone and while 8 threads call
  `state?at` at random seqs as fast as they are answered (a 429 waits its Retry-After).

Usage: .venv/bin/python bench/state_at.py [--records 17000] [--seconds 8] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

from sections.runtime.memory import Memory  # noqa: E402
from tests.server import Server  # noqa: E402


def build(data: Path, records: int) -> None:
    with Memory.open(data) as memory:
        sessions = [memory.session(f"s{i}") for i in range(20)]
        for n in range(records):
            sessions[n % 20].add("messages", {"content": f"message {n} " + "x" * 290})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_latencies(url: str, seconds: float) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=60) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter()
            client.post("/v1/sessions/w/sections/messages/items", json={"content": "w"})
            out.append(time.perf_counter() - start)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=17000)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--data")
    args = parser.parse_args()
    data = Path(args.data or tempfile.mkdtemp(prefix="state-at-"))
    if not (data / "log").exists():
        build(data, args.records)
    server = Server(data).start()
    try:
        url, pid = server.url, server.proc.pid  # type: ignore[union-attr]
        with httpx.Client(base_url=url, timeout=120) as client:
            client.put("/v1/sessions/w")
            head = client.get("/v1/log/status").json().get("head") or args.records
            client.get("/v1/state", params={"at": head // 2})  # warm-up
            calls, before = 10, cpu_seconds(pid)
            for _ in range(calls):
                client.get("/v1/state", params={"at": random.randrange(head)})
            per_call = (cpu_seconds(pid) - before) / calls
        alone = write_latencies(url, args.seconds)
        stop, answers = threading.Event(), {"ok": 0, "busy": 0}

        def hammer() -> None:
            with httpx.Client(base_url=url, timeout=120) as c:
                while not stop.is_set():
                    r = c.get("/v1/state", params={"at": random.randrange(head)})
                    if r.status_code == 429:
                        answers["busy"] += 1
                        time.sleep(float(r.headers.get("retry-after", "1")))
                    else:
                        answers["ok"] += 1

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for t in threads:
            t.start()
        loaded = write_latencies(url, args.seconds)
        stop.set()
        for t in threads:
            t.join()
        print(json.dumps({
            "head": head, "cpu_s_per_state_call": round(per_call, 3),
            "writes_alone": {"n": len(alone), "p50_ms": pct(alone, .5), "p99_ms": pct(alone, .99)},
            "writes_with_8_state_callers": {
                "n": len(loaded), "p50_ms": pct(loaded, .5), "p99_ms": pct(loaded, .99)},
            "state_answers": answers,
        }))  # fmt: skip
    finally:
        server.stop()


if __name__ == "__main__":
    main()
