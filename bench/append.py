"""Durable appends/s and ack latency of LogWriter, against the format's own CPU floor.

Prints one JSON object on stdout (progress on stderr). Every scenario opens a fresh log in a
temporary data directory with real fdatasync (Durability.FSYNC) and appends ~300-byte payloads
(text, role, tags, a float, an int) from 1, 8 and 64 concurrent appenders, as threads calling
`append` and as asyncio tasks awaiting `submit([entry]).wait_async()`. The ack latency of one append is the time
from the call to its return, i.e. until the record is durable.

In the same run:
- the CPU floor: a bare loop doing the format's work over the same payloads (orjson sorted dumps,
  pd, preimage, h, one Merkle append, the line, a buffered write, no fsync), run before and after
  the scenarios; the faster of the two is the floor the ratios use;
- the disk noise: bare 300-byte `write + fdatasync` on the same filesystem, at the start and end;
- the machine noise: 1-minute loadavg and CPU idle before the run, and per scenario the cores
  busy outside this process.

With `--store postgresql://...` the same scenarios also run against the PostgreSQL log: a
LogWriter on a PgSink (eventstore/pg/) leading partition 0 of a fresh store, in a scratch
database the bench creates on that server and drops afterwards (the URL's own database is only
used to connect), with the file store's scenarios beside them in the same run. Their CPU figures
add the server's (`postgres_cpu_us_per_record`: from /proc, the postgres processes alive for the
whole scenario, i.e. its own backend and the server's background processes, which other clients
of the same server also use; see `neighbour_cores_est`).

With `--store redis://...` (the flag may be given twice, one URL per engine) the scenarios run on
a RedisSink (eventstore/redis/) too: the URL's database must be empty (the store is created in
it and its keys deleted afterwards), and the server must run appendonly yes, appendfsync always.
`redis_cpu_us_per_record` is the redis-server processes' CPU, from /proc as for PostgreSQL. The
figures go under `stores` by engine; `store` stays the first one's (as before).

Usage: .venv/bin/python bench/append.py [--seconds S] [--quick] [--out FILE] [--store URL]...
Figures and how to read them: docs/benchmarks.md, section "append".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import platform
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from binascii import hexlify
from datetime import UTC, datetime
from pathlib import Path

import orjson
from machine import cpu_times, disk_noise, idle_fraction, percentile

import eventstore
from eventstore import layout
from eventstore.jcs import canonical, check_value
from eventstore.merkle import CompactRange
from eventstore.record import PAY_TAG, REC_TAG, genesis
from eventstore.store import open_log
from eventstore.writer import Durability

CONCURRENCY = (1, 8, 64)
FAMILIES = ("threads", "asyncio")
TARGETS = {"concurrency": 64, "records_per_s_min": 50_000, "ack_p99_ms_max": 20.0}
# The reference figures of docs/benchmarks.md (measured 2026-11-21, same kind of 2-vCPU VM).
CEILINGS = {
    "source": "docs/benchmarks.md, reference figures (2026-11-21, median of 3)",
    "append_step_cpu_records_per_s": 363_000,
    "group_commit_disk_side_records_per_s": 940_000,
    "fsync_each_quiet_records_per_s": 5_600,
}
IDENTS = ("acme", "messages", "item.added")  # tenant, section, type; sessions vary
SESSIONS = tuple(f"session-{n:04d}" for n in range(16))
TEXT = (
    "the user prefers short answers with code examples in python and wants the assistant to "
    "remember project names deadlines review notes and the style guide for every reply about "
    "the ledger format merkle proofs checkpoints replay fan-out latency budget tests release"
)
WORDS = tuple(TEXT.split())
ROLES = ("user", "assistant", "tool", "system")
TAGS = ("preference", "project", "deadline", "style", "review", "python", "spec", "todo")

_u64_i64 = struct.Struct(">Qq").pack
_u16 = struct.Struct(">H").pack


def log(message: str) -> None:
    print(f"[bench/append] {message}", file=sys.stderr, flush=True)


# ---- inputs ----------------------------------------------------------------------------------


def make_payloads(count: int, seed: int = 20261121) -> list[dict]:
    """Payloads of ~300 JCS bytes: a text, a role, tags, a float score and an int turn."""
    rng = random.Random(seed)
    payloads = []
    for _ in range(count):
        words: list[str] = []
        target = rng.randint(170, 250)
        while sum(map(len, words)) + len(words) < target:
            words.append(rng.choice(WORDS))
        payloads.append(
            {
                "text": " ".join(words),
                "role": rng.choice(ROLES),
                "tags": rng.sample(TAGS, rng.randint(1, 3)),
                "score": round(rng.uniform(0.01, 0.99), 4),
                "turn": rng.randrange(1, 10_000),
            }
        )
    return payloads


# ---- statistics and machine noise ------------------------------------------------------------


def ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def thread_cpu_seconds(native_id: int) -> float:
    """CPU time of one thread of this process (utime + stime), from /proc."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the CPU floor ---------------------------------------------------------------------------


def cpu_floor(payloads: list[dict], seconds: float, directory: Path) -> dict:
    """The format's own work per record in a bare loop on one core; buffered write, no fsync."""
    dumps, sort_keys, sha256 = orjson.dumps, orjson.OPT_SORT_KEYS, hashlib.sha256
    tenant, section, type_ = IDENTS
    tree = CompactRange()
    prev = genesis("bench.local/floor")
    salts = os.urandom(16 * 4096)
    n_payloads = len(payloads)
    path = directory / "floor.jsonl"
    seq = 0
    t_start = time.perf_counter()
    deadline = t_start + seconds
    with open(path, "wb", buffering=1 << 20) as f:
        write = f.write
        while True:
            ts = time.time_ns() // 1000
            for _ in range(1024):
                payload = payloads[seq % n_payloads]
                session = SESSIONS[seq & 15]
                salt = salts[(seq & 4095) << 4 : ((seq & 4095) + 1) << 4]
                jcs = dumps(payload, option=sort_keys)
                pd = sha256(PAY_TAG + salt + jcs).digest()
                t, s, c, y = tenant.encode(), session.encode(), section.encode(), type_.encode()
                h = sha256(
                    b"\x00" + REC_TAG + prev + _u64_i64(seq, ts)
                    + _u16(len(t)) + t + _u16(len(s)) + s + _u16(len(c)) + c + _u16(len(y)) + y
                    + pd
                ).digest()  # fmt: skip
                tree.append(h)
                write(
                    b'{"v":1,"seq":%d,"ts":%d,"tenant":"%b","session":"%b","section":"%b",'
                    b'"type":"%b","prev":"%b","h":"%b","pd":"%b","salt":"%b","payload":%b}\n'
                    % (seq, ts, t, s, c, y, hexlify(prev), hexlify(h), hexlify(pd), hexlify(salt), jcs)
                )  # fmt: skip
                prev = h
                seq += 1
            if time.perf_counter() >= deadline:
                break
    elapsed = time.perf_counter() - t_start
    path.unlink()
    return {
        "records": seq,
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(seq / elapsed),
        "us_per_record": round(elapsed / seq * 1e6, 3),
    }


# ---- the project under load ------------------------------------------------------------------


class Scenario:
    """One fresh log, `concurrency` appenders for warmup + seconds; counts the measured window."""

    def __init__(
        self,
        root: Path,
        family: str,
        concurrency: int,
        payloads: list[dict],
        store: str | None = None,
    ):
        self.family, self.concurrency, self.payloads = family, concurrency, payloads
        self.store = store  # a server URL: run on a store's partition instead of files
        self.data_dir = root / f"{family}-{concurrency}{'-store' if store else ''}"
        self.stop = False
        self.samples: list[tuple[list[int], list[int]]] = []
        self.commits = 0
        self.committed = 0
        self.fsync_walls: list[float] = []

    def _on_batch(self, records: list) -> None:
        # add_listener: called on the writer thread once per durable batch, i.e. per fdatasync
        # of a group commit. Counting them is exact and wraps nothing of the writer.
        self.commits += 1
        self.committed += len(records)

    def _on_fsync(self, seconds: float, lines: int) -> None:
        # LogWriter.fsync_observer, where the writer has it: every segment fdatasync, with the
        # wall time the writer thread spent in the call (GIL reacquisition included).
        self.fsync_walls.append(seconds)

    def _items(self, k: int):
        payloads, n = self.payloads, len(self.payloads)
        tenant, section, type_ = IDENTS
        i = k
        while True:
            yield tenant, SESSIONS[k & 15], section, type_, payloads[i % n]
            i += self.concurrency

    def _thread_worker(self, k: int, writer) -> None:
        ends: list[int] = []
        lats: list[int] = []
        append, clock = writer.append, time.perf_counter_ns
        for item in self._items(k):
            if self.stop:
                break
            t0 = clock()
            append(*item)
            t1 = clock()
            ends.append(t1)
            lats.append(t1 - t0)
        self.samples.append((ends, lats))

    async def _task_worker(self, k: int, writer) -> None:
        ends: list[int] = []
        lats: list[int] = []
        submit, clock = writer.submit, time.perf_counter_ns
        for item in self._items(k):
            if self.stop:
                break
            t0 = clock()
            await submit([item]).wait_async()
            t1 = clock()
            ends.append(t1)
            lats.append(t1 - t0)
        self.samples.append((ends, lats))

    def _drive_threads(self, writer, duration: float) -> None:
        workers = [
            threading.Thread(target=self._thread_worker, args=(k, writer), daemon=True)
            for k in range(self.concurrency)
        ]
        for w in workers:
            w.start()
        time.sleep(duration)
        self.stop = True
        for w in workers:
            w.join()

    async def _drive_tasks(self, writer, duration: float) -> None:
        tasks = [asyncio.create_task(self._task_worker(k, writer)) for k in range(self.concurrency)]
        await asyncio.sleep(duration)
        self.stop = True
        await asyncio.gather(*tasks)

    def run(self, warmup: float, seconds: float) -> dict:
        if self.store is None:
            writer, _ = open_log(self.data_dir, durability=Durability.FSYNC)
            figures = self._measure(writer, warmup, seconds)
            log_bytes = sum(
                p.stat().st_size for _, p in layout.list_segments(self.data_dir / "log")
            )
            figures["line_bytes_mean"] = round(log_bytes / max(1, figures.pop("size")))
            figures["segments"] = len(layout.list_segments(self.data_dir / "log"))
            shutil.rmtree(self.data_dir)
            return figures
        with scratch_store(self.store, self.data_dir) as (url, info, key):
            from eventstore.shared.keeper import LeaseKeeper
            from eventstore.stores import open_engine

            engine = open_engine(url)
            session = engine.session()
            lease = session.take(0, "bench", 10.0)
            session.close()
            assert lease is not None, "a fresh store's partition 0 is free"
            writer = engine.open_partition_writer(info, key, 0, lease)
            keeper = LeaseKeeper(engine.session, lease).start()
            process = server_process(url)
            server0 = server_cpu_by_pid(process)
            figures = self._measure(writer, warmup, seconds)
            server = server_cpu_since(process, server0)
            keeper.stop()
            count, total = stored_line_bytes(url)
            figures["line_bytes_mean"] = round(total / max(1, count))
            figures["segments"] = (count - 1 >> info.seg_bits) + 1
            figures.pop("size")
            appended = figures["appended_total"]
            cpu_name = "postgres" if process == "postgres" else "redis"
            figures[f"{cpu_name}_cpu_us_per_record"] = (
                round(server / appended * 1e6, 2) if appended else None
            )
            sink = (
                "PgSink: one per commit statement"
                if process == "postgres"
                else ("RedisSink: one per commit script")
            )
            figures["fsync_count_method"] = f"fsync_observer ({sink})"
            return figures

    def _measure(self, writer, warmup: float, seconds: float) -> dict:
        writer.add_listener(self._on_batch)
        observed = hasattr(writer, "fsync_observer")
        if observed:
            writer.fsync_observer = self._on_fsync
        writer_tid = next(
            (t.native_id for t in threading.enumerate() if t.name == "ledgermem-writer"), None
        )
        size0 = writer.size
        cpu0, wall0, idle0 = time.process_time(), time.perf_counter(), cpu_times()
        writer_cpu0 = thread_cpu_seconds(writer_tid) if writer_tid else 0.0
        t_start = time.perf_counter_ns()
        if self.family == "threads":
            self._drive_threads(writer, warmup + seconds)
        else:
            asyncio.run(self._drive_tasks(writer, warmup + seconds))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        writer_cpu = thread_cpu_seconds(writer_tid) - writer_cpu0 if writer_tid else None
        idle = idle_fraction(idle0, cpu_times())
        appended = writer.size - size0
        writer.close()

        lo, hi = t_start + int(warmup * 1e9), t_start + int((warmup + seconds) * 1e9)
        lats = sorted(
            lat
            for ends, sample_lats in self.samples
            for end, lat in zip(ends, sample_lats, strict=True)
            if lo <= end < hi
        )
        ncpu = os.cpu_count() or 1
        busy_cores = (1 - idle) * ncpu
        syncs = len(self.fsync_walls) if observed else self.commits
        walls = sorted(self.fsync_walls)
        return {
            "concurrency": self.concurrency,
            "records": len(lats),
            "window_s": seconds,
            "records_per_s": round(len(lats) / seconds),
            "ack_ms": {
                "p50": ms(percentile(lats, 0.50)),
                "p99": ms(percentile(lats, 0.99)),
                "max": ms(lats[-1]) if lats else None,
                "mean": ms(sum(lats) / len(lats)) if lats else None,
            },
            # Whole scenario (warmup included): CPU of the process and of the writer thread.
            "appended_total": appended,
            "cpu_us_per_record": round(cpu / appended * 1e6, 2) if appended else None,
            "process_cpu_cores": round(cpu / wall, 3),
            "writer_thread_cpu_share": round(writer_cpu / wall, 3)
            if writer_cpu is not None
            else None,
            "writer_thread_us_per_record": round(writer_cpu / appended * 1e6, 2)
            if appended and writer_cpu is not None
            else None,
            "machine_idle": idle,
            "neighbour_cores_est": round(max(0.0, busy_cores - cpu / wall), 2),
            # Exact either way: add_listener is called once per durable batch (its records
            # include the few control records); fsync_observer, where the writer has it, once
            # per segment fdatasync. Not counted: the checkpoint file's fsync and directory
            # fsync (about 2/s) and the directory fsync of a rotation (per 65,536 records).
            "fsync_count_method": "fsync_observer" if observed else "add_listener",
            "group_commits": self.commits,
            "records_per_commit": round(self.committed / self.commits, 2) if self.commits else None,
            "segment_fdatasyncs": syncs,
            "fdatasyncs_per_record": round(syncs / appended, 5) if appended else None,
            "fdatasync_in_writer_ms": {
                "p50": ms(percentile(walls, 0.50) * 1e9),
                "p99": ms(percentile(walls, 0.99) * 1e9),
            }
            if walls
            else None,
            "size": writer.size,
        }


# ---- the shared stores (--store) ---------------------------------------------------------------


def server_process(url: str) -> str:
    return "redis-server" if url.startswith(("redis", "unix")) else "postgres"


def stored_line_bytes(url: str) -> tuple[int, int]:
    """(records, bytes of their lines) held for partition 0."""
    if server_process(url) == "postgres":
        from eventstore.pg.schema import connect

        with connect(url) as conn:
            return conn.execute(
                "SELECT count(*), sum(length(line)) FROM lm_record WHERE partition = 0"
            ).fetchone()
    from eventstore.redis.reader import RedisReader
    from eventstore.redis.schema import connect as redis_connect

    client = redis_connect(url)
    try:
        reader = RedisReader(client)
        count = total = 0
        while rows := reader.rows(0, count, 5000):
            count += len(rows)
            total += sum(len(line) for _, line in rows)
        return count, total
    finally:
        client.close()


@contextlib.contextmanager
def scratch_store(server_url: str, data_dir: Path):
    """A fresh one-partition store: in a scratch database on a PostgreSQL server (dropped
    after), or in the Redis URL's database, which must be empty (its keys deleted after)."""
    if server_process(server_url) == "redis-server":
        with scratch_redis_store(server_url, data_dir) as found:
            yield found
        return
    import psycopg

    from eventstore.layout import DataDir
    from eventstore.pg.schema import init_store
    from eventstore.store import load_or_create_key

    name = f"lm_bench_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = server_url.rsplit("/", 1)[0] + "/" + name
    try:
        info = init_store(url, 1, data_dir, origin="bench.local/store")
        key = load_or_create_key(DataDir(data_dir), info.origin, create=False).key
        yield url, info, key
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
            )
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def scratch_redis_store(url: str, data_dir: Path):
    from eventstore.layout import DataDir
    from eventstore.redis.schema import connect, init_store
    from eventstore.store import load_or_create_key

    client = connect(url)
    try:
        if client.dbsize():
            raise SystemExit(f"bench: {url}'s database is not empty: give an empty one (/N)")
        info = init_store(url, 1, data_dir, origin="bench.local/store")
        key = load_or_create_key(DataDir(data_dir), info.origin, create=False).key
        yield url, info, key
    finally:
        for name in list(client.scan_iter("lm:*")):
            client.delete(name)
        client.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def server_cpu_by_pid(process: str) -> dict[int, float]:
    """CPU seconds (utime + stime) of each process of that name on this machine, from /proc."""
    found = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, _, rest = stat.partition(" (")[2].rpartition(") ")
        if name.startswith(process):
            fields = rest.split()
            found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def server_cpu_since(process: str, before: dict[int, float]) -> float:
    """The server's CPU since `before`, over the processes alive at both ends: the scenario's
    own backend and the server's background processes (WAL writer, checkpointer...), without
    the CPU of other clients' backends that ended meanwhile."""
    after = server_cpu_by_pid(process)
    return sum(after[pid] - before[pid] for pid in after.keys() & before.keys())


def server_description(server_url: str) -> dict:
    from eventstore.shared import redact_url

    if server_process(server_url) == "redis-server":
        from eventstore.redis.schema import config_value
        from eventstore.redis.schema import connect as redis_connect

        client = redis_connect(server_url)
        try:
            version = client.info("server")["redis_version"]
            settings = {
                name: config_value(client, name)
                for name in ("appendonly", "appendfsync", "aof-use-rdb-preamble", "save")
            }
        finally:
            client.close()
        return {"url": redact_url(server_url), "server_version": version, "settings": settings}
    from eventstore.pg.schema import connect

    with connect(server_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('synchronous_commit', 'fsync', 'wal_sync_method', 'commit_delay', "
                "'shared_buffers', 'max_wal_size')"
            ).fetchall()
        )
    return {"url": redact_url(server_url), "server_version": version, "settings": settings}


# ---- the whole run ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, help="measured seconds per scenario (3, or 0.5 with --quick)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: short, fewer syncs")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    parser.add_argument(
        "--dir", type=Path, help="parent of the temporary data directory (default: system temp)"
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        action="append",
        default=[],
        help="also run every scenario on a store: postgresql:// (a scratch database on this "
        "server) or redis:// (an empty database); may be given once per engine",
    )
    args = parser.parse_args(argv)
    for url in args.store:
        if not url.startswith(("postgresql://", "postgres://", "redis://", "rediss://", "unix://")):
            parser.error(f"--store wants a postgresql:// or redis:// URL, not {url!r}")
    seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 3.0)
    warmup = min(0.5, 0.2 * seconds)
    noise_syncs = 20 if args.quick else 200

    root = Path(tempfile.mkdtemp(prefix="ledgermem-bench-", dir=args.dir))
    try:
        result = run(root, seconds, warmup, noise_syncs, args.quick, args.store)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["command"] = " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


def code_version() -> dict:
    """The commit of the eventstore measured, and whether its files differed from it."""
    repo = Path(eventstore.__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            run = subprocess.run(
                ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return run.stdout.strip() if run.returncode == 0 else None

    status = git("status", "--porcelain", "--", "eventstore")
    return {
        "eventstore": str(repo / "eventstore"),
        "commit": git("rev-parse", "--short=12", "HEAD"),
        "eventstore_uncommitted_changes": None if status is None else bool(status),
    }


def run(
    root: Path, seconds: float, warmup: float, noise_syncs: int, quick: bool, stores: list[str]
) -> dict:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    code = code_version()
    payloads = make_payloads(1024)
    jcs_sizes = [len(canonical(p)) for p in payloads]

    idle0 = cpu_times()
    time.sleep(0.2 if quick else 1.0)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "orjson": orjson.__version__,
        "loadavg_1m_before": round(os.getloadavg()[0], 2),
        "cpu_idle_before": idle_fraction(idle0, cpu_times()),
    }
    log(f"machine before: {machine}")

    noise = {"start": disk_noise(root, noise_syncs)}
    log(f"disk noise at start: {noise['start']}")
    floors = [cpu_floor(payloads, seconds, root)]
    log(f"cpu floor: {floors[0]}")

    results: dict[str, dict[str, dict]] = {}
    for family in FAMILIES:
        results[family] = {}
        for concurrency in CONCURRENCY:
            scenario = Scenario(root, family, concurrency, payloads)
            figures = scenario.run(warmup, seconds)
            results[family][str(concurrency)] = figures
            log(
                f"{family} x{concurrency}: {figures['records_per_s']} rec/s, ack p50 "
                f"{figures['ack_ms']['p50']} ms p99 {figures['ack_ms']['p99']} ms, "
                f"{figures['records_per_commit']} rec/commit"
            )

    by_store: dict[str, dict[str, dict[str, dict]]] = {}
    for store in stores:
        store_results = by_store[store] = {}
        for family in FAMILIES:
            store_results[family] = {}
            for concurrency in CONCURRENCY:
                scenario = Scenario(root, family, concurrency, payloads, store)
                figures = scenario.run(warmup, seconds)
                store_results[family][str(concurrency)] = figures
                log(
                    f"{server_process(store)} {family} x{concurrency}: "
                    f"{figures['records_per_s']} rec/s, ack p50 "
                    f"{figures['ack_ms']['p50']} ms p99 {figures['ack_ms']['p99']} ms, "
                    f"{figures['records_per_commit']} rec/commit"
                )

    floors.append(cpu_floor(payloads, seconds, root))
    log(f"cpu floor again: {floors[1]}")
    noise["end"] = disk_noise(root, noise_syncs)
    log(f"disk noise at end: {noise['end']}")
    machine["loadavg_1m_after"] = round(os.getloadavg()[0], 2)

    floor_rate = max(f["records_per_s"] for f in floors)
    for family_results in results.values():
        for figures in family_results.values():
            figures["ratio_to_floor"] = round(figures["records_per_s"] / floor_rate, 4)
            figures["ratio_to_append_step_ceiling"] = round(
                figures["records_per_s"] / CEILINGS["append_step_cpu_records_per_s"], 4
            )

    at = str(TARGETS["concurrency"])
    verdicts = {}
    for family in FAMILIES:
        figures = results[family][at]
        rate_ok = figures["records_per_s"] >= TARGETS["records_per_s_min"]
        p99_ok = figures["ack_ms"]["p99"] <= TARGETS["ack_p99_ms_max"]
        verdicts[family] = {"records_per_s": rate_ok, "ack_p99": p99_ok, "both": rate_ok and p99_ok}
    verdicts["all"] = all(verdicts[f]["both"] for f in FAMILIES)

    extra: dict = {}
    described = {}
    for store, store_results in by_store.items():
        for family in FAMILIES:
            for concurrency in CONCURRENCY:
                figures = store_results[family][str(concurrency)]
                file_rate = results[family][str(concurrency)]["records_per_s"]
                figures["ratio_to_file_store"] = round(figures["records_per_s"] / file_rate, 4)
        redis = server_process(store) == "redis-server"
        described["redis" if redis else "postgresql"] = {
            "what": (
                "LogWriter on RedisSink, partition 0 of a fresh one-partition store, lease "
                "heartbeat on; one Lua script per group commit (appendfsync always)"
                if redis
                else "LogWriter on PgSink, partition 0 of a fresh one-partition store, lease "
                "heartbeat on; one statement per group commit"
            ),
            "server": server_description(store),
            "reference": (
                "issue 31: probes measured 406-2,849 single-entry appends/s and 35,752-51,596 "
                "records/s at 100 entries per script"
                if redis
                else "issue 14: probes measured 9-45k records/s at 64 appenders with group commit"
            ),
            "results": store_results,
        }
    if described:
        extra["store"] = next(iter(described.values()))
        extra["stores"] = described
    if len(described) == 2:
        extra["redis_to_postgresql"] = {
            family: {
                c: round(
                    described["redis"]["results"][family][c]["records_per_s"]
                    / max(1, described["postgresql"]["results"][family][c]["records_per_s"]),
                    4,
                )
                for c in map(str, CONCURRENCY)
            }
            for family in FAMILIES
        }

    return {
        "bench": "append",
        "started_at": started_at,
        "code": code,
        "config": {
            "durability": Durability.FSYNC.value,
            "seconds_per_scenario": seconds,
            "warmup_s": warmup,
            "quick": quick,
            "concurrency": list(CONCURRENCY),
            "payloads": len(payloads),
            "payload_jcs_bytes_mean": round(sum(jcs_sizes) / len(jcs_sizes)),
            "payload_orjson_exact": all(check_value(p) for p in payloads),
            "filesystem_dir": str(root.parent),
        },
        "machine": machine,
        "disk_noise": noise,
        "floor": {
            "what": "orjson sorted dumps, pd, preimage, h, CompactRange.append, line, "
            "buffered write (no fsync); one core",
            "runs": floors,
            "records_per_s": floor_rate,
        },
        "results": results,
        "fsync_count_method": "exact: LogWriter.fsync_observer (every segment fdatasync, with "
        "its wall time in the writer thread) where the writer has it, else add_listener (one "
        "call per durable batch = one fdatasync); checkpoint-file and directory fsyncs not counted",
        "ceilings": CEILINGS,
        "targets": TARGETS,
        "pass": verdicts,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        **extra,
    }


if __name__ == "__main__":
    sys.exit(main())
