"""Leases and the replica registry on a Redis store: the same operations as eventstore/pg/
lease.py and streams/cluster/registry.py, each one script (scripts.py) on the server's clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..shared.lease import Head, Lease, Replica, renew_with, take_with
from . import keys, scripts

if TYPE_CHECKING:
    from . import Client

STALE_MS = 3_600_000  # rows of replicas long gone are deleted by whoever beats next


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def take(client: Client, partition: int, owner: str, seconds: float) -> Lease | None:
    """Take partition's lease if it expired (or was released); None while someone holds it."""

    def ask() -> int | None:
        epoch = client.eval(scripts.TAKE, 1, keys.head(partition), owner, _ms(seconds))
        return None if epoch is None else int(epoch)

    return take_with(partition, owner, seconds, ask)


def renew(client: Client, lease: Lease) -> bool:
    """Extend the lease (the heartbeat). False: it was lost, and `lease` is marked so."""

    def ask() -> bool:
        head = keys.head(lease.partition)
        args = (lease.epoch, lease.owner, _ms(lease.seconds))
        return bool(client.eval(scripts.RENEW, 1, head, *args) == 1)

    return renew_with(lease, ask)


def release(client: Client, lease: Lease) -> None:
    """Give the partition up now (on a clean stop), so another replica need not wait it out."""
    lease.lose()
    client.eval(scripts.RELEASE, 1, keys.head(lease.partition), lease.epoch, lease.owner)


def heads(client: Client, partitions: int) -> list[Head]:
    """Every partition's head, with expiry judged by the server's clock."""
    pipe = client.pipeline(transaction=True)
    pipe.time()
    for n in range(partitions):
        pipe.hmget(keys.head(n), ["last_seq", "epoch", "owner", "lease_until"])
    (secs, micros), *rows = pipe.execute()
    now = secs * 1000 + micros // 1000
    out = []
    for n, (last_seq, epoch, owner, until) in enumerate(rows):
        until_ms = int(until or 0)
        out.append(
            Head(
                n,
                int(last_seq if last_seq is not None else -1),
                int(epoch or 0),
                owner.decode() if owner else None,
                datetime.fromtimestamp(until_ms / 1000, UTC) if until_ms > 0 else None,
                until_ms < now,
            )
        )
    return out


def heartbeat(client: Client, replica_id: str, url: str) -> None:
    client.eval(scripts.HEARTBEAT, 2, keys.REPLICAS, keys.SEEN, replica_id, url)


def replicas(client: Client, live_seconds: float) -> list[Replica]:
    """Every replica row, with whether its heartbeat is fresher than `live_seconds`."""
    pipe = client.pipeline(transaction=True)
    pipe.time()
    pipe.hgetall(keys.REPLICAS)
    pipe.zrange(keys.SEEN, 0, -1, withscores=True)
    (secs, micros), urls, seen = pipe.execute()
    now = secs * 1000 + micros // 1000
    last = {id_.decode(): score for id_, score in seen}
    return [
        Replica(id_.decode(), url.decode(), last.get(id_.decode(), 0) > now - live_seconds * 1000)
        for id_, url in urls.items()
    ]


def leave(client: Client, replica_id: str) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.hdel(keys.REPLICAS, replica_id)
    pipe.zrem(keys.SEEN, replica_id)
    pipe.execute()


def prune(client: Client) -> None:
    client.eval(scripts.PRUNE, 2, keys.REPLICAS, keys.SEEN, STALE_MS)
