"""Becoming a partition's writer on a Redis store: recover it (eventstore/shared/recovery.py
over `RedisReader`), then create or resume its log on a `RedisSink` fenced by the lease."""

from __future__ import annotations

from typing import Any

from ..checkpoint import SigningKey
from ..file_recovery import Recovered
from ..mirror import Mirror
from ..shared import StoreInfo
from ..shared.lease import Lease
from ..shared.recovery import open_writer_on, partition_key, recover_partition
from ..writer import LogWriter
from .reader import RedisReader
from .schema import connect
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
