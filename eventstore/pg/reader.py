"""`PgReader`: the shared store's reads (eventstore/shared/reader.py) as SELECTs over lm_*."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .schema import one_row

if TYPE_CHECKING:
    from . import Connection


class PgReader:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def head(self, partition: int) -> tuple[int, bytes]:
        last_seq, last_h = one_row(
            self.conn.execute(
                "SELECT last_seq, last_h FROM lm_head WHERE partition = %s", (partition,)
            )
        )
        return last_seq, bytes(last_h)

    def rows(self, partition: int, start: int, limit: int) -> list[tuple[int, bytes]]:
        rows = self.conn.execute(
            "SELECT seq, line FROM lm_record WHERE partition = %s AND seq >= %s "
            "ORDER BY seq LIMIT %s",
            (partition, start, limit),
        ).fetchall()
        return [(seq, bytes(line)) for seq, line in rows]

    def lines_at(self, partition: int, seqs: list[int]) -> dict[int, bytes]:
        if not seqs:
            return {}
        rows = self.conn.execute(
            "SELECT seq, line FROM lm_record WHERE partition = %s AND seq = ANY(%s)",
            (partition, seqs),
        ).fetchall()
        return {seq: bytes(line) for seq, line in rows}

    def segment_roots(self, partition: int, below: int) -> list[tuple[int, bytes]]:
        rows = self.conn.execute(
            "SELECT segment, root FROM lm_segment_root WHERE partition = %s AND segment < %s "
            "ORDER BY segment",
            (partition, below),
        ).fetchall()
        return [(n, bytes(root)) for n, root in rows]

    def checkpoint(self, partition: int, at_most: int | None = None) -> tuple[int, str] | None:
        if at_most is None:
            row = self.conn.execute(
                "SELECT size, text FROM lm_checkpoint WHERE partition = %s "
                "ORDER BY size DESC LIMIT 1",
                (partition,),
            ).fetchone()
        else:
            row = self.conn.execute(
                "SELECT size, text FROM lm_checkpoint WHERE partition = %s AND size <= %s "
                "ORDER BY size DESC LIMIT 1",
                (partition, at_most),
            ).fetchone()
        return None if row is None else (row[0], row[1])
