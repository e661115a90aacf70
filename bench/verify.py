"""Offline verification speed: records/s of `verify_log` with 1 and 2 jobs, and its peak memory.

Prints one JSON object on stdout (progress on stderr). It builds a log of N records (default
1,000,000) with ~300-byte payloads through LogWriter, in Durability.UNSAFE_NO_FSYNC mode (a
benchmark-only mode: nothing here measures durability), then runs `verify_log` on it in a fresh
process per run, so that each run's peak RSS is its own. With jobs=2 the peak RSS of the worker
processes is reported too.

In the same run it measures a floor: one process reading every line, `orjson.loads` and one
sha256 per line, with no checks at all. The ratio to that floor is the figure to quote, since
the shared machine's speed moves between runs (docs/benchmarks.md, reference figures).

Usage: .venv/bin/python bench/verify.py [--records N] [--repeat R] [--log DIR] [--quick]
  --log DIR   reuse (or build once into) DIR instead of a temporary directory
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from eventstore.checkpoint import SigningKey
from eventstore.layout import list_segments
from eventstore.verify import verify_log
from eventstore.writer import Durability, Entry, LogWriter

ORIGIN = "bench.ledgermem.local/verify"
SEED = bytes(range(32))  # a benchmark key; never a real one
TARGET_RECORDS_PER_S = 150_000  # issue 15
TEXT = (
    "the user prefers short answers with code examples in python and wants the assistant to "
    "remember project names deadlines review notes and the style guide for every reply"
)
WORDS = tuple(TEXT.split())
ROLES = ("user", "assistant", "tool", "system")
TAGS = ("preference", "project", "deadline", "style", "review", "python", "spec", "todo")


def log(message: str) -> None:
    print(f"[bench/verify] {message}", file=sys.stderr, flush=True)


def payload(rng: random.Random) -> dict:
    """About 300 JCS bytes: a text, a role, tags, a float score and an int turn."""
    words: list[str] = []
    target = rng.randint(170, 250)
    while sum(map(len, words)) + len(words) < target:
        words.append(rng.choice(WORDS))
    return {
        "text": " ".join(words),
        "role": rng.choice(ROLES),
        "tags": rng.sample(TAGS, rng.randint(1, 3)),
        "score": round(rng.uniform(0.01, 0.99), 4),
        "turn": rng.randrange(1, 10_000),
    }


def build(log_dir: Path, records: int) -> float:
    key = SigningKey.from_seed(ORIGIN, SEED)
    rng = random.Random(20261121)
    started = time.perf_counter()
    writer = LogWriter.open(log_dir, key, durability=Durability.UNSAFE_NO_FSYNC)
    try:
        while writer.size < records:
            count = min(2000, records - writer.size)
            sessions = [f"session-{rng.randrange(64):04d}" for _ in range(count)]
            writer.append_batch(
                Entry("acme", s, "messages", "item.added", payload(rng)) for s in sessions
            )
            if writer.size % 100_000 < count:
                log(f"built {writer.size:,} records")
    finally:
        writer.close()
    return time.perf_counter() - started


def measure(log_dir: Path, jobs: int) -> dict:
    """One verify run, in this (fresh) process."""
    vkey = str(SigningKey.from_seed(ORIGIN, SEED).vkey)
    wall, cpu = time.perf_counter(), time.process_time()
    report = verify_log(log_dir, vkey, jobs=jobs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "jobs": jobs,
        "verdict": report.verdict,
        "records": report.records,
        "seconds": round(wall, 3),
        "records_per_s": round(report.records / wall),
        "cpu_seconds_parent": round(cpu, 3),
        "cpu_seconds_workers": round(children.ru_utime + children.ru_stime, 3),
        # CPU per record, parent and workers together: the figure to trust on a shared machine.
        "cpu_us_per_record": round(
            (cpu + children.ru_utime + children.ru_stime) / report.records * 1e6, 2
        ),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "workers_peak_rss_mib": round(children.ru_maxrss / 1024, 1),
    }


def floor(log_dir: Path) -> dict:
    """Read every line, orjson.loads it and hash it once: no checks, no Merkle tree."""
    loads, sha256 = orjson.loads, hashlib.sha256
    wall, count = time.perf_counter(), 0
    for _, path in list_segments(log_dir):
        with open(path, "rb", buffering=1 << 20) as f:
            for line in f:
                loads(line)
                sha256(line).digest()
                count += 1
    wall = time.perf_counter() - wall
    return {"records": count, "seconds": round(wall, 3), "records_per_s": round(count / wall)}


def run_child(log_dir: Path, jobs: int) -> dict:
    command = [sys.executable, __file__, "--measure", str(log_dir), "--jobs", str(jobs)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def machine() -> dict:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return {
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "idle_jiffies": fields[3] + fields[4],
        "total_jiffies": sum(fields[:8]),
    }


def idle_fraction(before: dict, after: dict) -> float:
    total = after["total_jiffies"] - before["total_jiffies"]
    return round((after["idle_jiffies"] - before["idle_jiffies"]) / total, 3) if total else 0.0


def median_run(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["records_per_s"])
    best = dict(ordered[len(ordered) // 2])
    best["records_per_s_all"] = [r["records_per_s"] for r in runs]
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--log", type=Path, help="reuse or build the log here")
    parser.add_argument("--quick", action="store_true", help="100,000 records, one run each")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.jobs)))
        return
    if args.quick:
        args.records, args.repeat = 100_000, 1

    temp = None
    log_dir = args.log
    if log_dir is None:
        temp = tempfile.mkdtemp(prefix="ledgermem-bench-verify-")
        log_dir = Path(temp) / "log"
    try:
        build_seconds = None
        if not (log_dir.is_dir() and any(log_dir.glob("seg-*.jsonl"))):
            log(f"building {args.records:,} records in {log_dir}")
            build_seconds = round(build(log_dir, args.records), 1)
        size = sum(p.stat().st_size for _, p in list_segments(log_dir))
        before = machine()
        floors, runs = [], {1: [], 2: []}
        for i in range(args.repeat):
            floors.append(floor(log_dir))
            for jobs in (1, 2):
                log(f"run {i + 1}/{args.repeat}, jobs={jobs}")
                runs[jobs].append(run_child(log_dir, jobs))
        after = machine()
        floor_rate = statistics.median(f["records_per_s"] for f in floors)
        results = {jobs: median_run(r) for jobs, r in runs.items()}
        records = results[1]["records"]
        print(
            json.dumps(
                {
                    "bench": "verify",
                    "records": records,
                    "log_bytes": size,
                    "line_bytes_mean": round(size / records, 1),
                    "build_seconds": build_seconds,
                    "build_durability": "unsafe-no-fsync (benchmark only)",
                    "repeat": args.repeat,
                    "jobs_1": results[1],
                    "jobs_2": results[2],
                    "floor_read_loads_sha256": {"records_per_s": floor_rate},
                    "ratio_to_floor_jobs_1": round(results[1]["records_per_s"] / floor_rate, 3),
                    "target_records_per_s_jobs_1": TARGET_RECORDS_PER_S,
                    "meets_target_jobs_1": results[1]["records_per_s"] >= TARGET_RECORDS_PER_S,
                    "machine": {
                        "cpus": before["cpus"],
                        "loadavg_1m_before": before["loadavg_1m"],
                        "loadavg_1m_after": after["loadavg_1m"],
                        "idle_fraction_during": idle_fraction(before, after),
                    },
                },
                indent=1,
            )
        )
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
