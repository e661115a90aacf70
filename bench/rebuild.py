"""Rebuild from the log and time travel offline, side by side across source trees (issue 15).

    .venv/bin/python bench/rebuild.py --data DIR --tree A=/work/base-15 --tree B=. --order ABBA

DIR is a data directory built by `bench/memory.py --child build --dir DIR --records N` (built
here when DIR has no log). For each letter of `--order`, in that order, every figure is measured
in fresh processes whose `PYTHONPATH` is that tree, so each tree runs its own code on the same
files:

- `rebuild`: `<tree>/bench/memory.py --child rebuild` (`Memory.open` without snapshot or saved
  index, then `mem.rebuild(use_snapshots=False)` twice, checked equal to the live state, and the
  read + `orjson.loads` floor), with `DIR/snapshots` and `DIR/index` removed first;
- `fold`: `History.load` from zero over the first `--fold-records` records, thread CPU, with
  the CPU time spent in garbage collections (gc.callbacks);
- `state_*`: `ledgermem state DIR/log --at SEQ` as a process, CPU from `wait4`: from zero
  (no snapshots in DIR) at the head, and with the snapshots a service leaves (one at
  `--snapshot-at` and the newest at the head) at a seq between them.

Prints one JSON object: every run, then per figure the mean ratio of each tree to the first.
CPU per record is the figure to trust on a shared machine; the load average and the machine's
idle fraction are recorded around every run.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
from machine import busy_neighbours, cpu_times, idle_fraction

BENCH = Path(__file__).resolve().parent


def noise(before: tuple[int, int]) -> dict:
    return {"loadavg": os.getloadavg()[0], "machine_idle": idle_fraction(before, cpu_times())}


def child_fold(data: Path, records: int) -> dict:
    """`History.load` from zero in this process (the tree on PYTHONPATH), thread CPU."""
    import sections
    from eventstore.reader import LogReader
    from sections.runtime.history import History

    spent = {"gc": 0.0, "t": 0.0}

    def on_gc(phase: str, _: dict) -> None:
        if phase == "start":
            spent["t"] = time.thread_time()
        else:
            spent["gc"] += time.thread_time() - spent["t"]

    gc.callbacks.append(on_gc)
    history = History(LogReader(data / "log"))
    t = time.thread_time()
    state = history.load(records - 1, False)[0]
    cpu = time.thread_time() - t
    return {
        "sections": sections.__file__,
        "records": records,
        "cpu_s": round(cpu, 3),
        "records_per_cpu_s": round(records / cpu),
        "cpu_us_per_record": round(cpu / records * 1e6, 2),
        "gc_us_per_record": round(spent["gc"] / records * 1e6, 2),
        "state_hash": state.state_hash(),
    }


def python_json(tree: Path, args: list[str]) -> dict:
    """Run `python ARGS` with PYTHONPATH=tree: the JSON line it prints, with the wall time and
    the machine's noise around it."""
    before, t = cpu_times(), time.perf_counter()
    run = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    wall = time.perf_counter() - t
    if run.returncode != 0:
        raise RuntimeError(f"{args} in {tree} failed:\n{run.stderr.decode()}")
    return {**orjson.loads(run.stdout.splitlines()[-1]), "wall_s": round(wall, 3), **noise(before)}


def timed_state(tree: Path, data: Path, at: int) -> dict:
    """`ledgermem state DIR/log --at AT` as a process: its CPU from wait4."""
    before, t = cpu_times(), time.perf_counter()
    command = [sys.executable, "-m", "ledgermem_cli", "state", str(data / "log"), "--at", str(at)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.PIPE, cwd=tree, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"state --at {at} in {tree} failed: {proc.stderr.read().decode()}")
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "at": at,
        "records": at + 1,
        "s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "records_per_cpu_s": round((at + 1) / cpu),
        "cpu_us_per_record": round(cpu / (at + 1) * 1e6, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        **noise(before),
    }


def make_snapshots(data: Path, keep: Path, at: int) -> None:
    """The snapshots a service would leave: one at `at` and the newest one, kept aside."""
    from eventstore.reader import LogReader
    from sections.runtime.history import History
    from sections.runtime.snapshot import Snapshot, write_snapshot

    if keep.is_dir():
        return
    newest = sorted((data / "snapshots").glob("snap-*.json"))
    keep.mkdir(parents=True)
    for path in newest[-1:]:
        shutil.copy2(path, keep / path.name)
    reader = LogReader(data / "log")
    state = History(reader).load(at, False)[0]
    write_snapshot(keep, reader.origin, Snapshot(state.seq, state.h, {"sections": state.to_json()}))


def put_snapshots(data: Path, keep: Path | None) -> None:
    shutil.rmtree(data / "snapshots", ignore_errors=True)
    shutil.rmtree(data / "index", ignore_errors=True)
    if keep is not None:
        shutil.copytree(keep, data / "snapshots")


def ratios(runs: list[dict], trees: list[str]) -> dict:
    """Mean of each figure per tree, and each tree's mean over the first tree's."""
    figures = {
        "rebuild_records_per_cpu_s": lambda r: r["rebuild"]["rebuild_records_per_cpu_s"],
        "rebuild_records_per_s": lambda r: r["rebuild"]["rebuild_records_per_s"],
        "open_records_per_cpu_s": lambda r: r["rebuild"]["open_records_per_cpu_s"],
        "floor_read_loads_per_cpu_s": lambda r: r["rebuild"]["floors"]["read_loads"][
            "records_per_cpu_s"
        ],
        "fold_cpu_us_per_record": lambda r: r["fold"]["cpu_us_per_record"],
        "fold_gc_us_per_record": lambda r: r["fold"]["gc_us_per_record"],
        "state_from_zero_cpu_us_per_record": lambda r: r["state_from_zero"]["cpu_us_per_record"],
        "state_with_snapshots_cpu_s": lambda r: r["state_with_snapshots"]["cpu_s"],
    }
    out = {}
    for name, pick in figures.items():
        means = {}
        for tree in trees:
            values = [pick(r) for r in runs if r["tree"] == tree]
            means[tree] = round(sum(values) / len(values), 2)
        first = means[trees[0]]
        out[name] = {
            "means": means,
            "ratio_to_" + trees[0]: {t: round(m / first, 3) for t, m in means.items()},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--records", type=int, default=300_000, help="to build DIR's log")
    parser.add_argument("--tree", action="append", default=[], metavar="LETTER=PATH")
    parser.add_argument("--order", default="ABBA")
    parser.add_argument("--fold-records", type=int, default=200_000)
    parser.add_argument("--snapshot-at", type=int, default=199_999)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if args.child == "fold":
        print(orjson.dumps(child_fold(args.data, args.fold_records)).decode())
        return 0
    trees = dict(t.split("=", 1) for t in args.tree) or {"B": str(BENCH.parent)}
    trees = {k: Path(v).resolve() for k, v in trees.items()}
    data = args.data.resolve()
    build = None
    if not (data / "log").is_dir():
        command = [str(BENCH / "memory.py"), "--child", "build", "--dir", str(data)]
        build = python_json(BENCH.parent, [*command, "--records", str(args.records)])
    keep = data.parent / (data.name + "-snapshots")
    make_snapshots(data, keep, args.snapshot_at)
    head = max(int(p.stem[5:]) for p in keep.glob("snap-*.json"))
    between = (args.snapshot_at + head) // 2
    runs = []
    for letter in args.order:
        tree = trees[letter]
        run = {"tree": letter, "path": str(tree), "neighbours": busy_neighbours({os.getpid()})}
        put_snapshots(data, None)
        run["rebuild"] = python_json(
            tree,
            [
                str(tree / "bench/memory.py"),
                "--child",
                "rebuild",
                "--dir",
                str(data),
                "--reps",
                "2",
            ],
        )
        run["fold"] = python_json(
            tree,
            [str(BENCH / "rebuild.py"), "--child", "fold", "--data", str(data)]
            + ["--fold-records", str(args.fold_records)],
        )
        put_snapshots(data, None)
        run["state_from_zero"] = timed_state(tree, data, head)
        put_snapshots(data, keep)
        run["state_with_snapshots"] = timed_state(tree, data, between)
        put_snapshots(data, None)
        runs.append(run)
        print(orjson.dumps(run).decode(), file=sys.stderr)
    result = {
        "bench": "rebuild",
        "data": str(data),
        "build": build,
        "snapshots": sorted(p.name for p in keep.glob("snap-*.json")),
        "order": args.order,
        "trees": {k: str(v) for k, v in trees.items()},
        "runs": runs,
        "summary": ratios(runs, list(dict.fromkeys(args.order))),
    }
    text = orjson.dumps(result).decode() + "\n"
    if args.out:  # a path outside the tree (e.g. /tmp/rebuild.json); stdout has the same object
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
