"""Adds to full sections, alone: bench/memory.py's add scenarios plus one caller without fsync.

Issue 15's eviction part is measured with this rather than the whole bench/memory.py (whose
1M-record build takes most of its run). It reuses bench/memory.py's own scenarios unchanged:
`add_scenario` for 64 callers (durable, default config, fifo messages / priority findings /
lru working / unbounded documents), on full and on fresh sessions; and adds one caller adding
to one full section at a time without fsync, whose process CPU per add is nearly all the work
under the Memory lock (decide, submit, apply). Prints one JSON line; run it with
`PYTHONPATH=<tree>` to measure another checkout's `sections`/`eventstore` with the same script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import memory as bm  # noqa: E402  (bench/memory.py)

import sections  # noqa: E402
from eventstore.file_sink import Durability  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402


def one_caller(root: Path, contents: list[str], adds: int) -> dict:
    """One caller, UNSAFE_NO_FSYNC, one full session: CPU µs per add for each bounded section."""
    out = {}
    for section in bm.BOUNDED:
        data_dir = root / f"one-{section}"
        mem = Memory.open(data_dir, durability=Durability.UNSAFE_NO_FSYNC)
        session = mem.session("one")
        bm.fill_sections(mem, [session], contents)
        before = sum(mem.stats()["evictions"].values())
        cpu0 = time.process_time()
        for n in range(adds):
            kwargs = {"priority": 9} if section == "findings" else {}
            session.add(section, contents[n % len(contents)], **kwargs)
        cpu = time.process_time() - cpu0
        evictions = sum(mem.stats()["evictions"].values()) - before
        out[section] = {
            "cpu_us_per_add": round(cpu / adds * 1e6, 1),
            "evictions_per_add": round(evictions / adds, 2),
            "live_items": len(session.get(section)) if hasattr(session, "get") else None,
        }
        mem.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--one-caller-adds", type=int, default=3000)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    contents = bm.make_contents(1024)
    result: dict = {
        "label": args.label,
        "sections_from": str(Path(sections.__file__).parent.parent),
        "code": bm.code_version(),
        "noise_start": {"loadavg": bm.loadavg()},
        "started": time.strftime("%H:%M:%S", time.gmtime()),
    }
    with tempfile.TemporaryDirectory(prefix="evict-bench-") as tmp:
        root = Path(tmp)
        result["one_caller_no_fsync"] = one_caller(root, contents, args.one_caller_adds)
        adds = {}
        for family in ("asyncio", "threads"):
            for name, spread, fill in (("64_full", "64", "full"), ("64_fresh", "64", "fresh")):
                f = bm.add_scenario(root, family, spread, fill, contents, args.warmup, args.seconds)
                adds[f"{family}_{name}"] = {
                    k: f[k]
                    for k in (
                        "adds_per_s", "cpu_us_per_add", "evictions_per_add", "add_ms",
                        "records_per_commit", "process_cpu_cores", "machine_idle",
                        "neighbour_cores_est",
                    )
                }  # fmt: skip
        result["adds"] = adds
    result["noise_end"] = {"loadavg": bm.loadavg()}
    result["ended"] = time.strftime("%H:%M:%S", time.gmtime())
    line = json.dumps(result)
    print(line)
    if args.out:
        with args.out.open("a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
