"""Bringing a replica's mirror up to what the store holds: the step every engine's tail takes
(eventstore/pg/tail.py, eventstore/redis/tail.py), on a wake-up, a poll, or a takeover."""

from __future__ import annotations

from ..mirror import Mirror, MirrorDiverged
from .reader import PartitionReader

PAGE_ROWS = 1000  # records per read: bounded memory whatever the backlog


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
