"""kill -9 under load on the Redis store (issue 31): of the leader, and of the redis-server.

Prints one JSON object on stdout (progress on stderr). The bench starts a redis-server of its
own (Debian's binary, an ephemeral port of 127.0.0.1, its own data directory in a temporary
directory, `appendonly yes`, `appendfsync always`) and creates a one-partition store in it.
Each round starts a leader: a child process (this script with `--child`) that takes the
partition's lease (waiting while a killed leader's lease runs out), recovers the partition from
Redis, and appends from `--writers` threads, printing `seq id` on its stdout after each append
returns, i.e. after the record was acknowledged. Once the round's leader has acknowledged
`--acks` records (or `--round-seconds` passed), either

- `leader`: the leader process is killed with SIGKILL (its lease then runs out; the next
  round's leader takes over from what Redis holds), or
- `redis`: the redis-server is killed with SIGKILL mid-load and restarted from its append-only
  file; the leader's writer stops (CommitUnknown / CommitRefused) and the process is killed.

After every round: every acknowledged (seq, id) of every round so far is in the store, the
store's records are gap-free, and `ledgermem export-log` into one directory (incremental) then
the unchanged `ledgermem verify` with the store's vkey accept it. `lost` must be 0 and
`exports_verified` equal the rounds.

Note: a SIGKILL of redis-server loses nothing the kernel holds already, whatever appendfsync
says; what only `appendfsync always` protects (a power loss) is not simulated here. The store
refuses a server without it (tests/test_redis_store.py).

Usage: .venv/bin/python bench/store_kill.py [--rounds 20] [--writers 16] [--acks 300]
       [--lease 1.0] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def log(message: str) -> None:
    print(f"[bench/store_kill] {message}", file=sys.stderr, flush=True)


# ---- the leader (a child process) --------------------------------------------------------------


def child(url: str, data: str, owner: str, writers: int, lease_seconds: float) -> int:
    from eventstore.errors import LedgerError
    from eventstore.layout import DataDir
    from eventstore.shared.keeper import LeaseKeeper
    from eventstore.store import load_or_create_key
    from eventstore.stores import open_engine

    engine = open_engine(url)
    info = engine.read_store()
    key = load_or_create_key(DataDir(data), create=False).key
    while True:
        try:
            session = engine.session()
            try:
                lease = session.take(0, owner, lease_seconds)
            finally:
                session.close()
        except LedgerError:  # the server restarting
            lease = None
        if lease is not None:
            break
        time.sleep(0.05)
    took = time.monotonic()
    LeaseKeeper(engine.session, lease).start()
    writer = engine.open_partition_writer(info, key, 0, lease)
    print(f"leading {took} {writer.size}", file=sys.stderr, flush=True)
    out = sys.stdout
    lock = threading.Lock()

    def write(n: int) -> None:
        i = 0
        while True:
            i += 1
            ident = f"{owner}/{n}/{i}"
            try:
                record = writer.append("acme", f"s-{n}", "messages", "item.added", {"id": ident})
            except Exception:  # the writer stopped: nothing more is acknowledged here
                return
            with lock:
                out.write(f"{record.seq} {ident}\n")
                out.flush()

    threads = [threading.Thread(target=write, args=(n,), daemon=True) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


# ---- the bench (the parent) --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, data: Path) -> None:
        self.data, self.port = data, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        data.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> float:
        import redis

        started = time.monotonic()
        with open(self.data / "server.log", "ab") as out:
            self.proc = subprocess.Popen(
                [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data),
                 "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        while True:
            try:
                client = redis.Redis(port=self.port, socket_connect_timeout=1)
                if client.info("persistence").get("loading", 0) == 0:
                    client.close()
                    return time.monotonic() - started
                client.close()
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            time.sleep(0.01)

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class Leader:
    """A child leader; its acknowledgements are read from its stdout on a thread."""

    def __init__(self, url: str, data: Path, owner: str, writers: int, lease: float) -> None:
        self.acks: list[tuple[int, str]] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", url, str(data), owner, str(writers), str(lease)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        self.leading_at: float | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._errors = threading.Thread(target=self._read_errors, daemon=True)
        self._errors.start()
        self.stderr: list[str] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill is no acknowledgement
                seq, ident = raw.decode().split()
                self.acks.append((int(seq), ident))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            text = raw.decode(errors="replace").rstrip()
            if text.startswith("leading "):
                self.leading_at = time.monotonic()
            self.stderr.append(text)

    def kill9(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)


def stored(url: str) -> dict[int, bytes]:
    from eventstore.redis.reader import RedisReader
    from eventstore.redis.schema import connect

    client = connect(url)
    try:
        reader = RedisReader(client)
        return dict(reader.rows(0, 0, reader.head(0)[0] + 1))
    finally:
        client.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledgermem_cli", *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip


def check_round(url: str, acked: dict[int, str], export: Path, vkey: str) -> dict:
    held = stored(url)
    gap_free = sorted(held) == list(range(len(held)))
    lost = [
        seq for seq, ident in acked.items()
        if seq not in held or orjson.loads(held[seq])["payload"].get("id") != ident
    ]  # fmt: skip
    exported = cli("export-log", "--store", url, "--partition", "0", str(export))
    verified = (
        exported.returncode == 0 and cli("verify", str(export), "--vkey", vkey).returncode == 0
    )
    return {"records": len(held), "gap_free": gap_free, "lost": len(lost), "verified": verified}


def run_mode(mode: str, args: argparse.Namespace, root: Path) -> dict:
    from eventstore.redis.export import store_vkey
    from eventstore.redis.schema import init_store

    server = Server(root / mode / "redis")
    server.start()
    data = root / mode / "data"
    init_store(server.url, 1, data, seg_bits=8, origin=f"bench.local/kill-{mode}")
    vkey = store_vkey(server.url, 0)
    export = root / mode / "export"
    acked: dict[int, str] = {}
    rounds = []
    try:
        for n in range(args.rounds):
            leader = Leader(server.url, data, f"{mode}-{n}", args.writers, args.lease)
            deadline = time.monotonic() + args.round_seconds
            base = len(leader.acks)
            while len(leader.acks) - base < args.acks and time.monotonic() < deadline:
                if leader.proc.poll() is not None:
                    break
                time.sleep(0.005)
            killed_at = time.monotonic()
            restart_s = None
            if mode == "redis":
                server.kill9()
                restart_s = server.start()
                time.sleep(0.2)  # the writer meets the lost connection, decides, stops
            leader.kill9()
            for seq, ident in leader.acks:
                acked[seq] = ident
            takeover_s = (
                None if leader.leading_at is None else round(leader.leading_at - leader.started, 3)
            )
            figures = check_round(server.url, acked, export, vkey)
            figures.update(
                round=n,
                acked_this_round=len(leader.acks),
                leader_start_to_leading_s=takeover_s,
                load_s=round(killed_at - (leader.leading_at or leader.started), 3),
            )
            if restart_s is not None:
                figures["redis_restart_s"] = round(restart_s, 3)
            if not figures["verified"] or figures["lost"] or not leader.acks:
                figures["leader_stderr_tail"] = leader.stderr[-5:]
            rounds.append(figures)
            log(f"{mode} round {n}: {figures}")
    finally:
        server.kill9()
    return {
        "rounds": len(rounds),
        "acknowledged": len(acked),
        "records_held": rounds[-1]["records"] if rounds else 0,
        "lost": sum(r["lost"] for r in rounds),
        "gap_free_rounds": sum(r["gap_free"] for r in rounds),
        "exports_verified": sum(r["verified"] for r in rounds),
        "rounds_with_no_ack": sum(1 for r in rounds if not r["acked_this_round"]),
        "leader_start_to_leading_s_max": max(
            (r["leader_start_to_leading_s"] or 0.0 for r in rounds), default=None
        ),
        "per_round": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        url, data, owner, writers, lease = argv[1:6]
        return child(url, data, owner, int(writers), float(lease))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--acks", type=int, default=300, help="acks per round before the kill")
    parser.add_argument("--round-seconds", type=float, default=10.0)
    parser.add_argument("--lease", type=float, default=1.0, help="lease seconds")
    parser.add_argument("--quick", action="store_true", help="2 rounds each, 50 acks")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.acks = 2, 50
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    root = Path(tempfile.mkdtemp(prefix="ledgermem-kill-"))
    t0 = time.monotonic()
    try:
        result = {
            "bench": "store_kill",
            "started_at": started_at,
            "config": {
                "rounds": args.rounds,
                "writers": args.writers,
                "acks_per_round_before_kill": args.acks,
                "lease_s": args.lease,
                "redis": "own redis-server, appendonly yes, appendfsync always, no RDB",
            },
            "machine": {"cpus": os.cpu_count(), "loadavg_1m_before": round(os.getloadavg()[0], 2)},
            "leader_kill9": run_mode("leader", args, root),
            "redis_kill9": run_mode("redis", args, root),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    result["ok"] = all(
        result[m]["lost"] == 0 and result[m]["exports_verified"] == result[m]["rounds"]
        for m in ("leader_kill9", "redis_kill9")
    )
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
