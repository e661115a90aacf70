"""One service replica's part in a shared store: mirrors and hubs for every partition, and a
memory for each partition it leads.

Every replica, for every partition: a `Mirror` (the partition's log as spec segment files under
DATA/partitions/p<N>/log, fed by the `StoreTail` and, on the leader, by its PgSink) and a `Hub`
fed by that mirror, so streams work on every replica and a change of leader never touches a
subscriber.

The leadership loop (one thread, `tick` seconds apart) beats the replica's heartbeat in
the store (lm_replica, or Redis's lm:replicas), renews the leases it holds, reads lm_head and lm_replica once, refreshes the route
cache from them, and follows `balance.plan`: take a free partition, or give one up so that
leadership spreads over the live replicas. No advisory lock is involved: the lease row in lm_head
with its epoch is the only fence (advisory locks vanish on a database restart and fence nothing).

Takeover (partition_leader.py) runs on a worker thread, one at a time; stepping down is
immediate (routing stops at once, the memory closes in the background without waiting on the
database); a graceful stop closes each led memory (log.close and its checkpoint) and releases
its lease, so the others take over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from eventstore.layout import DataDir
from eventstore.partitions import partition_of, partition_origin
from eventstore.store import load_or_create_key
from eventstore.stores import open_engine
from streams.cluster import balance
from streams.cluster.mirror_reader import MirrorReader
from streams.cluster.partition_leader import PartitionLeader, partition_dir
from streams.cluster.routes import Local, NoLeader, Remote, Route
from streams.fanout.hub import Hub
from streams.server.verifier import BackgroundVerifier

if TYPE_CHECKING:
    from eventstore.mirror import Mirror
    from eventstore.shared import StoreInfo
    from eventstore.shared.engine import MirrorTail, StoreEngine, StoreSession
    from eventstore.shared.lease import Head, Lease, Replica
    from eventstore.store import KeyInfo
    from sections.runtime.tracing import Tracing
    from streams.server.metrics import Metrics
    from streams.server.settings import Settings

log = logging.getLogger("ledgermem.cluster")

MAX_TICK = 0.5  # seconds between looks at the store, at most (a fifth of the lease otherwise)
RECENTLY_RELEASED = 2.0  # lease periods during which a released partition is left to others


def tick_for(lease_seconds: float) -> float:
    return max(0.05, min(MAX_TICK, lease_seconds / 5))


def new_replica_id() -> str:
    """Unique per process start: a restarted replica is a new one (its old leases just expire)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class PartitionStatus(TypedDict):
    """One partition as this replica sees it (`Cluster.status`, /v1/log/status)."""

    partition: int
    head: int  # the seq of the mirror's newest record
    leader: str | None  # the replica holding an unexpired lease, if any
    epoch: int | None
    leading: bool  # this replica leads it
    lease_until: str | None  # ISO 8601


def _head_of(mirror: Mirror) -> Callable[[], int]:
    """The seq of `mirror`'s newest record, read each time (a verifier's target)."""
    return lambda: mirror.size - 1


class Cluster:
    def __init__(self, settings: Settings, url: str, metrics: Metrics | None = None) -> None:
        if settings.store is None:
            raise ValueError("a cluster needs a shared store: settings.store is not set")
        self.settings = settings
        self.store_url: str = settings.store
        # PostgreSQL or Redis, by the URL's scheme (eventstore/stores.py): nothing connects yet.
        self.engine: StoreEngine = open_engine(settings.store)
        self.url = url
        self.metrics = metrics
        # The partitions' memories' tracing hook (streams/server/telemetry.py); None: untraced.
        self.tracing: Tracing | None = None
        self.replica_id = new_replica_id()
        self.lease_seconds: float = settings.lease_seconds
        self.tick = tick_for(self.lease_seconds)
        self._info: StoreInfo | None = None  # read at start
        self._key: KeyInfo | None = None  # this replica's data directory's, checked at start
        self._mirrors: dict[int, Mirror] = {}
        self._hubs: dict[int, Hub] = {}
        self._verifiers: dict[int, BackgroundVerifier] = {}
        self._tail: MirrorTail | None = None
        self._lock = threading.Lock()
        self._routes: dict[int, Route] = {}
        self._leaders: dict[int, PartitionLeader] = {}  # partitions this replica holds a lease on
        self._released: dict[int, float] = {}  # partition -> monotonic time it was given up
        self._free_since: dict[int, float] = {}
        self._heads: list[Head] = []
        self._stop = threading.Event()
        self._last_look = time.monotonic()  # the last tick that reached the store
        self._thread: threading.Thread | None = None
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="ledgermem-takeover")

    # ---- what requests use (cheap: no I/O) ----------------------------------------------------

    @property
    def info(self) -> StoreInfo:
        """The store's description (partitions, origin, keys), read at start."""
        if self._info is None:
            raise RuntimeError("the cluster has not started: the store's description is unread")
        return self._info

    @property
    def key(self) -> KeyInfo:
        """This replica's signing key, checked against the store's at start."""
        if self._key is None:
            raise RuntimeError("the cluster has not started: its key is not loaded")
        return self._key

    @property
    def partitions(self) -> int:
        return self.info.partitions

    def partition_of(self, tenant: str) -> int:
        return partition_of(tenant, self.info.partitions)

    def route(self, partition: int) -> Route:
        """Where partition `partition`'s session calls run now, from the loop's last look."""
        with self._lock:
            route = self._routes.get(partition)
            leader = self._leaders.get(partition)
        if isinstance(route, Local):
            if leader is None or not leader.lease.valid() or route.memory.failure is not None:
                return NoLeader(self.tick)  # its lease ran out locally: the loop steps down next
            return route
        return route if route is not None else NoLeader(self.tick)

    def refresh(self) -> None:
        """Read the heads and the replicas now and update the route cache (blocking: call it on
        a worker thread). For a forwarder whose leader answered 421: the leader moved since the
        leadership loop last looked."""
        session = self.engine.session()
        try:
            heads = session.heads()
            replicas = session.replicas(self.lease_seconds)
        finally:
            session.close()
        self._heads = heads
        self._refresh_routes(heads, replicas)

    def store_unreachable(self) -> float | None:
        """Seconds since the leadership loop last reached the store, once that is longer than a
        lease (this replica then leads nothing); None while it reaches it."""
        since = time.monotonic() - self._last_look
        return since if since > self.lease_seconds else None

    def hub(self, partition: int) -> Hub:
        return self._hubs[partition]

    def mirror(self, partition: int) -> Mirror:
        return self._mirrors[partition]

    def sync_mirror(self, partition: int) -> None:
        """Bring partition `partition`'s mirror up to every row committed in the store (blocking:
        a takeover's first step, streams/cluster/partition_leader.py)."""
        self._started_tail().sync(partition)

    def _started_tail(self) -> MirrorTail:
        if self._tail is None:
            raise RuntimeError("the cluster has not started: no store tail feeds the mirrors")
        return self._tail

    def verifier(self, partition: int) -> BackgroundVerifier | None:
        return self._verifiers.get(partition)

    def failed_verifiers(self) -> dict[int, str]:
        """The partitions whose mirror's background verifier failed, with what it found."""
        return {
            partition: verifier.verdict.error or "failed"
            for partition, verifier in sorted(self._verifiers.items())
            if verifier.verdict.state == "failed"
        }

    def leading(self) -> list[int]:
        with self._lock:
            return sorted(p for p, route in self._routes.items() if isinstance(route, Local))

    def status(self) -> list[PartitionStatus]:
        """Per partition: head, leader, epoch, whether this replica leads it, lease expiry."""
        heads = {head.partition: head for head in self._heads}
        out: list[PartitionStatus] = []
        for partition in range(self.partitions):
            head = heads.get(partition)
            route = self.route(partition)
            out.append(
                {
                    "partition": partition,
                    "head": self._mirrors[partition].size - 1,
                    "leader": None if head is None or head.expired else head.owner,
                    "epoch": None if head is None else head.epoch,
                    "leading": isinstance(route, Local),
                    "lease_until": None
                    if head is None or head.lease_until is None
                    else head.lease_until.isoformat(),
                }
            )
        return out

    # ---- start and stop -------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self._open)
        for partition, mirror in self._mirrors.items():
            reader = MirrorReader(mirror, partition_dir(self.data, partition) / "index")
            hub = Hub(mirror, reader, self.settings, self.metrics, refuse_beyond_head=False)
            await hub.start()
            self._hubs[partition] = hub
        self._started_tail().start()
        self._thread = threading.Thread(target=self._run, name="ledgermem-leadership", daemon=True)
        self._thread.start()

    @property
    def data(self) -> Path:
        return Path(self.settings.data)

    def _open(self) -> None:
        """The store's description, this replica's key checked against it, the mirrors."""
        from eventstore.mirror import Mirror

        info = self._info = self.engine.read_store()
        # A replica with another key would sign checkpoints no auditor accepts: refuse to start.
        key = self._key = load_or_create_key(DataDir(self.data), create=False)
        for partition in range(info.partitions):
            info.key_for(key.key, partition)
        for partition in range(info.partitions):
            self._mirrors[partition] = Mirror.open(
                partition_dir(self.data, partition) / "log",
                partition_origin(info.origin, partition),
                info.seg_bits,
            )
        self._tail = self.engine.tail(self._mirrors)

    async def stop(self) -> None:
        """Close the led memories (log.close, final checkpoint), release their leases, leave."""
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        await asyncio.to_thread(self._worker.shutdown, True)
        await asyncio.to_thread(self._close_all)
        for hub in self._hubs.values():
            await hub.close()
        for verifier in self._verifiers.values():
            await asyncio.to_thread(verifier.stop)
        if self._tail is not None:
            await asyncio.to_thread(self._tail.stop)
        for mirror in self._mirrors.values():
            mirror.close()

    def _close_all(self) -> None:
        with self._lock:
            leaders = list(self._leaders.values())
            self._leaders.clear()
            for leader in leaders:
                self._routes[leader.partition] = NoLeader(self.tick)
        if self._info is None:
            return  # never started: nothing taken, nothing registered
        session = None
        try:
            session = self.engine.session()
        except Exception as exc:  # the memories still close; their leases just expire
            log.warning("cannot reach the store to release leases: %s", exc)
        for leader in leaders:
            leader.close_and_release(session)
        if session is not None:
            try:
                session.leave(self.replica_id)
            except Exception as exc:
                log.warning("could not remove this replica from the store's registry: %s", exc)
            session.close()

    # ---- the leadership loop --------------------------------------------------------------------

    def _run(self) -> None:
        session: StoreSession | None = None
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if session is None:
                    session = self.engine.session()
                    session.prune()
                self._tick(session)
                self._last_look = time.monotonic()
            except Exception as exc:
                # The store is unreachable or failed: leases keep their local deadlines, and the
                # next tick steps down from those that passed (route() already says NoLeader).
                log.warning("leadership loop: %s", exc)
                self._check_deadlines()
                if session is not None:
                    with contextlib.suppress(Exception):
                        session.close()
                session = None
            self._stop.wait(max(0.0, self.tick - (time.monotonic() - started)))
        if session is not None:
            session.close()

    def _start_verifiers(self) -> None:
        """A partition's background verifier starts once its mirror holds the log's header."""
        for partition, mirror in self._mirrors.items():
            if partition in self._verifiers or mirror.size == 0:
                continue
            vkey = self.info.key_for(self.key.key, partition).vkey
            verifier = BackgroundVerifier(mirror.log_dir, vkey, _head_of(mirror))
            verifier.start()
            self._verifiers[partition] = verifier

    def _tick(self, session: StoreSession) -> None:
        self._start_verifiers()
        session.heartbeat(self.replica_id, self.url)
        self._check_deadlines()
        with self._lock:
            leaders = list(self._leaders.values())
        for leader in leaders:
            if not session.renew(leader.lease):
                self._step_down(leader, "its lease was taken over")
        heads = session.heads()
        replicas = session.replicas(self.lease_seconds)
        self._heads = heads
        self._refresh_routes(heads, replicas)
        self._balance(session, heads, replicas)

    def _check_deadlines(self) -> None:
        with self._lock:
            leaders = list(self._leaders.values())
        for leader in leaders:
            if leader.failure is not None:
                self._step_down(leader, f"its writer stopped: {leader.failure}")
            elif not leader.lease.valid():
                self._step_down(leader, "its lease ran out on the local clock")

    def _refresh_routes(self, heads: list[Head], replicas: list[Replica]) -> None:
        urls = {replica.id: replica.url for replica in replicas}
        with self._lock:
            for head in heads:
                leader = self._leaders.get(head.partition)
                if leader is not None:
                    if leader.memory is not None:
                        self._routes[head.partition] = Local(leader.memory)
                    else:
                        self._routes[head.partition] = NoLeader(self.tick)  # taking over
                elif head.owner is None or head.expired or head.owner == self.replica_id:
                    self._routes[head.partition] = NoLeader(max(self.tick, 1.0))
                elif head.owner in urls:
                    self._routes[head.partition] = Remote(urls[head.owner], head.owner)
                else:
                    self._routes[head.partition] = NoLeader(max(self.tick, 1.0))
            routes = dict(self._routes)
        if self.metrics is not None:
            for partition, route in routes.items():
                gauge = self.metrics.partition_leading.labels(str(partition))
                gauge.set(1 if isinstance(route, Local) else 0)

    def _balance(self, session: StoreSession, heads: list[Head], replicas: list[Replica]) -> None:
        now = time.monotonic()
        views = [balance.HeadView(h.partition, h.owner, h.expired) for h in heads]
        for view in views:
            if view.free:
                self._free_since.setdefault(view.partition, now)
            else:
                self._free_since.pop(view.partition, None)
        hold = self.lease_seconds  # a leader keeps a partition at least this long
        released_for = RECENTLY_RELEASED * self.lease_seconds
        with self._lock:
            self._released = {p: t for p, t in self._released.items() if now - t < released_for}
            released = set(self._released)
            leading = set(self._leaders)
            releasable = {
                p
                for p, leader in self._leaders.items()
                if leader.memory is not None and now - leader.since >= hold
            }
        plan = balance.plan(
            views,
            [replica.id for replica in replicas if replica.live],
            self.replica_id,
            leading,
            releasable=releasable,
            free_for={p: now - t for p, t in self._free_since.items()},
            released=released,
            grace=min(1.0, self.lease_seconds / 2),
        )
        for partition in plan.release:
            self._give_up(partition)
        for partition in plan.take:
            lease = session.take(partition, self.replica_id, self.lease_seconds)
            if lease is None:
                continue  # someone else won the race: fine
            self._begin_takeover(partition, lease)

    # ---- taking over, stepping down, giving up --------------------------------------------------

    def _begin_takeover(self, partition: int, lease: Lease) -> None:
        leader = PartitionLeader(self, partition, lease)
        with self._lock:
            self._leaders[partition] = leader
            self._routes[partition] = NoLeader(self.tick)
        log.warning("partition %d: took the lease (epoch %d), taking over", partition, lease.epoch)
        self._worker.submit(self._takeover, leader)

    def _takeover(self, leader: PartitionLeader) -> None:
        try:
            memory = leader.take_over()
        except Exception as exc:
            log.error("partition %d: takeover failed: %s", leader.partition, exc)
            with self._lock:
                if self._leaders.get(leader.partition) is leader:
                    del self._leaders[leader.partition]
                    self._routes[leader.partition] = NoLeader(max(self.tick, 1.0))
                self._released[leader.partition] = time.monotonic()
            leader.release_quietly()
            return
        with self._lock:
            still = self._leaders.get(leader.partition) is leader
            if still and not self._stop.is_set():
                self._routes[leader.partition] = Local(memory)
                log.warning(
                    "partition %d: leading (epoch %d)", leader.partition, leader.lease.epoch
                )
                return
        if not still:  # stepped down while the takeover ran (when stopping, stop() closes it)
            leader.abandon()

    def _step_down(self, leader: PartitionLeader, why: str) -> None:
        """Stop routing locally at once; close the memory without waiting on the database."""
        with self._lock:
            if self._leaders.get(leader.partition) is not leader:
                return
            del self._leaders[leader.partition]
            self._routes[leader.partition] = NoLeader(self.tick)
        log.warning("partition %d: stepping down: %s", leader.partition, why)
        leader.abandon()

    def _give_up(self, partition: int) -> None:
        """Hand a partition over (balance): close it cleanly and release the lease at once."""
        with self._lock:
            leader = self._leaders.pop(partition, None)
            if leader is None:
                return
            self._routes[partition] = NoLeader(self.tick)
            self._released[partition] = time.monotonic()
        log.warning("partition %d: handing over to balance leadership", partition)
        self._worker.submit(leader.close_and_release, None)
