"""`RedisSession`: leadership and registry calls over one client (eventstore/shared/engine.py's
`StoreSession`), for the cluster's leadership loop and the lease keeper."""

from __future__ import annotations

from ..shared.lease import Head, Lease, Replica
from . import lease as leases
from .schema import connect, read_store


class RedisSession:
    def __init__(self, url: str, partitions: int | None = None) -> None:
        self.client = connect(url)
        self._partitions = partitions

    def take(self, partition: int, owner: str, seconds: float) -> Lease | None:
        return leases.take(self.client, partition, owner, seconds)

    def renew(self, lease: Lease) -> bool:
        return leases.renew(self.client, lease)

    def release(self, lease: Lease) -> None:
        leases.release(self.client, lease)

    def heads(self) -> list[Head]:
        if self._partitions is None:
            self._partitions = read_store(self.client).partitions
        return leases.heads(self.client, self._partitions)

    def heartbeat(self, replica_id: str, url: str) -> None:
        leases.heartbeat(self.client, replica_id, url)

    def replicas(self, live_seconds: float) -> list[Replica]:
        return leases.replicas(self.client, live_seconds)

    def leave(self, replica_id: str) -> None:
        leases.leave(self.client, replica_id)

    def prune(self) -> None:
        leases.prune(self.client)

    def close(self) -> None:
        self.client.close()
