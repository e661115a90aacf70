"""One service replica against two over one PostgreSQL store (P = 2), same load; then kill -9.

Prints one JSON object on stdout (progress on stderr). For each of two set-ups on this machine:

- `one`: one `ledgermem serve --store` replica, leading both partitions;
- `two`: two replicas (the same keys, hence the same replica secret), each leading one partition;

the same client (this process, on uvloop when installed) opens `--k` SSE subscribers, half per
tenant (one tenant per partition), spread round robin over the replicas, each from the head, and
drives `--publishers` closed-loop publishers per tenant, also spread round robin over the
replicas, so with two replicas half of the writes reach a replica that does not lead their
partition and are forwarded (streams/cluster/forwarding.py). Each publish is a single-item POST of a
~300-byte content (bench/http_writes.py's contents) to the publisher's own session's `messages`
section, like bench/fanout.py. After a warm-up, over `--seconds`:

- writes/s: acknowledged POSTs;
- deliveries/s: records received by all subscribers;
- publish-to-receive latency: receive time minus the record's `ts` (the leader's clock, stamped
  before the commit), every (subscriber, record), across replicas (all on this machine's clock),
  at the full rate (mostly queueing behind the backlog) and, as bench/fanout.py does, `paced`:
  PACED_RATE publishes/s spread over the same publishers (the target applies to this one);
- gaps: a subscriber's record whose seq is not its previous one + 1 in the stream's filter
  order is impossible to judge with a tenant filter, so instead every subscriber's seqs must be
  strictly increasing (`out_of_order` counts violations; 0 expected).

`two_direct` is `two` with every publisher sent to its partition's leader (as a client that
knows the partitions would), which tells the cost of forwarding from the cost of a second
replica. Each set-up reports the cores its replicas, the client and the rest of the machine
(PostgreSQL) used in the window.

Then, for `two` only: kill -9 the replica leading partition 0 and time until the survivor reports
leading it (its /readyz), and until the first write to that partition succeeds
through the survivor. Targets (issue 14): two replicas >= 1.6x the writes and >= 1.8x the deliveries of one;
p99 <= 50 ms; takeover <= lease + 1 s.

Usage: .venv/bin/python bench/replicas.py [--quick] [--k 1000] [--publishers 4] [--seconds 10]
       [--lease 2] [--admin-url postgresql://postgres@127.0.0.1:5432/postgres] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import fanout as F  # bench/fanout.py: its SSE subscriber, tally and latency figures
import http_writes as H  # bench/http_writes.py: its launcher, server process and connections

from eventstore.partitions import partition_of
from eventstore.pg.schema import init_store

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 2
PACED_RATE = 10.0  # publishes/s for the latency without backlog
TARGETS = {
    "writes_ratio_min": 1.6,
    "deliveries_ratio_min": 1.8,
    "latency_p99_ms_max": 50.0,
    "takeover_over_lease_s_max": 1.0,
}


def log(message: str) -> None:
    print(f"[bench/replicas] {message}", file=sys.stderr, flush=True)


def tenants() -> dict[int, str]:
    found: dict[int, str] = {}
    n = 0
    while len(found) < PARTITIONS:
        found.setdefault(partition_of(f"bench{n}", PARTITIONS), f"bench{n}")
        n += 1
    return found


TENANTS = tenants()
REPLICA_SECRET = uuid.uuid4().hex  # one per run, given to every replica
TOKENS = {p: f"bench-token-{t}" for p, t in TENANTS.items()}


# ---- the store and the replicas ---------------------------------------------------------------


def admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if statement.startswith("DROP DATABASE"):
            name = statement.split('"')[1]
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
        conn.execute(statement)


class Store:
    """A fresh database with an initialized store, and data directories sharing its keys."""

    def __init__(self, admin_url: str, root: Path) -> None:
        self.admin_url = admin_url
        self.name = f"lm_bench_{uuid.uuid4().hex[:10]}"
        self.url = admin_url.rsplit("/", 1)[0] + "/" + self.name
        self.root = root
        admin(admin_url, f'CREATE DATABASE "{self.name}"')
        self.first = root / "r0"
        init_store(self.url, PARTITIONS, self.first)

    def data_dir(self, n: int) -> Path:
        path = self.root / f"r{n}"
        if not (path / "keys").exists():
            shutil.copytree(self.first / "keys", path / "keys")
        return path

    def drop(self) -> None:
        admin(self.admin_url, f'DROP DATABASE IF EXISTS "{self.name}"')


def start_replicas(store: Store, count: int, lease: float, k: int) -> list[H.ServerProcess]:
    env = {
        "LEDGERMEM_MAX_SUBSCRIBERS_PER_CLIENT": str(k + 64),  # every subscriber is 127.0.0.1
        "LEDGERMEM_TOKENS": ",".join(
            f"{TOKENS[p]}:{t}:read+write+admin" for p, t in TENANTS.items()
        ),
        "LEDGERMEM_LEASE_SECONDS": str(lease),
        "LEDGERMEM_REPLICA_SECRET": REPLICA_SECRET,
    }
    args = ("--store", store.url)
    return [
        H.ServerProcess(store.data_dir(n), "shipped", env, args, name=f"replica{n}")
        for n in range(count)
    ]


def status_leading(port: int) -> dict[int, bool]:
    text = H.run_async(H.get_text(port, "/readyz"))
    return {p["partition"]: bool(p["leading"]) for p in json.loads(text)["partitions"]}


def wait_balanced(replicas: list[H.ServerProcess], limit: float) -> dict[int, H.ServerProcess]:
    """Partition -> its leader, once each replica leads at least one (all, for one replica)."""
    deadline = time.monotonic() + limit
    while True:
        leaders = {}
        for replica in replicas:
            try:
                for partition, leading in status_leading(replica.port).items():
                    if leading:
                        leaders[partition] = replica
            except (OSError, KeyError, ValueError):
                pass
        if len(leaders) == PARTITIONS and len({r.port for r in leaders.values()}) == len(replicas):
            return leaders
        if time.monotonic() > deadline:
            raise RuntimeError(f"leadership did not settle within {limit} s")
        time.sleep(0.1)


# ---- the client -------------------------------------------------------------------------------


class Publisher:
    """One closed-loop publisher: POSTs to its session through one replica."""

    def __init__(self, port: int, partition: int, n: int, contents: list[bytes]) -> None:
        self.port, self.partition, self.contents = port, partition, contents
        self.session = f"pub{n}"
        self.auth = f"authorization: Bearer {TOKENS[partition]}\r\n"
        self.conn = None
        self.lock = asyncio.Lock()  # one request at a time on the connection
        self.acked = 0
        self.errors = 0
        self.sent = 0

    def _request(self, method: str, path: str, body: bytes = b"") -> bytes:
        head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{self.auth}"
        if body:
            head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        return head.encode() + b"\r\n" + body

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        for _ in range(2):
            if self.conn is None or self.conn.closed:
                self.conn = await H.connect(self.port)
            try:
                return await self.conn.request(self._request(method, path, body))
            except ConnectionError:
                self.conn = None
        raise ConnectionError(f"replica on port {self.port} keeps closing the connection")

    async def setup(self) -> None:
        deadline = time.monotonic() + 10
        while True:  # right after a hand-over a replica's routes may lag a tick: 503, retry
            status, body = await self.call("PUT", f"/v1/sessions/{self.session}")
            if status in (200, 201):
                return
            if status not in (421, 503) or time.monotonic() > deadline:
                raise RuntimeError(f"PUT session: {status} {body[:300]!r}")
            await asyncio.sleep(0.1)

    async def publish(self) -> bool:
        async with self.lock:
            self.sent += 1
            content = self.contents[self.sent % len(self.contents)]
            path = f"/v1/sessions/{self.session}/sections/messages/items"
            status, _ = await self.call("POST", path, b'{"content":%s}' % content)
        if status == 201:
            self.acked += 1
            return True
        self.errors += 1
        return False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not await self.publish():
                await asyncio.sleep(0.05)


class Ordered(F.Tally):
    """The fan-out tally, counting seqs that do not increase instead of gaps (a tenant filter
    skips other tenants' and control records, so gaps are expected)."""

    def records(self, subscriber, seqs_ts, received) -> None:
        last = subscriber.last_seq
        for seq, _ in seqs_ts:
            if seq <= last:
                self.gaps += 1
            last = seq
        subscriber.last_seq = last
        if self.recording:
            self.deliveries += len(seqs_ts)
            self.reads += 1
            self.latencies_us.extend([received - ts for _, ts in seqs_ts])


async def subscribe(ports: list[int], k: int, tally: F.Tally) -> list:
    loop = asyncio.get_running_loop()
    subscribers = []
    for n in range(k):
        partition = n % PARTITIONS
        port = ports[(n // PARTITIONS) % len(ports)]
        request = (
            f"GET /v1/stream/sse?token={TOKENS[partition]} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            "accept: text/event-stream\r\n\r\n"
        ).encode()
        _, protocol = await loop.create_connection(
            lambda r=request: F.SseSubscriber(tally, r), "127.0.0.1", port
        )
        subscribers.append(protocol)
    await asyncio.wait_for(asyncio.gather(*(s.ready for s in subscribers)), 120)
    return subscribers


def backend_pids(store_url: str) -> list[int]:
    """The PostgreSQL server processes serving the bench's database (its connections)."""
    import psycopg

    name = store_url.rsplit("/", 1)[1]
    with psycopg.connect(store_url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return [pid for (pid,) in rows]


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # the connection closed meanwhile
            total += H.proc_cpu(pid)
    return total


async def measure(
    ports: list[int], pids: list[int], leaders: dict[int, int], store_url: str, args
) -> dict:
    """`leaders`: partition -> port of its leader, for publishers that go there directly;
    empty: publishers spread round robin over every replica (half of them forwarded with two)."""
    contents = [json.dumps(c).encode() for c in H.make_contents(500)]
    publishers = [
        Publisher(leaders.get(p) or ports[(p + n) % len(ports)], p, p * 1000 + n, contents)
        for p in TENANTS
        for n in range(args.publishers)
    ]
    await asyncio.gather(*(pub.setup() for pub in publishers))
    tally = Ordered()
    subscribers = await subscribe(ports, args.k, tally)
    stop = asyncio.Event()
    running = [asyncio.ensure_future(pub.run(stop)) for pub in publishers]
    await asyncio.sleep(args.warmup)
    acked0 = sum(pub.acked for pub in publishers)
    errors0 = sum(pub.errors for pub in publishers)
    forwarded0 = [await forwarded(port) for port in ports]
    tally.recording = True
    cpu0 = [H.proc_cpu(pid) for pid in pids]
    backends = backend_pids(store_url)
    backends0 = cpu_of(backends)
    client0, machine0 = time.process_time(), H.cpu_times()
    start = time.perf_counter()
    await asyncio.sleep(args.seconds)
    tally.recording = False
    window = time.perf_counter() - start
    replica_cores = [
        round((H.proc_cpu(pid) - c) / window, 2) for pid, c in zip(pids, cpu0, strict=True)
    ]
    client_cores = round((time.process_time() - client0) / window, 2)
    postgres_cores = round((cpu_of(backends) - backends0) / window, 2)
    machine_cores = H.busy_cores(machine0, H.cpu_times(), window)
    forwarded1 = [await forwarded(port) for port in ports]
    full_latency = F.latency_figures(tally.latencies_us)
    acked = sum(pub.acked for pub in publishers) - acked0
    errors = sum(pub.errors for pub in publishers) - errors0
    stop.set()
    await asyncio.gather(*running)
    paced = await paced_latency(publishers, tally, args.paced_seconds)
    for s in subscribers:
        s.transport.close()
    for pub in publishers:
        if pub.conn is not None:
            pub.conn.transport.close()
    return {
        "window_s": round(window, 3),
        "writes_per_s": round(acked / window, 1),
        "write_errors": errors,
        "deliveries_per_s": round(tally.deliveries / window, 1),
        "deliveries": tally.deliveries,
        "latency_ms": full_latency,
        "paced": paced,
        "out_of_order": tally.gaps,
        "forwarded_per_s": round((sum(forwarded1) - sum(forwarded0)) / window, 1),
        "cores": {
            "replicas": replica_cores,
            "client": client_cores,
            "postgres_backends": postgres_cores,
            "machine_busy": machine_cores,
            # what else ran on the machine (other users' work, PostgreSQL's own background)
            "others_est": round(
                max(0.0, machine_cores - sum(replica_cores) - client_cores - postgres_cores), 2
            ),
        },
    }


async def paced_latency(publishers: list[Publisher], tally: F.Tally, seconds: float) -> dict:
    """Publish-to-receive latency at PACED_RATE publishes/s, spread over the publishers (so over
    the replicas, forwarded ones included): latency without the full rate's backlog."""
    await asyncio.sleep(1.0)  # the full rate's backlog drains
    tally.latencies_us = []
    tally.recording = True
    events = max(1, round(seconds * PACED_RATE))
    pending = []
    start = time.perf_counter()
    for n in range(events):
        delay = start + n / PACED_RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        pending.append(asyncio.ensure_future(publishers[n % len(publishers)].publish()))
    await asyncio.gather(*pending)
    await asyncio.sleep(1.0)  # the last records reach every subscriber
    tally.recording = False
    return {"rate_per_s": PACED_RATE, "events": events, **F.latency_figures(tally.latencies_us)}


async def forwarded(port: int) -> float:
    """ledgermem_forwarded_requests_total{outcome="answered"} of one replica."""
    conn = await H.connect(port)
    try:
        request = (
            f"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKENS[0]}\r\n\r\n"
        ).encode()
        _, body = await conn.request(request)
    finally:
        conn.transport.close()
    for line in body.decode().splitlines():
        if line.startswith('ledgermem_forwarded_requests_total{outcome="answered"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def first_write(port: int, partition: int, since: float, limit: float) -> float:
    """Seconds from `since` (monotonic) until a write to `partition` succeeds through `port`."""
    publisher = Publisher(port, partition, 999_999, [b'"after the kill"'])
    while time.monotonic() - since < limit:
        try:
            status, _ = await publisher.call("PUT", f"/v1/sessions/{publisher.session}")
        except (ConnectionError, OSError):
            status = 0
        if status in (200, 201):
            return time.monotonic() - since
        await asyncio.sleep(0.02)
    raise RuntimeError(f"no write to partition {partition} succeeded within {limit} s")


def takeover(replicas: list[H.ServerProcess], leaders: dict, lease: float) -> dict:
    victim = leaders[0]
    survivor = next(r for r in replicas if r is not victim)
    killed = time.monotonic()
    victim.kill()  # SIGKILL
    leading_after = None
    while time.monotonic() - killed < 10 * lease + 10:
        try:
            if status_leading(survivor.port).get(0):
                leading_after = time.monotonic() - killed
                break
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.02)
    write_after = H.run_async(first_write(survivor.port, 0, killed, 10 * lease + 10))
    return {
        "lease_s": lease,
        "survivor_leads_after_s": None if leading_after is None else round(leading_after, 3),
        "first_write_after_s": round(write_after, 3),
    }


def scenario(store: Store, count: int, args, direct: bool = False) -> dict:
    replicas = start_replicas(store, count, args.lease, args.k)
    try:
        leaders = wait_balanced(replicas, 20 * args.lease)
        log(f"{count} replica(s) leading: { {p: r.port for p, r in leaders.items()} }")
        time.sleep(1.0)  # every replica's route cache has seen the hand-over (ticks <= 0.5 s)
        ports, pids = [r.port for r in replicas], [r.pid for r in replicas]
        to = {p: r.port for p, r in leaders.items()} if direct else {}
        result = H.run_async(measure(ports, pids, to, store.url, args))
        if count > 1 and not direct:
            result["takeover"] = takeover(replicas, leaders, args.lease)
        return result
    finally:
        for replica in replicas:
            replica.kill()


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def run(args) -> dict:
    root = Path(tempfile.mkdtemp(prefix="lm-bench-replicas-"))
    results: dict = {
        "bench": "replicas",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine_cores": os.cpu_count(),
        "partitions": PARTITIONS,
        "k": args.k,
        "publishers_per_tenant": args.publishers,
        "seconds": args.seconds,
        "targets": TARGETS,
    }
    try:
        for count, name, direct in ((1, "one", False), (2, "two", False), (2, "two_direct", True)):
            store = Store(args.admin_url, root / name)
            try:
                log(f"{name}: {count} replica(s), k={args.k}")
                results[name] = scenario(store, count, args, direct)
                log(f"{name}: {json.dumps(results[name])}")
            finally:
                store.drop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    one, two = results["one"], results["two"]
    results["ratios"] = {
        "writes": ratio(two["writes_per_s"], one["writes_per_s"]),
        "deliveries": ratio(two["deliveries_per_s"], one["deliveries_per_s"]),
        "writes_direct": ratio(results["two_direct"]["writes_per_s"], one["writes_per_s"]),
        "deliveries_direct": ratio(
            results["two_direct"]["deliveries_per_s"], one["deliveries_per_s"]
        ),
    }
    leads = two["takeover"]["survivor_leads_after_s"]
    results["met"] = {
        "writes_ratio": (results["ratios"]["writes"] or 0) >= TARGETS["writes_ratio_min"],
        "deliveries_ratio": (results["ratios"]["deliveries"] or 0)
        >= TARGETS["deliveries_ratio_min"],
        "latency_p99_paced": max(one["paced"]["p99"] or 0, two["paced"]["p99"] or 0)
        <= TARGETS["latency_p99_ms_max"],
        "takeover": leads is not None and leads <= args.lease + 1.0,
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--publishers", type=int, default=4, help="per tenant (per partition)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--paced-seconds", type=float, default=6.0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "LEDGERMEM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument("--quick", action="store_true", help="k=100, 3 s windows")
    parser.add_argument("--out", help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.k, args.seconds, args.warmup, args.paced_seconds = min(args.k, 100), 3.0, 1.0, 2.0
    results = run(args)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
