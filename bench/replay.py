"""Offline tools over a large log: `replay`, `state --at` and `verify --jobs 2`, as real commands.

Prints one JSON object. Every figure is records per second of wall time for the whole command
(process start included), with the peak RSS of that command's process (from wait4). Peak RSS is
measured at two log lengths (a quarter of the log and all of it): it must not grow with length.
In the same run, a floor: reading every line and parsing it with orjson in one loop.

    .venv/bin/python bench/replay.py                 # 1,000,000 records (building it takes a while)
    .venv/bin/python bench/replay.py --records 20000 --quick
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).parent.parent
TARGETS = {
    "replay_records_per_s": 150_000,
    "state_records_per_s": 150_000,
    "verify_jobs2_records_per_s": 180_000,
}


def _memory_bench():
    spec = importlib.util.spec_from_file_location("bench_memory", ROOT / "bench" / "memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def timed(command: list[str]) -> dict:
    """Run a command with stdout to /dev/null; wall seconds and the child's peak RSS."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0,):
        raise RuntimeError(f"{command} exited {code}: {stderr}")
    cpu = usage.ru_utime + usage.ru_stime  # robust to a busy machine, unlike wall time
    return {
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def ledgermem(*args: object) -> list[str]:
    return [sys.executable, "-m", "ledgermem_cli", *map(str, args)]


def floor(log_dir: Path) -> float:
    """Read every line and orjson.loads it, in one loop: the least any replay must do."""
    start = time.perf_counter()
    count = 0
    for path in sorted(log_dir.glob("seg-*.jsonl")):
        with open(path, "rb") as f:
            for line in f:
                orjson.loads(line)
                count += 1
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--keep", help="build into (or reuse) this data directory")
    parser.add_argument("--build-only", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_only:  # in its own process, so the measuring parent stays small
        print(json.dumps(_memory_bench().child_build(Path(args.build_only), args.records)))
        return 0
    records = 20_000 if args.quick and args.records == 1_000_000 else args.records
    memory = _memory_bench()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lm-replay-bench-"))
    data = work / "data"
    noise_before = memory.machine_noise(True)
    if not (data / "log").exists():
        print(f"building a log of {records} records ...", file=sys.stderr)
        built = subprocess.run(
            [sys.executable, __file__, "--build-only", str(data), "--records", str(records)],
            capture_output=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        build = json.loads(built.stdout)
    else:
        build = {"records": None, "reused": str(data)}
    log_dir = data / "log"
    head = json.loads(subprocess.run(ledgermem("replay", log_dir, "--from-seq", 0, "--to-seq", 0),
                                     capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout)  # fmt: skip
    total = 0
    for path in sorted(log_dir.glob("seg-*.jsonl")):
        with open(path, "rb") as f:
            total += sum(1 for _ in f)
    quarter = total // 4
    result: dict = {
        "records": total,
        "build": build,
        "header_seg_bits": head["payload"]["seg_bits"],
    }

    floor_rate = floor(log_dir)
    result["floor_read_and_parse_records_per_s"] = round(floor_rate)
    runs = {
        "replay": ledgermem("replay", log_dir),
        "replay_filtered": ledgermem(
            "replay", log_dir, "--type", "item.added", "--section", "findings"
        ),
        "state": ledgermem("state", log_dir, "--at", total - 1),
        "verify_jobs1": ledgermem("verify", log_dir, "--json"),
        "verify_jobs2": ledgermem("verify", log_dir, "--json", "--jobs", 2),
    }
    for name, command in runs.items():
        print(f"timing {name} ...", file=sys.stderr)
        figures = timed(command)
        figures["records_per_s"] = round(total / figures["seconds"])
        figures["records_per_cpu_s"] = round(total / figures["cpu_seconds"])
        figures["ratio_to_floor"] = round(figures["records_per_s"] / floor_rate, 3)
        result[name] = figures
    # Memory must not grow with log length: the same commands over a quarter of the log.
    result["rss_by_length_mib"] = {
        "replay": {quarter: timed(ledgermem("replay", log_dir, "--to-seq", quarter))["peak_rss_mib"],
                   total: result["replay"]["peak_rss_mib"]},
        "state": {quarter: timed(ledgermem("state", log_dir, "--at", quarter))["peak_rss_mib"],
                  total: result["state"]["peak_rss_mib"]},
    }  # fmt: skip
    result["targets"] = TARGETS
    result["meets"] = {
        "replay_records_per_s": result["replay"]["records_per_s"]
        >= TARGETS["replay_records_per_s"],
        "state_records_per_s": result["state"]["records_per_s"] >= TARGETS["state_records_per_s"],
        "verify_jobs2_records_per_s": result["verify_jobs2"]["records_per_s"]
        >= TARGETS["verify_jobs2_records_per_s"],
    }
    result["noise"] = {"before": noise_before, "after": memory.machine_noise(True)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
