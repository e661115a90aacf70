"""Becoming a partition's writer: recover it from the table, then create or resume its log.

The cluster takes a lease (lease.take), then calls `open_partition_writer`, which checks the
partition as recovery.py describes and hands back a `LogWriter` on a `PgSink` fenced by that
lease: `create_on` for an empty partition, `resume_on` (log.resume and a checkpoint) otherwise.
`LeaseKeeper` is the heartbeat that keeps a lease while the writer is idle; appends renew it too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..checkpoint import SigningKey
from ..mirror import Mirror
from ..writer import LogWriter
from . import lease as leases
from .deadline import within
from .lease import Lease
from .recovery import partition_key, recover_partition
from .schema import StoreInfo, connect_within, one_line
from .sink import PgSink

log = logging.getLogger(__name__)

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
    try:
        deadline = time.monotonic() + RECOVERY_SECONDS
        conn = connect_within(url, RECOVERY_SECONDS)
        try:
            with within(conn, deadline, f"partition {partition}'s recovery"):
                recovered = recover_partition(conn, info, pkey, partition, sink=sink)
        finally:
            conn.close()
        if recovered is None:
            return LogWriter.create_on(sink, pkey, seg_bits=info.seg_bits, **writer_options)
        return LogWriter.resume_on(sink, pkey, recovered, **writer_options)
    except BaseException:
        sink.close()
        raise


class LeaseKeeper:
    """Renews a lease every `seconds / 3` on a thread of its own, until stopped or lost."""

    def __init__(
        self, url: str, lease: Lease, on_lost: Callable[[Lease], None] | None = None
    ) -> None:
        self.url, self.lease, self.on_lost = url, lease, on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"ledgermem-lease-p{lease.partition}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        conn = None
        interval = self.lease.seconds / 3
        while not self._stop.wait(interval):
            # A renewal that gets no answer within a third of the lease is cut (deadline.py):
            # the next round tries on a new connection, and the lease's deadline stops writes.
            deadline = time.monotonic() + interval
            try:
                if conn is None:
                    conn = connect_within(self.url, interval)
                with within(conn, deadline, "a lease renewal"):
                    renewed = leases.renew(conn, self.lease)
                if not renewed:
                    break
            except Exception as exc:  # the next round retries; the deadline protects writes
                log.warning(
                    "partition %d: renewing the lease failed: %s",
                    self.lease.partition,
                    one_line(exc),
                )
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
        if not self.lease.valid() and self.on_lost is not None and not self._stop.is_set():
            self.on_lost(self.lease)
