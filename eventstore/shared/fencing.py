"""What a shared store's sink answers when a write cannot be made, how it retries while its
lease lasts, and how it feeds the replica's mirror: the same for every engine (pg/sink.py,
redis/sink.py), which supplies only its calls and which of its errors mean a lost connection."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Literal

from ..errors import LedgerError
from ..mirror import Mirror
from ..sink import COMMITTED, CommitResult, Refused, Unknown
from . import one_line
from .lease import Lease

Errors = type[BaseException] | tuple[type[BaseException], ...]

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


def committed(
    lease: Lease, started: float, observer: Callable[[float, int], None] | None, records: int
) -> CommitResult:
    """An append sent at monotonic `started` committed `records` records: it renewed the lease
    too, and the sink's fsync observer (metrics) hears how long it took."""
    lease.extend_from(started)
    if observer is not None:
        observer(time.monotonic() - started, records)
    return COMMITTED


def decide_after_loss(
    lease: Lease,
    exc: BaseException,
    decide: Callable[[], CommitResult | Literal["resend"]],
    lost: Errors,
    drop: Callable[[], None],
    counts: collections.Counter[str],
) -> CommitResult | Literal["resend"]:
    """After a connection lost mid-append (`exc`): `decide()` from the store's head whether it
    was COMMITTED, is to be resent ("resend"), or was Refused, retrying while the lease lasts
    when `decide` loses its connection too (`lost`; `drop` forgets the writer's connection);
    Unknown when the store stayed unreachable until the lease's deadline. Each decision is
    counted in `counts` ("resend" or the result's class name: the sink's `after_loss`)."""
    decision = _decide(lease, exc, decide, lost, drop)
    counts[decision if decision == "resend" else type(decision).__name__] += 1
    return decision


def _decide(
    lease: Lease,
    exc: BaseException,
    decide: Callable[[], CommitResult | Literal["resend"]],
    lost: Errors,
    drop: Callable[[], None],
) -> CommitResult | Literal["resend"]:
    reason = one_line(exc)
    if not lease.valid():
        # The lease ended while the append was in flight (a leader paused past its lease, then
        # woken, finds its connection cut by the deadline): nothing more may be sent, so the
        # outcome stays unknown; a successor's recovery settles it.
        return Unknown(f"this replica's lease ended before the append's outcome was read: {reason}")
    delay = BACKOFF_FIRST
    while lease.valid():
        try:
            return decide()
        except lost as again:
            drop()
            reason = one_line(again)
        time.sleep(min(delay, max(0.0, lease.remaining())))
        delay = min(delay * 2, BACKOFF_MAX)
    return Unknown(f"the store stayed unreachable until the lease's deadline: {reason}")


def retry_fenced(
    partition: int,
    lease: Lease,
    write: Callable[[], None],
    lost: Errors,
    failed: Errors,
    drop: Callable[[], None],
) -> None:
    """Run an idempotent fenced `write`, reconnecting while the lease lasts.

    `lost`: the engine's errors of a lost connection (`drop` forgets it; the write is retried);
    `failed`: its other errors, StoreUnreachable (an OSError: the writer's timer stops on it).
    Once the lease's local deadline has passed, the answer is a refusal (`Fenced` with
    LEASE_EXPIRED: the writer answers CommitRefused, as for an append sent too late), whatever
    the last attempt met: a lost connection found after the deadline (a leader paused past its
    lease and woken) is the lease's end, not an unreachable store."""
    delay = BACKOFF_FIRST
    reason = ""
    while True:
        if not lease.valid():
            raise lease_expired(partition, reason)
        try:
            write()
            return
        except lost as exc:
            drop()
            reason = one_line(exc)
        except failed as exc:
            if not lease.valid():
                raise lease_expired(partition, one_line(exc)) from None
            raise StoreUnreachable(f"the store refused a write: {one_line(exc)}") from None
        # Retry until the deadline, never past it: the loop's first check then refuses.
        time.sleep(max(0.0, min(delay, lease.remaining())))
        delay = min(delay * 2, BACKOFF_MAX)
