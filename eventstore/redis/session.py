"""`RedisSession`: leadership and registry calls over one client (eventstore/shared/engine.py's
`StoreSession`), for the cluster's leadership loop and the lease keeper."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..shared import StoreError, one_line
from ..shared.lease import Head, Lease, Replica
from . import lease as leases
from . import require_redis
from .schema import connect, read_store


class RedisSession:
    def __init__(
        self, url: str, partitions: int | None = None, seconds: float | None = None
    ) -> None:
        """`seconds`: the client's socket timeouts (connect and each reply), so no call of
        this session waits on a silent server longer (schema.connect's 5 s by default)."""
        self.client = connect(url) if seconds is None else connect(url, seconds)
        self._partitions = partitions

    @contextlib.contextmanager
    def within(self, deadline: float, what: str) -> Iterator[None]:
        """The block's calls are bounded by the socket timeout the session was opened with
        (redis-py has no deadline per block): open it with `seconds` no longer than the time to
        `deadline` and a stall ends there. A timeout raises StoreError naming `what`."""
        redis = require_redis()
        try:
            yield
        except redis.TimeoutError as exc:
            raise StoreError(
                f"the store did not answer {what} before its deadline: {one_line(exc)}"
            ) from exc

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
