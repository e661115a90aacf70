"""One bench, side by side across source trees, in the same run: CPU per operation and rates.

    .venv/bin/python bench/trees.py --tree A=/work/base --tree B=. --order ABBA [--rounds N] \
        [--out FILE] [--dir D] [--smoke] -- <bench> [its args]

Issue 27's "done when" asks that `bench/` figures for appends, memory adds and HTTP writes be no
worse than before: CPU per operation, side by side, same run. For each letter of `--order`
(repeated `--rounds` times) this runs `<tree>/bench/<bench>.py [its args]`, i.e. EACH TREE'S OWN
COPY of the script (module paths differ between trees), as a fresh process with
`PYTHONPATH=<tree>` and cwd = the tree, with this interpreter; every child it starts (the
`ledgermem serve` of `http_writes`, the `--child` processes of `memory`) inherits both. The
benches and the figures read from the one JSON object each prints are in BENCHES below:

- `append`: `bench/append.py`, LogWriter durable appends (fdatasync), threads and asyncio, 1, 8
  and 64 appenders: CPU us per record and records/s; the format's CPU floor (a bare loop in
  the script, no project code but the Merkle range) as a control;
- `memory`: `bench/memory.py --quick --records 4000`: only its add scenarios (Session.add and
  add_async, 64 callers, fresh and full sections, 64 sessions or one): CPU us per add and
  adds/s; the raw LogWriter rate at the same load;
- `http_app`: `bench/http_app.py`: the event-loop thread's CPU per item POST through the ASGI
  app, and per direct `Memory.run_async` add, in one process (the HTTP layer's cost is the
  difference, in each run's result);
- `http_writes`: `bench/http_writes.py`: durable writes/s of a real `ledgermem serve` over 32
  connections, single items and batches, with the server's CPU per write / per item.

With no args after the bench's name, the table's `args` are used (about 6 minutes for the four
benches, ABBA, one round, on the 2-core VM: append 16 s a run, memory 36 s, http_app 6 s,
http_writes 32 s); `--smoke` uses its smallest `smoke` args instead; args given replace both.
`--dir D` is passed on to the benches that take it (their temporary data directories).

Prints one JSON object:
- `trees`: each tree's path, commit, uncommitted files, and which files `eventstore`,
  `sections`, `streams`, `replay` and `ledgermem_cli` resolve to with its PYTHONPATH and cwd;
- `runs`: every run in order: the tree, the chosen `figures`, the `noise` around it (the 1-min
  load average before and after, the machine's idle fraction over the run, the cores the rest
  of the machine used (`neighbour_cores`: busy cores minus this run's own CPU from wait4, children
  included) and the busiest other processes just before), the bench's own `reported_tree`
  where it prints one, the `children` seen (every descendant process, sampled every 0.2 s: its
  command, PYTHONPATH and cwd), `tree_ok` (the tree's imports resolve inside it, every Python
  child ran with its PYTHONPATH and cwd, the child the table names was seen, and the tree the
  bench reports is inside it), and the bench's whole JSON (`result`);
- `summary`: per figure: which way is `better`, the values per tree in run order, their means,
  `ratio` (each tree's mean over the first tree's) and `pair_ratios` (the k-th run of a tree
  over the k-th run of the first tree: with ABBA, B1/A1 and B2/A2, the runs next to each
  other); `noise`: per run, the load and neighbours;
- `imported_project_files`: the project's source files the processes of the whole
  comparison imported, by the checkout they came from (bytecode goes to a fresh
  PYTHONPYCACHEPREFIX, not into the trees, with PYTHONDONTWRITEBYTECODE cleared, so what was
  compiled there is what was imported; the bytecode of the first run of each tree, and of the
  dependencies in the very first run, is compiled at import, before any measured window), and
  `imported_from_elsewhere`: any from a checkout that is not compared (none expected);
- `tree_checks_ok`: every run's `tree_ok` and nothing imported from elsewhere.

How to read the ratios: a ratio of B to A above 1 is worse for a `lower`-is-better figure (CPU
per operation) and better for a `higher`-is-better one (rates). On a shared 2-core machine, CPU
per operation is the figure to trust; rates move with the neighbours. Read the pair ratios
beside the noise of the two runs of the pair: when they disagree in direction, or a control
figure (the floor) moves as much as the rest, the difference is noise, not code. A ratio is
worth a claim only when every pair agrees and the runs' neighbour_cores are comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from machine import busy_neighbours, cpu_times, idle_fraction

BENCH = Path(__file__).resolve().parent
FAMILIES = ("threads", "asyncio")
ADD_SCENARIOS = ("64_sessions_full", "1_sessions_full", "64_sessions_fresh", "1_sessions_fresh")


def _append_figures() -> dict[str, tuple[str, str]]:
    figures = {}
    for family in FAMILIES:
        for n in (1, 8, 64):
            figures[f"{family}_x{n}_cpu_us_per_record"] = (
                f"results.{family}.{n}.cpu_us_per_record",
                "lower",
            )
            figures[f"{family}_x{n}_records_per_s"] = (
                f"results.{family}.{n}.records_per_s",
                "higher",
            )
    figures["control_floor_records_per_s"] = ("floor.records_per_s", "higher")
    return figures


def _memory_figures() -> dict[str, tuple[str, str]]:
    figures = {}
    for family in FAMILIES:
        for scenario in ADD_SCENARIOS:
            figures[f"{family}_{scenario}_cpu_us_per_add"] = (
                f"adds.{family}.{scenario}.cpu_us_per_add",
                "lower",
            )
            figures[f"{family}_{scenario}_adds_per_s"] = (
                f"adds.{family}.{scenario}.adds_per_s",
                "higher",
            )
    for family in FAMILIES:
        figures[f"raw_{family}_cpu_us_per_append"] = (
            f"raw_append.{family}.cpu_us_per_append",
            "lower",
        )
        figures[f"raw_{family}_appends_per_s"] = (f"raw_append.{family}.appends_per_s", "higher")
    return figures


# name: the script's args (a short measurement) and smallest args, whether it takes --dir, the
# JSON path of the tree it reports importing (None: it reports none), a part of the command of a
# child process it must be seen to start (with the tree's PYTHONPATH and cwd), and its figures:
# name -> (dotted JSON path, which way is better). `runs[mode=app]` keeps the list's elements
# whose `mode` is `app`; a path through a list gives the mean of its values.
BENCHES: dict[str, dict] = {
    "append": {
        "args": ["--seconds", "1.5"],
        "smoke": ["--quick", "--seconds", "0.3"],
        "dir": True,
        "tree_field": "code.eventstore",
        "figures": _append_figures(),
    },
    "memory": {
        "args": ["--quick", "--records", "4000", "--seconds", "1.5"],
        "smoke": ["--quick", "--records", "3000", "--seconds", "0.5"],
        "dir": True,
        "tree_field": None,
        "child": "--child",
        "figures": _memory_figures(),
    },
    "http_app": {
        "args": ["--requests", "5000", "--rounds", "2"],
        "smoke": ["--requests", "300", "--rounds", "1"],
        "dir": False,
        "tree_field": "tree",
        "figures": {
            "app_loop_cpu_us_per_request": ("app_loop_cpu_us_per_request", "lower"),
            "direct_loop_cpu_us_per_request": ("direct_loop_cpu_us_per_request", "lower"),
            "app_requests_per_s": ("runs[mode=app].requests_per_s", "higher"),
        },
    },
    "http_writes": {
        "args": ["--seconds", "4", "--warmup", "1"],
        "smoke": ["--quick"],
        "dir": True,
        "tree_field": "config.server_root",
        "child": "<code> serve",
        "figures": {
            "single_server_cpu_us_per_write": (
                "results.shipped.single.server_cpu_us_per_write",
                "lower",
            ),
            "single_writes_per_s": ("results.shipped.single.writes_per_s", "higher"),
            "batch_server_cpu_us_per_item": (
                "results.shipped.batch.server_cpu_us_per_item",
                "lower",
            ),
            "batch_items_per_s": ("results.shipped.batch.items_per_s", "higher"),
            "ceiling_single_appends_per_s": ("raw_append.single.appends_per_s", "higher"),
        },
    },
}

# Which files the packages resolve to with a tree's PYTHONPATH and cwd (as the server's `-c`
# launcher sees them; a bench script has its bench/ first, which holds none of these names).
PROBE = """
import importlib, json
found = {}
for name in ("eventstore", "sections", "streams", "replay", "ledgermem_cli"):
    try:
        found[name] = importlib.import_module(name).__file__
    except Exception as e:
        found[name] = f"error: {e!r}"
print(json.dumps(found))
"""


def pick(result: object, path: str) -> float | None:
    """The number at a dotted path (`a.b[key=value].c`), the mean where the path goes through a
    list, None if it is missing."""
    values = [result]
    for part in path.split("."):
        key, _, where = part.partition("[")
        found: list = []
        for value in values:
            if isinstance(value, dict) and key in value:
                x = value[key]
                found.extend(x if isinstance(x, list) else [x])
        if where:
            field, _, wanted = where.rstrip("]").partition("=")
            found = [e for e in found if isinstance(e, dict) and str(e.get(field)) == wanted]
        values = found
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return round(sum(numbers) / len(numbers), 3) if numbers else None


def pick_str(result: dict, path: str | None) -> str | None:
    """The string at a dotted path, or None."""
    value: object = result if path else None
    for part in path.split(".") if path else []:
        value = value.get(part) if isinstance(value, dict) else None
    return value if isinstance(value, str) else None


def within(path: str | None, tree: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(tree)


# Bytecode goes here rather than into the trees' __pycache__ (a tree compared against is left
# as it is); a fresh directory for the whole comparison, set by main(). What was compiled into it
# is also a record of the source files that every process of the comparison imported.
PYCACHE: list[str] = []
PACKAGES = ("eventstore", "sections", "streams", "replay")


def compiled_project_files(prefix: Path) -> dict[str, list[str]]:
    """The project's source files compiled under `prefix`, by the checkout they came from."""
    found: dict[str, list[str]] = {}
    for pyc in prefix.rglob("*.pyc"):
        source = Path("/") / pyc.relative_to(prefix).parent / (pyc.name.split(".")[0] + ".py")
        parts = source.parts
        for i, part in enumerate(parts):
            if part in PACKAGES or (part == "ledgermem_cli.py" and i == len(parts) - 1):
                found.setdefault(str(Path(*parts[:i])), []).append(str(Path(*parts[i:])))
                break
    return {root: sorted(files) for root, files in sorted(found.items())}


def tree_env(tree: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if PYCACHE:  # written even where the caller's environment says not to write bytecode
        env["PYTHONPYCACHEPREFIX"] = PYCACHE[0]
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def describe_tree(tree: Path) -> dict:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return done.stdout.strip()

    probe = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tree, env=tree_env(tree)
    )
    imports = json.loads(probe.stdout) if probe.returncode == 0 else {"error": probe.stderr}
    return {
        "path": str(tree),
        "commit": git("rev-parse", "--short=12", "HEAD"),
        "uncommitted": [
            line
            for line in git("--no-optional-locks", "status", "--porcelain").splitlines()
            if line
        ],
        "imports": imports,
        "imports_ok": all(within(p, tree) for p in imports.values()),
    }


def descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Children:
    """Samples the descendants of a process: each one's command (abridged), PYTHONPATH, cwd."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every = pid, every
        self.seen: dict[tuple, int] = {}
        self.pids: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            for pid in descendants(self.pid):
                if pid in self.pids:
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = f.read().decode(errors="replace").split("\0")[:-1]
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = dict(
                            e.split("=", 1) for e in f.read().decode().split("\0") if "=" in e
                        )
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except (OSError, ValueError):
                    continue
                if not argv:
                    continue
                self.pids.add(pid)
                command = " ".join(
                    ("<code>" if "\n" in a else a[:60]) for a in [Path(argv[0]).name, *argv[1:6]]
                )
                key = (command, env.get("PYTHONPATH"), cwd)
                self.seen[key] = self.seen.get(key, 0) + 1

    def finish(self) -> list[dict]:
        self.stop.set()
        self.thread.join()
        return [
            {"command": c, "PYTHONPATH": p, "cwd": d, "count": n}
            for (c, p, d), n in self.seen.items()
        ]


def run_once(tree: Path, bench: str, args: list[str]) -> dict:
    """`<tree>/bench/<bench>.py ARGS` with PYTHONPATH=tree, cwd=tree: its JSON and the noise."""
    neighbours = busy_neighbours({os.getpid()})
    load0 = os.getloadavg()[0]
    command = [sys.executable, str(tree / "bench" / f"{bench}.py"), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        idle0, t0 = cpu_times(), time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=tree, env=tree_env(tree))
        children = Children(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall, idle = time.perf_counter() - t0, idle_fraction(idle0, cpu_times())
        seen = children.finish()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {tree} failed:\n{stderr[-4000:]}")
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError:  # a bench that logs on stdout: its last line is the object
        result = json.loads(stdout.strip().splitlines()[-1])
    cpu = usage.ru_utime + usage.ru_stime  # the bench and every child it waited for
    busy = (1 - idle) * (os.cpu_count() or 1)
    return {
        "result": result,
        "children": seen,
        "noise": {
            "wall_s": round(wall, 2),
            "loadavg_1m_before": round(load0, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
            "machine_idle": idle,
            "own_cores": round(cpu / wall, 2),
            "neighbour_cores": round(max(0.0, busy - cpu / wall), 2),
            "busiest_before": neighbours[:3],
        },
    }


def summarize(runs: list[dict], letters: list[str], figures: dict[str, tuple[str, str]]) -> dict:
    first = letters[0]
    out = {}
    for name, (_, better) in figures.items():
        values = {t: [r["figures"][name] for r in runs if r["tree"] == t] for t in letters}
        means = {
            t: (round(sum(v) / len(v), 3) if v and None not in v else None)
            for t, v in values.items()
        }

        def ratio(x: float | None, y: float | None) -> float | None:
            return round(x / y, 3) if x is not None and y else None

        out[name] = {
            "better": better,
            "values": values,
            "means": means,
            "ratio": {t: ratio(means[t], means[first]) for t in letters[1:]},
            "pair_ratios": {
                t: [ratio(x, y) for x, y in zip(values[t], values[first], strict=False)]
                for t in letters[1:]
            },
        }
    return out


def table(report: dict) -> str:
    """The summary as text, for a person (stderr)."""
    letters = list(dict.fromkeys(report["order"]))
    first = letters[0]
    lines = []
    for name, s in report["summary"].items():
        cells = [f"{t}={s['means'][t]}" for t in letters]
        for t in letters[1:]:
            pairs = ", ".join(str(p) for p in s["pair_ratios"][t])
            cells.append(f"{t}/{first}={s['ratio'][t]} (pairs {pairs})")
        lines.append(f"{name} [{s['better']}]: " + "  ".join(cells))
    for r in report["runs"]:
        n = r["noise"]
        lines.append(
            f"run {r['tree']}: {n['wall_s']} s, load {n['loadavg_1m_before']}->"
            f"{n['loadavg_1m_after']}, idle {n['machine_idle']}, own {n['own_cores']} cores, "
            f"neighbours {n['neighbour_cores']} cores, tree_ok {r['tree_ok']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    ours, rest = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], usage="%(prog)s [options] -- BENCH [ITS ARGS]"
    )
    parser.add_argument("--tree", action="append", default=[], metavar="LETTER=PATH")
    parser.add_argument("--order", default="ABBA")
    parser.add_argument("--rounds", type=int, default=1, help="repeat --order this many times")
    parser.add_argument("--smoke", action="store_true", help="the benches' smallest args")
    parser.add_argument("--dir", type=Path, help="passed as --dir to the benches that take it")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(ours)
    if not rest or rest[0] not in BENCHES:
        parser.error(f"after --, name a bench: {', '.join(BENCHES)}")
    bench, bench_args = rest[0], rest[1:]
    spec = BENCHES[bench]
    if not bench_args:
        bench_args = list(spec["smoke" if args.smoke else "args"])
    if args.dir is not None and spec["dir"]:
        args.dir.mkdir(parents=True, exist_ok=True)
        bench_args += ["--dir", str(args.dir.resolve())]
    trees = {k: Path(v).resolve() for k, v in (t.split("=", 1) for t in args.tree)}
    trees = trees or {"B": BENCH.parent}
    letters = list(dict.fromkeys(args.order))
    if not set(letters) <= set(trees):
        parser.error(f"--order {args.order!r} names a tree not given with --tree")
    with tempfile.TemporaryDirectory(prefix="ledgermem-bench-trees-") as pycache:
        PYCACHE[:] = [pycache]
        report = compare(bench, bench_args, spec, trees, letters, args)
        compiled = compiled_project_files(Path(pycache))
    # Every project file imported by any process of the comparison, by checkout: only the
    # compared trees may appear (not, say, the checkout this interpreter's venv installs).
    compared = {str(trees[t]) for t in letters}
    report["imported_project_files"] = compiled
    report["imported_from_elsewhere"] = {r: f for r, f in compiled.items() if r not in compared}
    report["tree_checks_ok"] = report["tree_checks_ok"] and not report["imported_from_elsewhere"]
    print(table(report), file=sys.stderr, flush=True)
    text = json.dumps(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


def compare(
    bench: str,
    bench_args: list[str],
    spec: dict,
    trees: dict[str, Path],
    letters: list[str],
    args: argparse.Namespace,
) -> dict:
    """Every run of --order x --rounds, and the summary."""
    described = {k: describe_tree(v) for k, v in trees.items() if k in letters}

    runs = []
    for i, letter in enumerate(args.order * args.rounds):
        tree = trees[letter]
        print(f"[bench/trees] {bench} on {letter}={tree} ({i + 1})", file=sys.stderr, flush=True)
        done = run_once(tree, bench, bench_args)
        result = done["result"]
        reported = pick_str(result, spec["tree_field"])
        pythons = [c for c in done["children"] if c["command"].startswith("python")]
        children_ok = all(
            c["PYTHONPATH"] == str(tree) and Path(c["cwd"]).resolve() == tree for c in pythons
        ) and any(spec.get("child", "") in c["command"] for c in pythons or [{"command": ""}])
        run = {
            "tree": letter,
            "path": str(tree),
            "figures": {name: pick(result, path) for name, (path, _) in spec["figures"].items()},
            "noise": done["noise"],
            "reported_tree": reported,
            "children": done["children"],
            "tree_ok": described[letter]["imports_ok"]
            and children_ok
            and (reported is None or within(reported, tree)),
            "result": result,
        }
        runs.append(run)
        print(f"[bench/trees]   {run['figures']} noise {run['noise']}", file=sys.stderr, flush=True)

    return {
        "bench": "trees",
        "measured": bench,
        "args": bench_args,
        "order": args.order,
        "rounds": args.rounds,
        "interpreter": sys.executable,
        "cpus": os.cpu_count(),
        "trees": described,
        "runs": runs,
        "summary": summarize(runs, letters, spec["figures"]),
        "noise": [{"tree": r["tree"], **r["noise"]} for r in runs],
        "tree_checks_ok": all(r["tree_ok"] for r in runs),
    }


if __name__ == "__main__":
    sys.exit(main())
