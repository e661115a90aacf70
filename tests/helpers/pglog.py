"""Shared pieces of the PostgreSQL log tests (tests/test_pg_*.py): a store with a key, leases,
and reading a partition back out of the table to check it as the verifier would."""

from __future__ import annotations

from pathlib import Path

from eventstore.checkpoint import SigningKey
from eventstore.layout import DataDir
from eventstore.linecheck import check_line
from eventstore.partitions import partition_origin
from eventstore.pg import lease as leases
from eventstore.pg.schema import StoreInfo, connect, init_store
from eventstore.record import genesis
from eventstore.store import load_or_create_key

ORIGIN = "test.local/pglog"


def make_store(
    url: str, data: Path, partitions: int = 1, seg_bits: int = 3
) -> tuple[StoreInfo, SigningKey]:
    """init-store with a key in `data`; returns the store and the replica's key."""
    info = init_store(url, partitions, data, seg_bits=seg_bits, origin=ORIGIN)
    return info, load_or_create_key(DataDir(data), ORIGIN, create=False).key


def partition_key(info: StoreInfo, key: SigningKey, partition: int) -> SigningKey:
    return info.key_for(key, partition)


def take(url: str, partition: int, owner: str, seconds: float = 10.0) -> leases.Lease:
    with connect(url) as conn:
        lease = leases.take(conn, partition, owner, seconds)
    assert lease is not None, f"partition {partition} is leased already"
    return lease


def rows(url: str, partition: int = 0) -> list[tuple[int, bytes, bytes]]:
    """(seq, h, line) of every row of the partition, in seq order."""
    with connect(url) as conn:
        found = conn.execute(
            "SELECT seq, h, line FROM lm_record WHERE partition = %s ORDER BY seq", (partition,)
        ).fetchall()
    return [(seq, bytes(h), bytes(line)) for seq, h, line in found]


def head(url: str, partition: int = 0) -> tuple[int, bytes, int, str | None]:
    with connect(url) as conn:
        last_seq, last_h, epoch, owner = conn.execute(
            "SELECT last_seq, last_h, epoch, owner FROM lm_head WHERE partition = %s",
            (partition,),
        ).fetchone()
    return last_seq, bytes(last_h), epoch, owner


def snapshot(url: str, partition: int = 0):
    """(rows, head) read in one snapshot: a killed leader's last statement may still commit
    on the server while the test reads."""
    with connect(url) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        found = conn.execute(
            "SELECT seq, h, line FROM lm_record WHERE partition = %s ORDER BY seq", (partition,)
        ).fetchall()
        last_seq, last_h, epoch, owner = conn.execute(
            "SELECT last_seq, last_h, epoch, owner FROM lm_head WHERE partition = %s",
            (partition,),
        ).fetchone()
    rows_ = [(seq, bytes(h), bytes(line)) for seq, h, line in found]
    return rows_, (last_seq, bytes(last_h), epoch, owner)


def assert_chain(url: str, info: StoreInfo, partition: int = 0) -> list[dict]:
    """Rows gap-free from 0, every line passing check_line chained from genesis, h stored as
    computed, the head on the last row. Returns the parsed records."""
    prev = genesis(partition_origin(info.origin, partition))
    objs = []
    found, (last_seq, last_h, _, _) = snapshot(url, partition)
    for expected, (seq, h, line) in enumerate(found):
        assert seq == expected, f"gap: seq {expected} missing"
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        checked = check_line(line[:-1], seq=seq, prev=prev, seg_bits=info.seg_bits)
        assert checked.h == h
        prev = checked.h
        objs.append(checked.obj)
    assert last_seq == len(found) - 1
    if found:
        assert last_h == prev
    return objs
