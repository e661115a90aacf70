"""`PgSession`: leadership and registry calls over one connection (eventstore/shared/engine.py's
`StoreSession`), for the cluster's leadership loop and the lease keeper."""

from __future__ import annotations

from contextlib import AbstractContextManager

from ..shared.lease import Head, Lease, Replica
from . import deadline
from . import lease as leases
from . import replicas as registry
from .schema import connect, connect_within


class PgSession:
    def __init__(self, url: str, seconds: float | None = None) -> None:
        """`seconds`: the connection is given up on after that long (StoreStalled)."""
        self.conn = connect(url) if seconds is None else connect_within(url, seconds)

    def within(self, until: float, what: str) -> AbstractContextManager[None]:
        """The block's calls are cut at `until` (deadline.py): StoreStalled."""
        return deadline.within(self.conn, until, what)

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
