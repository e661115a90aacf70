"""What the shared stores (PostgreSQL in eventstore/pg/, Redis in eventstore/redis/) have in
common: the store's description, its errors, the lease as a replica holds it, and the logic that
reads a partition back (recovery, export, mirror sync) over a `PartitionReader`, whatever the
engine (docs/scale-out.md). Each engine module supplies only the I/O: its reads, its fenced
writes, its tail. `engine.open_engine(url)` picks the engine from the URL's scheme.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ..checkpoint import SigningKey
from ..errors import BadKey, LedgerError
from ..partitions import partition_origin


class StoreError(LedgerError):
    """The shared store is missing, of another shape, or unusable as configured."""


@dataclass(frozen=True)
class StoreInfo:
    origin: str
    partitions: int
    seg_bits: int
    vkeys: tuple[str, ...]  # index = partition

    def key_for(self, key: SigningKey, partition: int) -> SigningKey:
        """`key` as partition N signs with it, after checking it is the store's key."""
        partition_key = key.with_origin(partition_origin(self.origin, partition))
        if str(partition_key.vkey) != self.vkeys[partition]:
            raise BadKey(
                f"this replica's signing key ({partition_key.vkey}) is not the store's key for "
                f"partition {partition} ({self.vkeys[partition]}): copy the keys/ directory of "
                "the data directory that ran init-store"
            )
        return partition_key


def adopt_store(
    existing: StoreInfo, partitions: int, data_dir: str | os.PathLike[str]
) -> StoreInfo:
    """`init-store` on a store that exists already (eventstore/pg/schema.py,
    eventstore/redis/schema.py): it changes nothing, only checks that it has `partitions`
    partitions (StoreError) and that `data_dir`'s key, created when missing, is the store's key
    for each of them (BadKey). Returns `existing`."""
    from ..layout import DataDir
    from ..store import load_or_create_key

    if existing.partitions != partitions:
        raise StoreError(
            f"the store already has {existing.partitions} partitions; it cannot be "
            f"changed to {partitions}"
        )
    info = load_or_create_key(DataDir(data_dir), existing.origin, create=True)
    for n in range(partitions):
        existing.key_for(info.key, n)
    return existing


def redact_url(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
