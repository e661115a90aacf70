"""`PartitionReader`: the reads recovery, export and the mirrors' sync make of a shared store.

Each engine answers them from its own layout (eventstore/pg/reader.py: SQL over lm_*;
eventstore/redis/reader.py: a stream and hashes); the logic above them is written once.
Lines are the exact bytes appended, newline included; roots and hashes raw bytes.
"""

from __future__ import annotations

from typing import Protocol


class PartitionReader(Protocol):
    def head(self, partition: int) -> tuple[int, bytes]:
        """(last_seq, last_h): -1 and the genesis hash for an empty partition."""
        ...

    def rows(self, partition: int, start: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` (seq, line) with seq >= start, in seq order (as held: a missing row
        is missing here)."""
        ...

    def lines_at(self, partition: int, seqs: list[int]) -> dict[int, bytes]:
        """The lines of those seqs the store holds."""
        ...

    def segment_roots(self, partition: int, below: int) -> list[tuple[int, bytes]]:
        """(segment, root) of the full segments numbered below `below`, in order."""
        ...

    def checkpoint(self, partition: int, at_most: int | None = None) -> tuple[int, str] | None:
        """(size, text) of the newest checkpoint, or the newest of size <= at_most."""
        ...


def lines_between(
    reader: PartitionReader, partition: int, first: int, last: int, page: int = 1000
) -> list[tuple[int, bytes]]:
    """Every (seq, line) held with first <= seq <= last, in seq order."""
    out: list[tuple[int, bytes]] = []
    start = first
    while start <= last:
        rows = reader.rows(partition, start, min(page, last - start + 1))
        rows = [(seq, line) for seq, line in rows if seq <= last]
        out.extend(rows)
        if not rows or len(rows) < min(page, last - start + 1):
            break
        start = rows[-1][0] + 1
    return out
