"""Bringing a replica's mirror up to what the store holds: the step every engine's tail takes
(eventstore/pg/tail.py, eventstore/redis/tail.py), on a wake-up, a poll, or a takeover, and
the parts of a tail's thread that do not depend on the engine: which partitions are still fed
(`sync_partitions`) and the wait before reconnecting (`pause_before_retry`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from ..errors import LedgerError
from ..mirror import Mirror, MirrorDiverged
from . import StoreError
from .reader import PartitionReader

log = logging.getLogger("ledgermem.store.tail")

PAGE_ROWS = 1000  # records per read: bounded memory whatever the backlog
MAX_BACKOFF = 5.0  # seconds: the longest a tail waits before connecting again


def sync_mirror(reader: PartitionReader, partition: int, mirror: Mirror) -> int:
    """Extend `mirror` with the partition's committed records beyond its size, page by page,
    then install the newest checkpoint it covers. Returns the mirror's size.

    The records of one page must be contiguous from the mirror's size: committed records never
    have holes, so a page that is not raises MirrorDiverged (someone deleted records)."""
    while True:
        start = mirror.size
        rows = reader.rows(partition, start, PAGE_ROWS)
        if not rows:
            break
        held = next((i for i, (seq, _) in enumerate(rows) if seq != start + i), len(rows))
        if held:
            mirror.extend([line for _, line in rows[:held]])
        if held < len(rows):
            raise MirrorDiverged(
                f"partition {partition}: the store's rows jump from seq {start + held - 1} "
                f"to {rows[held][0]} (rows missing from the store)"
            )
        if len(rows) < PAGE_ROWS:
            break
    found = reader.checkpoint(partition, mirror.size)
    if found is not None:
        mirror.install_checkpoint(found[1])
    return mirror.size


def sync_partitions(
    sync: Callable[[int, Mirror], object],
    partitions: Iterable[int],
    mirrors: dict[int, Mirror],
    failed: dict[int, LedgerError],
) -> None:
    """Run `sync(partition, mirror)` (an engine's sync_mirror over its connection) for each of
    `partitions` in order, skipping those in `failed`. A StoreError propagates (the connection
    is made anew); any other LedgerError is the mirror refusing the store's records: feeding it
    more cannot help and retrying would log the same error every poll, so the partition goes
    into `failed` (the cluster reads it) and is logged once."""
    for partition in partitions:
        if partition in failed:
            continue
        try:
            sync(partition, mirrors[partition])
        except LedgerError as exc:
            if isinstance(exc, StoreError):
                raise
            failed[partition] = exc
            log.error("store tail: partition %d stopped: %s", partition, exc)


def pause_before_retry(stopping: threading.Event, backoff: float, problem: str | None) -> float:
    """Log why a tail reconnects (`problem`, one line; None: an unexpected error, logged with
    its traceback, so call it inside the `except`), wait `backoff` seconds or until `stopping`
    is set, and return the next wait: doubled, at most MAX_BACKOFF."""
    if problem is None:
        log.exception("store tail: unexpected error; reconnecting in %.1f s", backoff)
    else:
        log.warning("store tail: %s; reconnecting in %.1f s", problem, backoff)
    stopping.wait(backoff)
    return min(MAX_BACKOFF, backoff * 2)
