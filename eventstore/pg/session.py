"""`PgSession`: leadership and registry calls over one connection (eventstore/shared/engine.py's
`StoreSession`), for the cluster's leadership loop and the lease keeper."""

from __future__ import annotations

from ..shared.lease import Head, Lease, Replica
from . import lease as leases
from . import replicas as registry
from .schema import connect


class PgSession:
    def __init__(self, url: str) -> None:
        self.conn = connect(url)

    def take(self, partition: int, owner: str, seconds: float) -> Lease | None:
        return leases.take(self.conn, partition, owner, seconds)

    def renew(self, lease: Lease) -> bool:
        return leases.renew(self.conn, lease)

    def release(self, lease: Lease) -> None:
        leases.release(self.conn, lease)

    def heads(self) -> list[Head]:
        return leases.heads(self.conn)

    def heartbeat(self, replica_id: str, url: str) -> None:
        registry.heartbeat(self.conn, replica_id, url)

    def replicas(self, live_seconds: float) -> list[Replica]:
        return registry.replicas(self.conn, live_seconds)

    def leave(self, replica_id: str) -> None:
        registry.leave(self.conn, replica_id)

    def prune(self) -> None:
        registry.prune(self.conn)

    def close(self) -> None:
        self.conn.close()
