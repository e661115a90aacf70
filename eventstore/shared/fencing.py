"""What a shared store's sink answers when a write other than an append cannot be made, and
how it feeds the replica's mirror: the same for every engine (pg/sink.py, redis/sink.py)."""

from __future__ import annotations

import logging

from ..errors import LedgerError
from ..mirror import Mirror
from ..sink import Refused

log = logging.getLogger("eventstore.shared.sink")

LEASE_EXPIRED = "nobody: this replica's lease expired before the commit was sent"
BACKOFF_FIRST, BACKOFF_MAX = 0.02, 0.5


class Fenced(LedgerError, OSError):
    """A write other than an append found the partition led by someone else (or the lease
    ended): the writer stops. An OSError so the writer's checkpoint timer treats it as a
    failed write; `refused` makes the writer answer CommitRefused, as a refused append does."""

    def __init__(self, message: str, owner: str) -> None:
        super().__init__(message)
        self.refused = Refused(owner)


class StoreUnreachable(LedgerError, OSError):
    """The store did not answer before the lease's deadline."""


def lease_expired(partition: int, reason: str) -> Fenced:
    why = f" (the store's last answer: {reason})" if reason else ""
    return Fenced(f"this replica's lease on partition {partition} expired{why}", LEASE_EXPIRED)


def feed_mirror(mirror: Mirror | None, partition: int, method: str, *arguments: object) -> None:
    """After a durable write: the same lines (with their records) or checkpoint to the mirror.
    The mirror is a cache the tail refills, so its error is logged, never turned into a failed
    commit."""
    if mirror is None:
        return
    try:
        # The records go with the lines: the mirror then trusts the sequencer's own parse
        # and only compares seqs, chain and bytes (about 20 us a record less on this thread).
        getattr(mirror, method)(*arguments)
    except Exception:
        log.exception("partition %d: the mirror refused %s", partition, method)
