"""The running service: the memory, the hub, the verifier, and the order of start and stop.

After a failed write (a full disk, no file descriptors left, an I/O error) the memory refuses
writes and reads; `_heal_loop` reopens it (`Memory.heal`: recovery, then the state rebuilt from
the log) with backoff, from HEAL_FIRST_DELAY doubling up to HEAL_MAX_DELAY, so writes are taken
again within a second of the cause going away. Meanwhile `/readyz` answers 503 with the reason.

Shutdown (SIGTERM or SIGINT) goes in this order: stop taking writes (503) and end every stream
cleanly (`closing` is set from the signal handler, before uvicorn waits for connections), let
in-flight writes finish, then close the memory: `log.close` and the final signed checkpoint.

With a shared store (`settings.store`, docs/scale-out-replicas.md) there is no memory of the
service's own: `cluster` holds every partition's hub and the memories of the partitions this
replica leads, and route handlers ask `memory_for(principal)` / `hub_for(principal, partition)`.
A partition led elsewhere answers `NotLeaderHere` (421, or 503 with Retry-After when no replica
leads it); the forwarding middleware (streams/cluster/forwarding.py) sends such requests to the leader
before they get here. A failed leader does not heal in place: it steps down and another replica
(or this one, later) takes the partition over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection
from starlette.types import Scope

from eventstore.errors import InvalidInput
from eventstore.reader import LogReader
from eventstore.writer import Durability, LogWriter
from sections.model.config import MemoryConfig, load_config, warm_counter
from sections.runtime.memory import Memory
from streams.cluster.replica_secret import load_replica_secret
from streams.server.metrics import Metrics
from streams.server.settings import Settings
from streams.server.verifier import BackgroundVerifier
from streams.web.auth import Principal, authenticate, authenticate_scope
from streams.web.errors import ApiError

if TYPE_CHECKING:
    from sections.runtime.tracing import Tracing
    from streams.cluster import Cluster, NoLeader, Remote
    from streams.fanout.hub import Hub

log = logging.getLogger("ledgermem.service")

HEAL_POLL = 0.05  # seconds between looks at the memory while it is healthy
HEAL_FIRST_DELAY = 0.05  # the first retry after a failed reopen; doubled after each failure
HEAL_MAX_DELAY = 0.5  # keeps recovery within a second of the cause going away


class NotLeaderHere(ApiError):
    """The principal's partition is led by another replica (421), or by none right now (503)."""

    def __init__(self, partition: int, route: Remote | NoLeader) -> None:
        from streams.cluster import Remote

        self.partition = partition
        self.route = route
        if isinstance(route, Remote):
            super().__init__(
                421,
                "not_leader",
                f"partition {partition} is led by replica {route.replica} ({route.url})",
            )
        else:
            retry = max(1, math.ceil(route.retry_after))
            super().__init__(
                503,
                "no_leader",
                f"no replica leads partition {partition} right now; retry in {retry} s",
                {"Retry-After": str(retry)},
            )


class Service:
    def __init__(
        self,
        settings: Settings,
        announce: Callable[[Service], None] | None = None,
        url: str | None = None,
    ) -> None:
        self.settings = settings
        self.url = settings.advertise_url or url  # where other replicas reach this one
        self.cluster: Cluster | None = None  # store mode
        self.metrics = Metrics()
        self.announce = announce
        self.memory: Memory | None = None  # file mode, once started
        self.hub: Hub | None = None  # file mode, once started
        self.verifier: BackgroundVerifier | None = None
        # Set once shutdown begins; made anew by each startup, on its event loop.
        self.closing = asyncio.Event()
        self.accepting = False
        self.ready = False
        self._inflight = 0
        self._idle = asyncio.Event()  # no write in flight
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._healer: asyncio.Task[None] | None = None
        self._expirer: asyncio.Task[None] | None = None  # the TTL's loop, when configured
        # What signs and checks forwarded requests (streams/cluster/replica_secret.py); None: none.
        self.replica_secret: bytes | None = None  # loaded at startup
        self._in_flight_write = InFlightWrite(self)
        # The memory's tracing hook (streams/server/telemetry.py), set before startup; None: untraced.
        self.tracing: Tracing | None = None

    @property
    def own_memory(self) -> Memory:
        """The service's own memory (file mode, once started)."""
        memory = self.memory
        if memory is None:
            raise RuntimeError("the service has no memory of its own: not started, or store mode")
        return memory

    @property
    def writer(self) -> LogWriter:
        return self.own_memory.writer

    @property
    def reader(self) -> LogReader:
        return self.own_memory.reader

    def memory_for(self, principal: Principal) -> Memory:
        """The memory holding the principal's tenant: the service's own in file mode; in store
        mode the tenant's partition's, when this replica leads it (else NotLeaderHere)."""
        cluster = self.cluster
        if cluster is None:
            return self.own_memory
        from streams.cluster import Local

        partition = cluster.partition_of(principal.tenant)
        route = cluster.route(partition)
        if isinstance(route, Local):
            return route.memory
        raise NotLeaderHere(partition, route)

    def hub_for(self, principal: Principal, partition: int | None = None) -> Hub:
        """The hub of the partition a stream reads: `partition` when given (an operator's
        unscoped stream), else the principal's tenant's. Every replica has every hub."""
        cluster = self.cluster
        if cluster is None:
            if self.hub is None:
                raise RuntimeError("the service has no hub: it has not started")
            return self.hub
        if partition is None:
            partition = cluster.partition_of(principal.tenant)
        return cluster.hub(partition)

    @property
    def partitions(self) -> int:
        return 1 if self.cluster is None else self.cluster.partitions

    async def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.closing = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        data = self.settings.data
        if os.path.exists(data) and not os.path.isdir(data):
            raise InvalidInput(
                f"the data directory {data} is a file, not a directory: choose another with --data"
            )
        self.replica_secret = load_replica_secret(data)
        # Load the token counter's vocabulary (about a second of CPU) before taking requests,
        # so no write waits for it (sections/model/tokens.py). First: nothing may await between the
        # start of the loops below (the TTL's writes) and `accepting`.
        await asyncio.to_thread(warm_counter, self.settings.memory_config)
        if self.settings.store:
            await self._start_cluster()
        else:
            await self._start_files()
        self.accepting = True
        self.ready = True
        if self.announce is not None:
            self.announce(self)

    async def _start_cluster(self) -> None:
        from streams.cluster import Cluster

        path = self.settings.memory_config  # each partition leader's memory reads the same file
        config = await asyncio.to_thread(load_config, path) if path else MemoryConfig()
        cluster = self.cluster = Cluster(self.settings, self.url or "", self.metrics)
        cluster.tracing = self.tracing
        try:
            await cluster.start()
        except BaseException:
            await cluster.stop()
            raise
        self._start_ttl(config)

    async def _start_files(self) -> None:
        from streams.fanout.hub import Hub

        s = self.settings
        durability = Durability.UNSAFE_NO_FSYNC if s.unsafe_no_fsync else Durability.FSYNC
        memory = self.memory = await asyncio.to_thread(
            Memory.open,
            s.data,
            config=s.memory_config,
            seg_bits=s.seg_bits,
            durability=durability,
            checkpoint_interval=s.checkpoint_interval,
            dedup_window_us=s.dedup_window_us,
        )
        memory.tracing = self.tracing
        writer = memory.writer
        writer.add_listener(self.metrics.on_records)
        writer.fsync_observer = self.metrics.on_fsync
        self.metrics.head.set(writer.size - 1)
        hub = self.hub = Hub(writer, memory.reader, s, self.metrics)
        await hub.start()
        assert memory.key is not None, "a memory opened on its data directory holds its key"
        verifier = self.verifier = BackgroundVerifier(
            memory.data.log, memory.key.key.vkey, lambda: self.writer.size - 1
        )
        verifier.start()
        self._healer = asyncio.create_task(self._heal_loop())
        self._start_ttl(memory.config)

    def begin_shutdown_threadsafe(self) -> None:
        """From a signal handler: refuse new writes and end the streams, right away."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._begin_shutdown)

    def _begin_shutdown(self) -> None:
        self.accepting = False
        self.ready = False
        self.closing.set()

    @property
    def refusal(self) -> BaseException | None:
        """Why writes are refused after a failed write (None while they are taken)."""
        return None if self.memory is None else self.memory.failure

    def verification_failure(self) -> str | None:
        """What a failed background verifier found (the log's, or a partition mirror's with a
        shared store), as one sentence; None while every verifier passes or catches up."""
        if self.cluster is not None:
            failed = self.cluster.failed_verifiers()
            return (
                "; ".join(f"partition {partition}: {error}" for partition, error in failed.items())
                or None
            )
        verdict = self.verifier.verdict if self.verifier is not None else None
        if verdict is None or verdict.state != "failed":
            return None
        return verdict.error or "failed"

    async def _heal_loop(self) -> None:
        """Reopen the memory after a failed write, retrying with backoff until it heals."""
        delay = HEAL_FIRST_DELAY
        failing = False
        while not self.closing.is_set():
            failure = self.own_memory.failure
            if failure is None:
                failing, delay = False, HEAL_FIRST_DELAY
                await asyncio.sleep(HEAL_POLL)
                continue
            if not failing:
                failing = True
                self.metrics.write_failures.inc()
                log.error("a write failed, writes are refused until the log reopens: %s", failure)
            self.metrics.writes_refused.set(1)
            try:
                await asyncio.to_thread(self.own_memory.heal)
            except Exception as exc:  # the cause lasts: try again later
                self.metrics.reopen_failures.inc()
                log.warning("reopening the log failed (next try in %.2f s): %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, HEAL_MAX_DELAY)
                continue
            self.metrics.reopens.inc()
            self.metrics.writes_refused.set(0)
            self.metrics.head.set(self.writer.size - 1)
            log.warning("the log was reopened; writes are taken again")

    def _start_ttl(self, config: MemoryConfig) -> None:
        if config.session_ttl_seconds is not None:
            self._expirer = asyncio.create_task(self._ttl_loop(config, config.session_ttl_seconds))

    def _led_memories(self) -> list[Memory]:
        """The memories this service writes: its own, or those of the partitions it leads."""
        cluster = self.cluster
        if cluster is None:
            return [self.own_memory]
        from streams.cluster import Local

        routes = [cluster.route(p) for p in range(cluster.partitions)]
        return [route.memory for route in routes if isinstance(route, Local)]

    async def _ttl_loop(self, config: MemoryConfig, ttl: float) -> None:
        """Retention's TTL (docs/service.md, "Retention"): at start and then every
        `ttl_interval_seconds`, remove the sessions of every tenant idle longer than
        `session_ttl_seconds` (reason `ttl`), in every memory this service writes. A run is a
        write like any other: none starts once shutdown began, and shutdown waits for the one
        under way."""
        while not self.closing.is_set():
            for memory in self._led_memories():
                if memory.failure is not None:  # healed (or stepped down from) first
                    continue
                try:
                    with self.write():
                        removed = await memory.expire_sessions_async(ttl)
                except ApiError:  # shutting down
                    return
                except Exception as exc:  # a failed write, a lost lease: the next run retries
                    log.warning("the TTL cleanup failed (next run in %s s): %s",
                                config.ttl_interval_seconds, exc)  # fmt: skip
                else:
                    if removed:
                        log.info("TTL: removed %d idle sessions", len(removed))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closing.wait(), config.ttl_interval_seconds)

    async def shutdown(self) -> None:
        self._begin_shutdown()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=30)
        if self._expirer is not None:
            self._expirer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expirer
        if self._healer is not None:
            self._healer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._healer
        if self.hub is not None:
            await self.hub.close()
        if self.verifier is not None:
            await asyncio.to_thread(self.verifier.stop)
        if self.memory is not None:
            await asyncio.to_thread(self.memory.close)
        if self.cluster is not None:
            await self.cluster.stop()

    def principal(self, conn: HTTPConnection, scope: str) -> Principal:
        principal = authenticate(conn, self.settings, self.replica_secret)
        principal.require(scope)
        return principal

    def principal_of(self, asgi_scope: Scope, scope: str) -> Principal:
        """`principal` for a raw ASGI route: from the scope's headers (auth.authenticate_scope)."""
        principal = authenticate_scope(asgi_scope, self.settings, self.replica_secret)
        principal.require(scope)
        return principal

    def write(self) -> InFlightWrite:
        """Count an in-flight write (`with service.write(): ...`); refuse new ones once shutdown
        began."""
        if not self.accepting:
            raise ApiError(
                503,
                "shutting_down",
                "the service is shutting down; retry against the restarted service",
            )
        return self._in_flight_write

    def _write_began(self) -> None:
        self._inflight += 1
        if self._inflight == 1:
            self._idle.clear()

    def _write_ended(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()


class InFlightWrite:
    """`Service.write()`'s context manager: a plain class, one per service, because every write
    enters it (a generator-based one costs a generator and two frames per request)."""

    __slots__ = ("_service",)

    def __init__(self, service: Service) -> None:
        self._service = service

    def __enter__(self) -> None:
        self._service._write_began()

    def __exit__(self, *exc: object) -> None:
        self._service._write_ended()
