"""A `Memory` on a shared store (PostgreSQL or Redis, by the URL), in this process: the leader of one partition.

`ledgermem serve --store URL` runs the memory of every partition it leads (streams/cluster/). A
program that embeds ledgermem (the JAF adapter's provider, sections/adapters/jaf.py) needs the
same for the one partition that holds its tenant, without a web service: `StoreMemory.open`
does a replica's takeover for that partition (docs/scale-out-replicas.md) and nothing more:

1. the store's description and this data directory's signing key (the store's: copy `keys/` of
   the data directory that ran `ledgermem init-store`);
2. the partition's lease, waited for while another holder's runs out (a crashed process's);
   a `LeaseKeeper` renews it while the memory is open;
3. the mirror (`DATA/partitions/p<N>/log`, the layout `serve` uses) brought up to the table;
4. `open_partition_writer` (recovery from the table, `log.resume`, a signed checkpoint) and
   `Memory.open_on(writer, mirror, DATA/partitions/p<N>)`.

`close()` closes the memory (`log.close` under the lease), stops renewing, releases the lease so
the next holder need not wait it out, and closes the mirror. While a `serve` replica leads the
partition, the lease is not free: use that replica's HTTP API instead (or stop it).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from eventstore.errors import LedgerError
from eventstore.layout import DataDir
from eventstore.mirror import Mirror
from eventstore.partitions import partition_of, partition_origin
from eventstore.shared.engine import StoreEngine
from eventstore.shared.keeper import LeaseKeeper
from eventstore.store import load_or_create_key
from eventstore.stores import open_engine
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory


class StoreBusy(LedgerError):
    """The partition's lease is held by someone else (a running replica) for longer than we
    waited: nothing was opened."""


class StoreMemory:
    """A memory leading one partition of a store, with what keeps it the leader."""

    def __init__(
        self, memory: Memory, partition: int, keeper, mirror: Mirror, engine: StoreEngine
    ) -> None:
        self.memory = memory
        self.partition = partition
        self._keeper = keeper
        self._mirror = mirror
        self._engine = engine

    @classmethod
    def open(
        cls,
        url: str,
        data_dir: str | os.PathLike[str],
        *,
        tenant: str = "default",
        lease_seconds: float = 5.0,
        wait: float | None = None,
        config: MemoryConfig | str | Path | None = None,
        owner: str | None = None,
    ) -> StoreMemory:
        """Lead the partition of `tenant` (the memory's default tenant) and open its memory.
        Waits up to `wait` seconds (default: two leases) for the lease; StoreBusy after that."""
        engine = open_engine(url)
        data = DataDir(data_dir)
        owner = owner or f"embedded-{uuid.uuid4().hex[:12]}"
        wait = 2 * lease_seconds if wait is None else wait
        info = engine.read_store()
        key = load_or_create_key(data, create=False)
        partition = partition_of(tenant, info.partitions)
        info.key_for(key.key, partition)  # BadKey before anything is taken
        lease = _take(engine, partition, owner, lease_seconds, wait)
        keeper = mirror = None
        try:
            keeper = LeaseKeeper(engine.session, lease).start()
            here = data.root / "partitions" / f"p{partition}"
            mirror = Mirror.open(
                here / "log", partition_origin(info.origin, partition), info.seg_bits
            )
            engine.sync_mirror(partition, mirror)
            writer = engine.open_partition_writer(info, key.key, partition, lease, mirror)
            memory = Memory.open_on(writer, mirror.log_dir, here, key=key, config=config,
                                    tenant=tenant)  # fmt: skip
        except BaseException:
            _let_go(engine, lease, keeper, mirror)
            raise
        return cls(memory, partition, keeper, mirror, engine)

    def close(self) -> None:
        try:
            self.memory.close()
        finally:
            _let_go(self._engine, self._keeper.lease, self._keeper, self._mirror)

    def __enter__(self) -> StoreMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take(engine: StoreEngine, partition: int, owner: str, seconds: float, wait: float):
    deadline = time.monotonic() + wait
    session = engine.session()
    try:
        while True:
            lease = session.take(partition, owner, seconds)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise StoreBusy(
                    f"partition {partition} is led by another replica: use its HTTP API, or "
                    "stop it and open again"
                )
            time.sleep(min(0.2, seconds / 5))
    finally:
        session.close()


def _let_go(engine: StoreEngine, lease, keeper, mirror) -> None:
    """Stop renewing, release the lease (fenced: a no-op if it is someone else's), close the
    mirror; each step even when the one before failed."""
    try:
        if keeper is not None:
            keeper.stop()
    finally:
        try:
            session = engine.session()
            try:
                session.release(lease)
            finally:
                session.close()
        except Exception:  # it runs out by itself
            lease.lose()
        finally:
            if mirror is not None:
                mirror.close()
