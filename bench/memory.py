"""The memory API under load: durable adds/s, rebuild from the log, restart from a snapshot, RSS.

Prints one JSON object on stdout (progress on stderr). Figures, with real fdatasync
(Durability.FSYNC) unless stated:

1. adds: 64 concurrent callers of `Session.add` (threads) and of `Session.add_async` (asyncio
   tasks) on a fresh Memory with the default config, ~300-byte contents spread over the fifo
   `messages`, priority `findings`, lru `working` and unbounded `documents` sections. The callers
   are spread over 64 sessions, or all on ONE session. Each runs twice: on fresh sessions
   (sections still filling, no eviction) and on sessions whose bounded sections were filled to
   their budget first (steady state: nearly every add to a bounded section evicts). Latency of
   an add is the time from the call to its return, i.e. until its record is durable. In the
   same run, the raw `LogWriter.append` / `submit(...).wait_async()` rate at the same concurrency with the
   same payloads (copied from the memory run's own item.added records) gives the ratio.
2. rebuild: a log of `--records` records (default 1,000,000) is built through the public API
   with Durability.UNSAFE_NO_FSYNC (the build is not measured, only the rebuild is). A fresh
   subprocess then times `Memory.open` with no snapshot (from zero, cold sparse index: writer
   recovery + fold) and `mem.rebuild(use_snapshots=False)` (the fold alone, index warm), against
   two floors on the same files in the same process: read + orjson.loads of every line, and
   `LogReader.records()` (read + Record.from_line, no projection).
3. restart: `Memory.open` on that log in a fresh subprocess with a fresh snapshot; the snapshot's
   size and the time `mem.snapshot()` took to write it.
4. RSS: ru_maxrss of fresh subprocesses that open a log of records/4 and one of `--records`
   records from zero. The build keeps the live items bounded (512 sessions, bounded sections
   with small budgets that evict), so both logs hold the same number of live items.
5. noise: loadavg and CPU idle, and 200 bare 300-byte write + fdatasync at start and end.

Usage: .venv/bin/python bench/memory.py [--quick] [--records N] [--seconds S] [--out FILE]
Figures and how to read them: docs/benchmarks.md, section "memory (bench/memory.py)".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

import orjson
from machine import busy_neighbours, cpu_times, disk_noise, idle_fraction, percentile

from eventstore import layout
from eventstore.jcs import canonical
from eventstore.reader import LogReader
from eventstore.store import open_log
from eventstore.writer import Durability
from sections.errors import NotAdmitted
from sections.runtime.memory import Memory

FAMILIES = ("threads", "asyncio")
CONCURRENCY = 64
MIX = ("messages", "findings", "working", "documents")
BOUNDED = ("messages", "findings", "working")
TARGETS = {
    "adds_per_s_min": 30_000,
    "rebuild_records_per_s_min": 100_000,
    "restart_from_snapshot_s_max": 1.0,
}
# The reference figures of docs/benchmarks.md (measured 2026-11-21, same kind of 2-vCPU VM).
CEILINGS = {
    "source": "docs/benchmarks.md, reference figures (2026-11-21, median of 3)",
    "append_step_cpu_records_per_s": 363_000,
    "replay_verified_records_per_s": 371_000,
    "replay_unverified_records_per_s": 517_000,
}
# The log for the rebuild: many sessions with small budgets, so live items stay bounded and the
# write-side eviction sort stays cheap while building. Replay cost per record does not depend on
# the budget: replay removes the victims the record names and never re-runs the policy.
BUILD_SESSIONS = 512
BUILD_OVERRIDES = {
    "messages": {"budget_tokens": 2_000},
    "findings": {"budget_tokens": 1_000},
    "working": {"budget_tokens": 1_000},
}
BUILD_READ_EVERY = 8  # every 8th operation is an agent read of `working` (an items.read record)

TEXT = (
    "the user prefers short answers with code examples in python and wants the assistant to "
    "remember project names deadlines review notes and the style guide for every reply about "
    "the ledger format merkle proofs checkpoints replay fan-out latency budget tests release "
    "quarterly revenue margin guidance churn cohort pipeline contract renewal diligence memo"
)
WORDS = tuple(TEXT.split(" "))
ROOT = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(f"[bench/memory] {message}", file=sys.stderr, flush=True)


# ---- inputs ----------------------------------------------------------------------------------


def make_contents(count: int, seed: int = 20261121) -> list[str]:
    """Texts of 280-320 characters (about 75 tokens with the default counter)."""
    rng = random.Random(seed)
    contents = []
    for _ in range(count):
        target = rng.randint(280, 320)
        words: list[str] = []
        length = 0
        while length < target:
            word = rng.choice(WORDS)
            words.append(word)
            length += len(word) + 1
        contents.append(" ".join(words)[:target])
    return contents


# ---- statistics and machine noise ------------------------------------------------------------


def ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def rss_mib() -> float:
    """ru_maxrss (RUSAGE_SELF). Linux carries it across fork + exec: a child's value is at least
    the RSS its parent had when it spawned the child, so children are spawned while the parent
    is small, and VmHWM (the peak of this process image alone) is reported beside it."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def vm_hwm_mib() -> float:
    """Peak RSS of this process image (VmHWM; starts afresh at exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def code_version() -> dict:
    """The commit, and the files of the measured packages changed in the working tree (it is
    shared with other engineers, so the code can move under a long run: compare start and end)."""

    def git(*args: str) -> str:
        try:
            run = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
        except OSError:
            return ""
        return run.stdout

    changed = git("status", "--porcelain", "--", "eventstore", "sections")
    return {
        "head": git("rev-parse", "--short", "HEAD").strip(),
        "uncommitted": [line[3:] for line in changed.splitlines() if line.strip()],
    }


def current_rss_mib() -> float:
    """Resident set size right now (peaks from freed buffers excluded)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def writer_thread_cpu() -> float:
    """CPU seconds used so far by this process's `ledgermem-writer` threads (utime + stime)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name == "ledgermem-writer" and t.native_id is not None:
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine_noise(quick: bool) -> dict:
    idle0 = cpu_times()
    time.sleep(0.2 if quick else 1.0)
    return {
        "loadavg": loadavg(),
        "cpu_idle": idle_fraction(idle0, cpu_times()),
        "busiest_other_processes": busy_neighbours({os.getpid()}),
    }


# ---- 1. adds through the memory API, and the raw writer at the same load ----------------------


class Load:
    """`CONCURRENCY` callers for warmup + seconds; only calls that end in the window count."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.stop = False
        self.samples: list[tuple[list[int], list[int]]] = []
        self.calls = 0

    def drive(self, make_call, duration: float) -> int:
        """Run the load; `make_call(k)` returns caller k's next call (a function or coroutine
        function). Returns the start time in perf_counter_ns."""
        self.stop = False
        t_start = time.perf_counter_ns()
        if self.family == "threads":
            workers = [
                threading.Thread(target=self._thread, args=(make_call(k),), daemon=True)
                for k in range(CONCURRENCY)
            ]
            for w in workers:
                w.start()
            time.sleep(duration)
            self.stop = True
            for w in workers:
                w.join()
        else:

            async def main() -> None:
                tasks = [asyncio.create_task(self._task(make_call(k))) for k in range(CONCURRENCY)]
                await asyncio.sleep(duration)
                self.stop = True
                await asyncio.gather(*tasks)

            asyncio.run(main())
        return t_start

    def _thread(self, call) -> None:
        ends: list[int] = []
        lats: list[int] = []
        clock = time.perf_counter_ns
        while not self.stop:
            t0 = clock()
            call()
            t1 = clock()
            ends.append(t1)
            lats.append(t1 - t0)
        self.samples.append((ends, lats))

    async def _task(self, call) -> None:
        ends: list[int] = []
        lats: list[int] = []
        clock = time.perf_counter_ns
        while not self.stop:
            t0 = clock()
            await call()
            t1 = clock()
            ends.append(t1)
            lats.append(t1 - t0)
        self.samples.append((ends, lats))

    def figures(self, t_start: int, warmup: float, seconds: float) -> dict:
        lo, hi = t_start + int(warmup * 1e9), t_start + int((warmup + seconds) * 1e9)
        lats = sorted(
            lat
            for ends, sample_lats in self.samples
            for end, lat in zip(ends, sample_lats, strict=True)
            if lo <= end < hi
        )
        self.calls = sum(len(ends) for ends, _ in self.samples)
        return {
            "calls_in_window": len(lats),
            "window_s": seconds,
            "per_s": round(len(lats) / seconds),
            "latency_ms": {
                "p50": ms(percentile(lats, 0.50)),
                "p99": ms(percentile(lats, 0.99)),
                "max": ms(lats[-1]) if lats else None,
            },
        }


class Commits:
    """Counts group commits: LogWriter calls listeners once per durable batch (one fdatasync)."""

    def __init__(self) -> None:
        self.commits = 0
        self.records = 0

    def __call__(self, records: list) -> None:
        self.commits += 1
        self.records += len(records)

    def figures(self) -> dict:
        return {
            "group_commits": self.commits,
            "records_per_commit": round(self.records / self.commits, 1) if self.commits else None,
        }


def fill_sections(mem: Memory, sessions: list, contents: list[str]) -> None:
    """Fill every bounded section of the sessions to its budget (a few evictions at the end)."""
    budgets = {c.name: c.budget_tokens for c in mem.config.sections}
    shortest = min(mem.counter.count(c) for c in contents)
    for s in sessions:
        for section in BOUNDED:
            need = budgets[section] // shortest + 4
            while need > 0:
                batch = [
                    {"content": contents[(need + j) % len(contents)]} for j in range(min(need, 64))
                ]
                if section == "findings":
                    for j, item in enumerate(batch):
                        item["priority"] = (need + j) % 10
                with suppress(NotAdmitted):  # a full priority section turns away a lower newcomer
                    s.add_many(section, batch)
                need -= len(batch)


def add_scenario(
    root: Path, family: str, spread: str, fill: str, contents: list[str], warmup: float,
    seconds: float, keep_payloads: list | None = None,
) -> dict:  # fmt: skip
    data_dir = root / f"adds-{family}-{spread}-{fill}"
    mem = Memory.open(data_dir)  # the default config, Durability.FSYNC
    sessions = [mem.session(f"bench-{i:02d}") for i in range(CONCURRENCY if spread == "64" else 1)]
    if fill == "full":
        fill_sections(mem, sessions, contents)
    commits = Commits()
    mem.writer.add_listener(commits)
    n_contents = len(contents)
    asyncio_mode = family == "asyncio"

    def make_call(k: int):
        session = sessions[k % len(sessions)]
        add = session.add_async if asyncio_mode else session.add
        rng = random.Random(k)
        state = {"n": k}

        def call():
            n = state["n"]
            state["n"] = n + 1
            section = MIX[n % 4]
            content = contents[(n * 7 + k) % n_contents]
            if section == "findings":
                # Under `priority` a newcomer that ranks below every resident is not admitted:
                # the call is answered (NotAdmitted) and appends nothing; it counts as a call.
                if asyncio_mode:
                    return add(section, content, priority=rng.randrange(10))
                try:
                    return add(section, content, priority=rng.randrange(10))
                except NotAdmitted:
                    return None
            return add(section, content)

        if asyncio_mode:

            async def acall():
                with suppress(NotAdmitted):
                    await call()

            return acall
        return call

    before = mem.stats()
    load = Load(family)
    idle0, cpu0, wall0 = cpu_times(), time.process_time(), time.perf_counter()
    writer0 = writer_thread_cpu()
    t_start = load.drive(make_call, warmup + seconds)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    writer_cpu = writer_thread_cpu() - writer0
    idle = idle_fraction(idle0, cpu_times())
    after = mem.stats()
    figures = load.figures(t_start, warmup, seconds)
    evictions = sum(after["evictions"].values()) - sum(before["evictions"].values())
    if keep_payloads is not None:
        head = mem.writer.size
        for record in mem.reader.records(after=max(-1, head - 4096)):
            if record.type == "item.added" and record.section in MIX:
                keep_payloads.append(
                    (record.tenant, record.session, record.section, record.type, record.payload)
                )
    mem.close()
    shutil.rmtree(data_dir)
    busy = (1 - idle) * (os.cpu_count() or 1)
    return {
        "adds_per_s": figures["per_s"],
        "add_ms": figures["latency_ms"],
        "adds_in_window": figures["calls_in_window"],
        "adds_total": load.calls,
        "evictions_per_add": round(evictions / load.calls, 3) if load.calls else None,
        "live_items_after": after["items"],
        "cpu_us_per_add": round(cpu / load.calls * 1e6, 1) if load.calls else None,
        "writer_thread_cpu_us_per_add": round(writer_cpu / load.calls * 1e6, 1)
        if load.calls
        else None,
        "process_cpu_cores": round(cpu / wall, 2),
        "machine_idle": idle,
        "neighbour_cores_est": round(max(0.0, busy - cpu / wall), 2),
        **commits.figures(),
    }


def raw_scenario(root: Path, family: str, payloads: list, warmup: float, seconds: float) -> dict:
    data_dir = root / f"raw-{family}"
    writer, _ = open_log(data_dir, durability=Durability.FSYNC)
    commits = Commits()
    writer.add_listener(commits)
    n_payloads = len(payloads)

    def make_call(k: int):
        state = {"n": k}
        if family == "threads":

            def call():
                n = state["n"]
                state["n"] = n + CONCURRENCY
                return writer.append(*payloads[n % n_payloads])

            return call

        async def acall():
            n = state["n"]
            state["n"] = n + CONCURRENCY
            await writer.submit([payloads[n % n_payloads]]).wait_async()

        return acall

    load = Load(family)
    cpu0, writer0 = time.process_time(), writer_thread_cpu()
    t_start = load.drive(make_call, warmup + seconds)
    cpu, writer_cpu = time.process_time() - cpu0, writer_thread_cpu() - writer0
    figures = load.figures(t_start, warmup, seconds)
    writer.close()
    shutil.rmtree(data_dir)
    return {
        "appends_per_s": figures["per_s"],
        "append_ms": figures["latency_ms"],
        "cpu_us_per_append": round(cpu / load.calls * 1e6, 1) if load.calls else None,
        "writer_thread_cpu_us_per_append": round(writer_cpu / load.calls * 1e6, 1)
        if load.calls
        else None,
        **commits.figures(),
    }


# ---- 2-4. the big log: build, rebuild, restart, RSS (each in a fresh subprocess) --------------


def child(mode: str, data_dir: Path, records: int = 0, reps: int = 2) -> dict:
    """Run `bench/memory.py --child MODE` in a fresh interpreter; its stdout is one JSON line."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--dir",
        str(data_dir),
    ]
    command += ["--records", str(records), "--reps", str(reps)]
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        raise RuntimeError(f"child {mode} failed:\n{run.stderr}")
    return orjson.loads(run.stdout)


def drop_caches_of_memory(data_dir: Path, index_too: bool) -> None:
    """Remove snapshots (a cache) and optionally the saved sparse indexes (also a cache)."""
    shutil.rmtree(data_dir / "snapshots", ignore_errors=True)
    if index_too:
        shutil.rmtree(data_dir / "index", ignore_errors=True)


def live_items(mem: Memory) -> dict:
    stats = mem.stats()
    return {"sessions": stats["sessions"], "live_items": stats["items"]}


def child_build(data_dir: Path, records: int) -> dict:
    """A log of about `records` records through the public API, without fsync (not measured)."""
    contents = make_contents(1024, seed=records)
    t0 = time.perf_counter()
    mem = Memory.open(data_dir, durability=Durability.UNSAFE_NO_FSYNC, snapshot_every=1 << 62)
    sessions = [
        mem.session(f"build-{i:04d}", sections=BUILD_OVERRIDES) for i in range(BUILD_SESSIONS)
    ]
    target = records - 2  # leave room for log.close (and the snapshot's own nothing)
    writer = mem.writer

    async def worker(k: int) -> None:
        rng = random.Random(k)
        n = k
        while writer.next_seq < target:
            session = sessions[n % BUILD_SESSIONS]
            if n % BUILD_READ_EVERY == BUILD_READ_EVERY - 1:
                await session.get_async("working")
            else:
                section = BOUNDED[n % 3]
                content = contents[rng.randrange(len(contents))]
                if section == "findings":
                    with suppress(NotAdmitted):  # nothing appended; the build goes on
                        await session.add_async(section, content, priority=rng.randrange(10))
                else:
                    await session.add_async(section, content)
            n += CONCURRENCY

    async def main() -> None:
        await asyncio.gather(*(worker(k) for k in range(CONCURRENCY)))

    # The adds alone (sessions made, close and its snapshot not counted): records per second
    # and, steadier on a shared machine, this process's CPU per record (all its threads).
    first, writer0 = writer.next_seq, writer_thread_cpu()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(main())
    loop_records = writer.next_seq - first
    loop_cpu, loop_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    loop_writer_cpu = writer_thread_cpu() - writer0
    figures = live_items(mem)
    mem.close()
    elapsed = time.perf_counter() - t0
    log_bytes = sum(p.stat().st_size for _, p in layout.list_segments(data_dir / "log"))
    reader = LogReader(data_dir / "log")
    return {
        "records": reader.head() + 1,
        "build_s": round(elapsed, 1),
        "build_records_per_s": round((reader.head() + 1) / elapsed),
        "log_bytes": log_bytes,
        "line_bytes_mean": round(log_bytes / (reader.head() + 1)),
        "loop_records": loop_records,
        "loop_records_per_s": round(loop_records / loop_wall),
        "loop_cpu_us_per_record": round(loop_cpu / loop_records * 1e6, 1),
        "loop_writer_thread_cpu_us_per_record": round(loop_writer_cpu / loop_records * 1e6, 1),
        **figures,
    }


class Timed:
    """Wall time, this process's CPU time and the machine's idle fraction over a block.

    On a shared box the wall rate moves with the neighbours; records per CPU-second of this
    process is the steadier figure, and the idle fraction says how busy the machine was."""

    def __enter__(self) -> Timed:
        self.idle0, self.cpu0, self.t0 = cpu_times(), time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.s = time.perf_counter() - self.t0
        self.cpu_s = time.process_time() - self.cpu0
        self.idle = idle_fraction(self.idle0, cpu_times())

    def figures(self, records: int) -> dict:
        return {
            "records": records,
            "s": round(self.s, 3),
            "records_per_s": round(records / self.s),
            "cpu_s": round(self.cpu_s, 3),
            "records_per_cpu_s": round(records / self.cpu_s) if self.cpu_s else None,
            "machine_idle": self.idle,
        }


def child_floors(data_dir: Path) -> dict:
    """Reading floors on the same files: lines + orjson.loads; LogReader.records() (no apply)."""
    out = {}
    loads = orjson.loads
    count = 0
    with Timed() as timed:
        for _, path in layout.list_segments(data_dir / "log"):
            with open(path, "rb") as f:
                for line in f:
                    loads(line)
                    count += 1
    out["read_loads"] = timed.figures(count)
    reader = LogReader(data_dir / "log", index_dir=data_dir / "index")
    with Timed() as timed:
        count = sum(1 for _ in reader.records())
    out["reader_records"] = timed.figures(count)
    return out


def child_open(data_dir: Path, reps: int, rebuild: bool) -> dict:
    """Time Memory.open; with `rebuild`, also the fold alone, the floors and a snapshot write."""
    snapshots = sorted(p.name for p in (data_dir / "snapshots").glob("snap-*.json"))
    index_saved = (data_dir / "index").is_dir()
    with Timed() as timed:
        mem = Memory.open(data_dir)
    opened = timed.figures(mem.writer.size)
    out = {
        "snapshot_present": snapshots[-1] if snapshots else None,
        "saved_index_present": index_saved,
        "open_s": opened["s"],
        "records": mem.writer.size,
        "open_records_per_s": opened["records_per_s"],
        "open_cpu_s": opened["cpu_s"],
        "open_records_per_cpu_s": opened["records_per_cpu_s"],
        "open_machine_idle": opened["machine_idle"],
        "ru_maxrss_mib_after_open": rss_mib(),
        "vm_hwm_mib_after_open": vm_hwm_mib(),
        "current_rss_mib_after_open": current_rss_mib(),
        **live_items(mem),
    }
    if rebuild:
        runs = []
        live_hash = mem.state_hash()
        for _ in range(reps):
            with Timed() as timed:
                state = mem.rebuild(use_snapshots=False)
            runs.append(timed.figures(state.seq + 1))
            same = state.state_hash() == live_hash
            del state
            if not same:
                raise AssertionError("the rebuilt state differs from the live state")
        out["rebuild_runs"] = runs
        out["rebuild_records_per_s"] = max(r["records_per_s"] for r in runs)
        out["rebuild_records_per_cpu_s"] = max(r["records_per_cpu_s"] for r in runs)
        out["rebuild_equals_live_state"] = True
        out["floors"] = child_floors(data_dir)
        t0 = time.perf_counter()
        path = mem.snapshot()
        out["snapshot"] = {
            "write_s": round(time.perf_counter() - t0, 3),
            "bytes": path.stat().st_size,
            "seq": int(path.stem.split("-")[1]),
        }
    mem.close()
    return out


def run_child(args: argparse.Namespace) -> int:
    if args.child == "baseline":
        result = {}
    elif args.child == "build":
        result = child_build(args.dir, args.records)
    elif args.child == "rebuild":
        result = child_open(args.dir, args.reps, rebuild=True)
    elif args.child == "open":
        result = child_open(args.dir, args.reps, rebuild=False)
    else:
        raise SystemExit(f"unknown child mode {args.child!r}")
    result["ru_maxrss_mib"] = rss_mib()
    result["vm_hwm_mib"] = vm_hwm_mib()
    print(orjson.dumps(result).decode())
    return 0


# ---- the whole run ---------------------------------------------------------------------------


def run(root: Path, args: argparse.Namespace) -> dict:
    quick = args.quick
    seconds = args.seconds if args.seconds is not None else (0.3 if quick else 4.0)
    warmup = 0.1 if quick else 1.0
    records = args.records or (10_000 if quick else 1_000_000)
    noise_syncs = 20 if quick else 200
    contents = make_contents(1024)

    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    code = {"start": code_version()}
    machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
    noise = {"start": machine_noise(quick)}
    noise["start"]["fdatasync"] = disk_noise(root, noise_syncs)
    log(f"noise at start: {noise['start']}")

    # 2-4. the big log first, while this process is small (see rss_mib)
    small, big = root / "log-small", root / "log-big"
    built = {}
    for label, path, size in (("small", small, records // 4), ("big", big, records)):
        log(f"building a {size}-record log (UNSAFE_NO_FSYNC, not measured) ...")
        built[label] = child("build", path, size)
        log(f"built {label}: {built[label]}")
    for path in (small, big):
        drop_caches_of_memory(path, index_too=True)
    log("rebuild from zero in a fresh process ...")
    rebuild = child("rebuild", big, reps=1 if quick else 2)
    floors = rebuild["floors"]
    rebuild["ratios"] = {
        "to_read_loads_floor_same_run": round(
            rebuild["rebuild_records_per_s"] / floors["read_loads"]["records_per_s"], 3
        ),
        "to_reader_records_floor_same_run": round(
            rebuild["rebuild_records_per_s"] / floors["reader_records"]["records_per_s"], 3
        ),
        "to_replay_verified_ceiling": round(
            rebuild["rebuild_records_per_s"] / CEILINGS["replay_verified_records_per_s"], 3
        ),
        "per_cpu_s_to_read_loads_floor_same_run": round(
            rebuild["rebuild_records_per_cpu_s"] / floors["read_loads"]["records_per_cpu_s"], 3
        ),
    }
    log(f"rebuild: {rebuild}")
    log("restart from the fresh snapshot in a fresh process ...")
    restart = child("open", big)
    log(f"restart: {restart}")
    drop_caches_of_memory(big, index_too=False)
    rss = {
        "parent_ru_maxrss_mib_at_spawn": rss_mib(),
        "baseline_interpreter": child("baseline", root),
    }
    for label, path in (("small", small), ("big", big)):
        rss[label] = child("open", path)
        log(f"rss {label}: {rss[label]}")

    # 1. adds
    adds: dict[str, dict] = {}
    payloads: list = []
    for family in FAMILIES:
        adds[family] = {}
        for fill in ("full", "fresh"):
            for spread in ("64", "1"):
                name = f"{spread}_sessions_{fill}"
                keep = payloads if not payloads and fill == "full" and spread == "64" else None
                figures = add_scenario(root, family, spread, fill, contents, warmup, seconds, keep)
                adds[family][name] = figures
                log(
                    f"adds {family} {name}: {figures['adds_per_s']}/s, p50 "
                    f"{figures['add_ms']['p50']} ms p99 {figures['add_ms']['p99']} ms, "
                    f"{figures['cpu_us_per_add']} us CPU/add, {figures['records_per_commit']} "
                    f"rec/commit, {figures['evictions_per_add']} evictions/add"
                )
    raw: dict[str, dict] = {}
    for family in FAMILIES:
        raw[family] = raw_scenario(root, family, payloads, warmup, seconds)
        log(f"raw LogWriter {family}: {raw[family]}")
        for figures in adds[family].values():
            figures["ratio_to_raw_append"] = round(
                figures["adds_per_s"] / raw[family]["appends_per_s"], 3
            )

    code["end"] = code_version()
    noise["end"] = machine_noise(quick)
    noise["end"]["fdatasync"] = disk_noise(root, noise_syncs)
    log(f"noise at end: {noise['end']}")

    payload_bytes = [len(canonical(p[4])) for p in payloads]
    best = {f: max(v["adds_per_s"] for v in adds[f].values()) for f in FAMILIES}
    verdicts = {
        "adds_64_sessions_full": {
            f: adds[f]["64_sessions_full"]["adds_per_s"] >= TARGETS["adds_per_s_min"]
            for f in FAMILIES
        },
        "adds_any_scenario": {f: best[f] >= TARGETS["adds_per_s_min"] for f in FAMILIES},
        "rebuild": rebuild["rebuild_records_per_s"] >= TARGETS["rebuild_records_per_s_min"],
        "rebuild_via_open": rebuild["open_records_per_s"] >= TARGETS["rebuild_records_per_s_min"],
        "rebuild_per_cpu_s": rebuild["rebuild_records_per_cpu_s"]
        >= TARGETS["rebuild_records_per_s_min"],
        "restart_from_snapshot": restart["open_s"] <= TARGETS["restart_from_snapshot_s_max"],
    }
    return {
        "bench": "memory",
        "started_at": started_at,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "durability_adds": Durability.FSYNC.value,
            "durability_build": Durability.UNSAFE_NO_FSYNC.value + " (build only, not measured)",
            "concurrency": CONCURRENCY,
            "sections_mix": list(MIX),
            "seconds_per_scenario": seconds,
            "warmup_s": warmup,
            "content_chars": [min(map(len, contents)), max(map(len, contents))],
            "record_payload_jcs_bytes_mean": round(sum(payload_bytes) / len(payload_bytes))
            if payload_bytes
            else None,
            "records": records,
            "build": {
                "sessions": BUILD_SESSIONS,
                "section_overrides": BUILD_OVERRIDES,
                "mix": "adds cycling messages/findings/working; every 8th op an agent read "
                "of working",
            },
            "quick": quick,
            "filesystem_dir": str(root.parent),
        },
        "code": code,
        "machine": machine,
        "noise": noise,
        "adds": adds,
        "raw_append": raw,
        "built_logs": built,
        "rebuild": rebuild,
        "restart_from_snapshot": restart,
        "rss": rss,
        "ceilings": CEILINGS,
        "targets": TARGETS,
        "pass": verdicts,
        "peak_rss_mib": rss_mib(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, short")
    parser.add_argument("--records", type=int, help="records of the big log (1,000,000)")
    parser.add_argument("--seconds", type=float, help="measured seconds per add scenario (4)")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    parser.add_argument("--dir", type=Path, help="parent of the temporary data directory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args)

    root = Path(tempfile.mkdtemp(prefix="ledgermem-bench-memory-", dir=args.dir))
    try:
        result = run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["command"] = " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
