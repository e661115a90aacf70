"""`PgReader`: the shared store's reads (eventstore/shared/reader.py) as SELECTs over lm_*.

With `seconds`, each read is cut on this side when the store gives no answer that long
(deadline.py: StoreStalled): the tail's pages and checkpoints. Without, the caller bounds the
reads itself (a takeover's recovery runs under one deadline: leadership.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .deadline import within
from .schema import one_row

if TYPE_CHECKING:
    from . import Connection


class PgReader:
    def __init__(self, conn: Connection, seconds: float | None = None) -> None:
        self.conn, self.seconds = conn, seconds

    @contextlib.contextmanager
    def _bounded(self, what: str) -> Iterator[None]:
        if self.seconds is None:
            yield
        else:
            with within(self.conn, time.monotonic() + self.seconds, what):
                yield

    def head(self, partition: int) -> tuple[int, bytes]:
        with self._bounded(f"partition {partition}'s head"):
            last_seq, last_h = one_row(
                self.conn.execute(
                    "SELECT last_seq, last_h FROM lm_head WHERE partition = %s", (partition,)
                )
            )
        return last_seq, bytes(last_h)

    def rows(self, partition: int, start: int, limit: int) -> list[tuple[int, bytes]]:
        with self._bounded(f"partition {partition}'s rows"):
            rows = self.conn.execute(
                "SELECT seq, line FROM lm_record WHERE partition = %s AND seq >= %s "
                "ORDER BY seq LIMIT %s",
                (partition, start, limit),
            ).fetchall()
        return [(seq, bytes(line)) for seq, line in rows]

    def lines_at(self, partition: int, seqs: list[int]) -> dict[int, bytes]:
        if not seqs:
            return {}
        with self._bounded(f"partition {partition}'s lines"):
            rows = self.conn.execute(
                "SELECT seq, line FROM lm_record WHERE partition = %s AND seq = ANY(%s)",
                (partition, seqs),
            ).fetchall()
        return {seq: bytes(line) for seq, line in rows}

    def segment_roots(self, partition: int, below: int) -> list[tuple[int, bytes]]:
        with self._bounded(f"partition {partition}'s segment roots"):
            rows = self.conn.execute(
                "SELECT segment, root FROM lm_segment_root WHERE partition = %s AND segment < %s "
                "ORDER BY segment",
                (partition, below),
            ).fetchall()
        return [(n, bytes(root)) for n, root in rows]

    def checkpoint(self, partition: int, at_most: int | None = None) -> tuple[int, str] | None:
        with self._bounded(f"partition {partition}'s checkpoint"):
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
