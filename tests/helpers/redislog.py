"""Shared pieces of the Redis store tests (tests/test_redis_*.py), as tests/helpers/pglog.py is
for PostgreSQL: a store with a key, leases, and the partition read back out of Redis."""

from __future__ import annotations

from pathlib import Path

from eventstore.checkpoint import SigningKey
from eventstore.layout import DataDir
from eventstore.redis import lease as leases
from eventstore.redis.reader import RedisReader
from eventstore.redis.schema import connect, init_store
from eventstore.shared import StoreInfo
from eventstore.store import load_or_create_key

ORIGIN = "test.local/redislog"


def make_store(
    url: str, data: Path, partitions: int = 1, seg_bits: int = 3
) -> tuple[StoreInfo, SigningKey]:
    """init-store with a key in `data`; returns the store and the replica's key."""
    info = init_store(url, partitions, data, seg_bits=seg_bits, origin=ORIGIN)
    return info, load_or_create_key(DataDir(data), ORIGIN, create=False).key


def take(url: str, partition: int, owner: str, seconds: float = 10.0) -> leases.Lease:
    client = connect(url)
    try:
        lease = leases.take(client, partition, owner, seconds)
    finally:
        client.close()
    assert lease is not None, f"partition {partition} is leased already"
    return lease


def lines(url: str, partition: int = 0) -> list[bytes]:
    """Every line the partition holds, in seq order, as every reader sees it."""
    client = connect(url)
    try:
        reader = RedisReader(client)
        last_seq, _ = reader.head(partition)
        found = reader.rows(partition, 0, last_seq + 1)
    finally:
        client.close()
    assert [seq for seq, _ in found] == list(range(len(found)))
    return [line for _, line in found]


def newest_checkpoint(url: str, partition: int = 0) -> str | None:
    client = connect(url)
    try:
        found = RedisReader(client).checkpoint(partition)
    finally:
        client.close()
    return None if found is None else found[1]
