"""Becoming a partition's writer on a Redis store: recover it (eventstore/shared/recovery.py
over `RedisReader`), then create or resume its log on a `RedisSink` fenced by the lease."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..checkpoint import SigningKey
from ..file_recovery import Recovered
from ..mirror import Mirror
from ..shared import StoreInfo
from ..shared.keeper import LeaseKeeper as SharedKeeper
from ..shared.lease import Lease
from ..shared.recovery import open_writer_on, partition_key, recover_partition
from ..writer import LogWriter
from .reader import RedisReader
from .schema import connect
from .session import RedisSession
from .sink import RedisSink


def open_partition_writer(
    url: str,
    info: StoreInfo,
    key: SigningKey,
    partition: int,
    lease: Lease,
    mirror: Mirror | None = None,
    **writer_options: Any,
) -> LogWriter:
    """The writer of `partition` for the holder of `lease` (recover + create_on / resume_on),
    as eventstore/pg/leadership.py's: CorruptLog when the store's log disagrees with its
    checkpoints, CommitRefused when the lease was lost on the way."""
    pkey = partition_key(info, key, partition)
    sink = RedisSink(url, info, lease, mirror)

    def recover() -> Recovered | None:
        client = connect(url)
        try:
            return recover_partition(RedisReader(client), info, pkey, partition, sink=sink)
        finally:
            client.close()

    return open_writer_on(sink, pkey, info.seg_bits, recover, **writer_options)


class LeaseKeeper(SharedKeeper):
    """Renews a lease every `seconds / 3` on a thread of its own, until stopped or lost."""

    def __init__(
        self, url: str, lease: Lease, on_lost: Callable[[Lease], None] | None = None
    ) -> None:
        super().__init__(lambda seconds: RedisSession(url, seconds=seconds), lease, on_lost)
        self.url = url
