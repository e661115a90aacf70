"""A `Memory` on a shared PostgreSQL store, in this process: the leader of one partition.

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
from eventstore.store import load_or_create_key
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory


class StoreBusy(LedgerError):
    """The partition's lease is held by someone else (a running replica) for longer than we
    waited: nothing was opened."""


class StoreMemory:
    """A memory leading one partition of a store, with what keeps it the leader."""

    def __init__(self, memory: Memory, partition: int, keeper, mirror: Mirror, url: str) -> None:
        self.memory = memory
        self.partition = partition
        self._keeper = keeper
        self._mirror = mirror
        self._url = url

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
        from eventstore.pg.leadership import LeaseKeeper, open_partition_writer
        from eventstore.pg.schema import connect, read_store
        from eventstore.pg.tail import sync_mirror

        data = DataDir(data_dir)
        owner = owner or f"embedded-{uuid.uuid4().hex[:12]}"
        wait = 2 * lease_seconds if wait is None else wait
        with connect(url) as conn:
            info = read_store(conn)
        key = load_or_create_key(data, create=False)
        partition = partition_of(tenant, info.partitions)
        info.key_for(key.key, partition)  # BadKey before anything is taken
        lease = _take(url, partition, owner, lease_seconds, wait)
        keeper = mirror = None
        try:
            keeper = LeaseKeeper(url, lease).start()
            here = data.root / "partitions" / f"p{partition}"
            mirror = Mirror.open(
                here / "log", partition_origin(info.origin, partition), info.seg_bits
            )
            with connect(url) as conn:
                sync_mirror(conn, partition, mirror)
            writer = open_partition_writer(url, info, key.key, partition, lease, mirror)
            memory = Memory.open_on(writer, mirror.log_dir, here, key=key, config=config,
                                    tenant=tenant)  # fmt: skip
        except BaseException:
            _let_go(url, lease, keeper, mirror)
            raise
        return cls(memory, partition, keeper, mirror, url)

    def close(self) -> None:
        try:
            self.memory.close()
        finally:
            _let_go(self._url, self._keeper.lease, self._keeper, self._mirror)

    def __enter__(self) -> StoreMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take(url: str, partition: int, owner: str, seconds: float, wait: float):
    from eventstore.pg import lease as leases
    from eventstore.pg.schema import connect

    deadline = time.monotonic() + wait
    with connect(url) as conn:
        while True:
            lease = leases.take(conn, partition, owner, seconds)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise StoreBusy(
                    f"partition {partition} is led by another replica: use its HTTP API, or "
                    "stop it and open again"
                )
            time.sleep(min(0.2, seconds / 5))


def _let_go(url: str, lease, keeper, mirror) -> None:
    """Stop renewing, release the lease (fenced: a no-op if it is someone else's), close the
    mirror; each step even when the one before failed."""
    from eventstore.pg import lease as leases
    from eventstore.pg.schema import connect

    try:
        if keeper is not None:
            keeper.stop()
    finally:
        try:
            with connect(url) as conn:
                leases.release(conn, lease)
        except Exception:  # it runs out by itself
            lease.lose()
        finally:
            if mirror is not None:
                mirror.close()
