"""Becoming a partition's writer: recover it from the table, then create or resume its log.

The cluster takes a lease (lease.take), then calls `open_partition_writer`, which checks the
partition as recovery.py describes and hands back a `LogWriter` on a `PgSink` fenced by that
lease: `create_on` for an empty partition, `resume_on` (log.resume and a checkpoint) otherwise.
The heartbeat that keeps a lease while the writer is idle is eventstore/shared/keeper.py's
`LeaseKeeper` over this engine's sessions (`LeaseKeeper(PgEngine(url).session, lease)`); appends
renew the lease too.
"""

from __future__ import annotations

import time
from typing import Any

from ..checkpoint import SigningKey
from ..file_recovery import Recovered
from ..mirror import Mirror
from ..shared.recovery import open_writer_on
from ..writer import LogWriter
from .deadline import within
from .lease import Lease
from .recovery import partition_key, recover_partition
from .schema import StoreInfo, connect_within
from .sink import PgSink

# How long a takeover's recovery may wait on the store (deadline.py) before it is given up and
# the lease released: no request waits on it (the partition answers 503 no_leader meanwhile), and
# reading a full last segment may take longer than a short lease.
RECOVERY_SECONDS = 60.0


def open_partition_writer(
    url: str,
    info: StoreInfo,
    key: SigningKey,
    partition: int,
    lease: Lease,
    mirror: Mirror | None = None,
    **writer_options: Any,
) -> LogWriter:
    """The writer of `partition` for the holder of `lease` (recover + create_on / resume_on).

    `writer_options`: checkpoint_interval, clock, salts. Raises CorruptLog when the table's log
    disagrees with its checkpoints (the partition must not be served), CommitRefused when the
    lease was lost on the way."""
    pkey = partition_key(info, key, partition)
    sink = PgSink(url, info, lease, mirror)

    def recover() -> Recovered | None:
        deadline = time.monotonic() + RECOVERY_SECONDS
        conn = connect_within(url, RECOVERY_SECONDS)
        try:
            with within(conn, deadline, f"partition {partition}'s recovery"):
                return recover_partition(conn, info, pkey, partition, sink=sink)
        finally:
            conn.close()

    return open_writer_on(sink, pkey, info.seg_bits, recover, **writer_options)
