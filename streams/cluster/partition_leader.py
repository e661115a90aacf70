"""One partition this replica holds a lease on: the takeover sequence, stepping down, handing over.

Takeover, in order (docs/scale-out-replicas.md):
1. the lease is taken (by the leadership loop, before this object exists);
2. `StoreTail.sync(p)`: the mirror holds every committed row, so the memory reads the whole log;
3. `open_partition_writer`: recovery from the table (the Merkle state rebuilt from segment roots,
   the newest checkpoint checked against it, refusing on a mismatch), then `log.resume` and a
   signed checkpoint, through the engine's sink (PgSink, RedisSink), which also extends the mirror;
4. `Memory.open_on(writer, mirror dir, DATA/partitions/p<N>/)`: the newest local snapshot, then
   the rest of the log folded in;
5. only then does the cluster route the partition here.

Stepping down (a fenced commit, a lost renewal, the local deadline passed) must not wait on the
database: the lease is made invalid on the local clock first, so the sink refuses every further
statement without sending it, and the memory closes on a background thread, which then releases
the lease (fenced: a no-op when another replica holds it already). Handing over
(balance, graceful stop) closes the memory cleanly instead (`log.close` and its checkpoint are
committed under the still-valid lease) and then releases the lease so another replica can take
it at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sections.runtime.memory import Memory

if TYPE_CHECKING:
    from eventstore.mirror import Mirror
    from eventstore.shared import StoreInfo
    from eventstore.shared.engine import StoreEngine, StoreSession
    from eventstore.shared.lease import Lease
    from eventstore.store import KeyInfo
    from sections.runtime.tracing import Tracing
    from streams.server.settings import Settings

log = logging.getLogger("ledgermem.cluster")


def partition_dir(data: str | os.PathLike[str], partition: int) -> Path:
    """DATA/partitions/p<N>: where a replica keeps partition N's mirror, index and memory."""
    return Path(data) / "partitions" / f"p{partition}"


class LeaderHost(Protocol):
    """What a `PartitionLeader` needs of the replica it runs on (streams/cluster/cluster.py
    `Cluster`): the store and its description, this replica's key, settings and tracing hook,
    and each partition's mirror, brought up to date with the store before a takeover."""

    @property
    def settings(self) -> Settings: ...

    @property
    def engine(self) -> StoreEngine: ...

    @property
    def info(self) -> StoreInfo: ...

    @property
    def key(self) -> KeyInfo: ...

    @property
    def tracing(self) -> Tracing | None: ...

    def mirror(self, partition: int) -> Mirror: ...

    def sync_mirror(self, partition: int) -> None: ...


class PartitionLeader:
    def __init__(self, cluster: LeaderHost, partition: int, lease: Lease) -> None:
        self.cluster = cluster
        self.partition = partition
        self.lease = lease
        self.since = time.monotonic()
        self.memory: Memory | None = None
        self._lock = threading.Lock()
        self._abandoned = False

    @property
    def failure(self) -> BaseException | None:
        memory = self.memory
        return None if memory is None else memory.failure

    def take_over(self) -> Memory:
        cluster, partition = self.cluster, self.partition
        settings = cluster.settings
        mirror = cluster.mirror(partition)
        cluster.sync_mirror(partition)
        writer = cluster.engine.open_partition_writer(
            cluster.info,
            cluster.key.key,
            partition,
            self.lease,
            mirror,
            checkpoint_interval=settings.checkpoint_interval,
        )
        memory = Memory.open_on(
            writer,
            mirror.log_dir,
            partition_dir(settings.data, partition),
            key=cluster.key,
            config=settings.memory_config,
            dedup_window_us=settings.dedup_window_us,
        )
        memory.tracing = cluster.tracing
        with self._lock:
            self.memory = memory
            abandoned = self._abandoned
        if abandoned:
            self._close_in_background()
        return memory

    def abandon(self) -> None:
        """Stop at once: no further statement reaches the database; close in the background."""
        self.lease.lose()  # PgSink checks lease.valid() before each statement
        with self._lock:
            self._abandoned = True
            memory = self.memory
        if memory is not None:
            self._close_in_background()

    def _close_in_background(self) -> None:
        threading.Thread(
            target=self._close_quietly, name=f"ledgermem-stepdown-p{self.partition}", daemon=True
        ).start()

    def _close_quietly(self) -> None:
        memory = self.memory
        if memory is None:
            return
        try:
            memory.close()
        except Exception as exc:  # a fenced writer: nothing more of ours is durable anyway
            log.info("partition %d: closed after stepping down (%s)", self.partition, exc)
        # After a failed writer the lease may still be ours in the table: release it so that a
        # successor need not wait it out. Fenced by epoch and owner, it changes nothing when
        # another replica holds the partition already.
        self.release_quietly()

    def close_and_release(self, session: StoreSession | None) -> None:
        """Hand over cleanly: log.close and the final checkpoint, then release the lease."""
        memory = self.memory
        if memory is not None:
            try:
                memory.close()
            except Exception as exc:
                log.warning("partition %d: closing the memory failed: %s", self.partition, exc)
        self.release_quietly(session)

    def release_quietly(self, session: StoreSession | None = None) -> None:
        own = session is None
        try:
            if session is None:
                session = self.cluster.engine.session()
            session.release(self.lease)
        except Exception as exc:  # it expires by itself
            log.warning("partition %d: releasing the lease failed: %s", self.partition, exc)
        finally:
            if own and session is not None:
                session.close()
