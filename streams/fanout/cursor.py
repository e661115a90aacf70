"""The position of one subscriber: serve from the log or from live, what comes next, when to fall
back (docs/fanout.md). A pure state machine: no asyncio, no I/O, no SSE or WebSocket.

Events go in:
- `offer(items)`: records the hub has just published, in seq order, every one of them;
- `log_read(after, items, reached)`: the answer to a `ReadLog` this cursor asked for.

Actions come out of `next_action(head)`, where `head` is the seq of the last published record:
- `ReadLog(after, until, limit, max_bytes)`: read matching records with after < seq < until from
  the log, stopping early at `limit` records or `max_bytes` bytes;
- `Send(items, source)`: deliver these records (source "log" or "live");
- `CaughtUp(seq)`: everything up to `seq` is delivered; what follows comes live;
- `WAIT`: nothing to do until the next offer;
- `DONE`: the subscription has reached its end (`stop_after`).

Items are anything with `seq`, `line` (the record's bytes) and the four filter fields.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from eventstore.filters import MATCH_ALL, RecordFilter


class ReadLog(NamedTuple):
    after: int
    until: int
    limit: int  # at most this many matching records
    max_bytes: int  # stop once their lines hold this many bytes (at least one record)


class Send(NamedTuple):
    items: list
    source: str  # "log" or "live"


class CaughtUp(NamedTuple):
    seq: int


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


WAIT = _Marker("WAIT")
DONE = _Marker("DONE")


class Cursor:
    """One subscriber's cursor.

    `position` is the highest seq examined: every record up to it has been delivered or did not
    match. While `live_from` is set, the buffer holds every matching record the hub offered with
    seq >= live_from (and > position): records below `live_from` come from the log, records from
    it on come from the buffer, so the handover has neither a gap nor an overlap. When the buffer
    would exceed its bound it is dropped and `live_from` cleared: the subscriber reads the log
    from its position, re-arming `live_from` at the head of the moment it decides to read.
    """

    __slots__ = (
        "filter",
        "position",
        "live_from",
        "stop_after",
        "max_records",
        "max_bytes",
        "batch",
        "overflows",
        "_buffer",
        "_buffered_bytes",
        "_offered",
        "_outbox",
        "_outbox_bytes",
        "_announce",
    )

    def __init__(
        self,
        after: int,
        head: int,
        where: RecordFilter = MATCH_ALL,
        *,
        max_records: int = 1024,
        max_bytes: int = 1 << 20,
        batch: int | None = None,
        stop_after: int | None = None,
    ) -> None:
        """A cursor at `after`, registered with the hub when the last published seq was `head`.

        `max_records`/`max_bytes` bound the live buffer and each log read; `batch` bounds what
        one `Send` holds; `stop_after` ends the subscription once the position reaches it.
        """
        if after < -1:
            raise ValueError(f"cursor {after} is below -1")
        if max_records < 1 or max_bytes < 1:
            raise ValueError("a subscriber buffer holds at least one record")
        self.filter = where
        self.position = after
        self.stop_after = stop_after
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.batch = max_records if batch is None else max(1, batch)
        self.overflows = 0
        self.live_from: int | None = None
        self._buffer: deque = deque()
        self._buffered_bytes = 0
        self._outbox: list = []
        self._outbox_bytes = 0
        self._arm(head)

    # ---- state -------------------------------------------------------------------------------

    @property
    def live(self) -> bool:
        """Served from the live buffer: nothing between the position and the buffer is missing."""
        return self.live_from is not None and self.position + 1 >= self.live_from

    @property
    def buffered(self) -> int:
        """Records held for this subscriber: the live buffer plus a log read not yet sent."""
        return len(self._buffer) + len(self._outbox)

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes + self._outbox_bytes

    def _arm(self, head: int) -> int:
        live_from = self.live_from = head + 1
        self._offered = head  # the last seq offered since live_from was set
        self._announce = True
        return live_from

    def _drop_live(self) -> None:
        self.live_from = None
        self._buffer.clear()
        self._buffered_bytes = 0
        self.overflows += 1

    # ---- events ------------------------------------------------------------------------------

    def offer(self, items: Sequence) -> bool:
        """Take published records (the hub's next ones, in seq order). True when there is new
        work: a record kept, an overflow, or the end reached."""
        if self.live_from is None:
            return False  # already falling back: the log will give these records
        where, buffer, position, stop = self.filter, self._buffer, self.position, self.stop_after
        woken = False
        for item in items:
            seq = item.seq
            if stop is not None and seq > stop:
                self._offered = max(self._offered, stop)  # offers are contiguous: all <= stop seen
                return True
            self._offered = seq
            if seq <= position or (where is not MATCH_ALL and not where.matches(item)):
                continue
            size = len(item.line)
            if buffer and (
                len(buffer) >= self.max_records or self._buffered_bytes + size > self.max_bytes
            ):
                self._drop_live()
                return True
            buffer.append(item)
            self._buffered_bytes += size
            woken = True
        return woken

    def overflow(self) -> None:
        """Force a fall-back to the log (the hub saw a gap in what it was given)."""
        if self.live_from is not None:
            self._drop_live()

    def log_read(self, after: int, items: Iterable, reached: int) -> None:
        """The matching records with after < seq <= reached, read from the log, in seq order.

        An answer to a read that no longer starts at the position is stale and ignored.
        """
        if after != self.position or reached <= after:
            return
        items = list(items)
        self._outbox.extend(items)
        self._outbox_bytes += sum(len(item.line) for item in items)
        self.position = reached

    # ---- actions -----------------------------------------------------------------------------

    def next_action(self, head: int) -> ReadLog | Send | CaughtUp | _Marker:
        if self._outbox:
            items, self._outbox, self._outbox_bytes = self._outbox, [], 0
            return Send(items, "log")
        stop = self.stop_after
        if stop is not None and self.position >= stop:
            return DONE
        live_from = self.live_from
        if live_from is None:
            # Offers from here on are seq > head: buffer them while reading.
            live_from = self._arm(head)
        if self.position + 1 < live_from:
            until = live_from if stop is None else min(live_from, stop + 1)
            return ReadLog(self.position, until, min(self.max_records, self.batch), self.max_bytes)
        if self._announce:
            self._announce = False
            return CaughtUp(live_from - 1)
        buffer = self._buffer
        if buffer:
            if len(buffer) <= self.batch:  # the usual case: everything buffered goes
                return self._take_buffer()
            items = [buffer.popleft() for _ in range(self.batch)]
            self._buffered_bytes -= sum(len(item.line) for item in items)
            self.position = items[-1].seq
            return Send(items, "live")
        self.position = max(self.position, self._offered)
        if stop is not None and self.position >= stop:
            return DONE
        return WAIT

    def take_live(self) -> Send | None:
        """The live `Send` that `next_action` would answer now, when that is all there is to do
        (no log read, caught-up notice or end pending, the whole buffer fits one batch); else
        None, and nothing changes. It lets the hub deliver at publish time to a subscriber that
        sits waiting, with the same effect as waking it to ask `next_action`."""
        if (
            self._outbox
            or self._announce
            or self.stop_after is not None
            or self.live_from is None
            or self.position + 1 < self.live_from
            or not self._buffer
            or len(self._buffer) > self.batch
        ):
            return None
        return self._take_buffer()

    def _take_buffer(self) -> Send:
        items = list(self._buffer)
        self._buffer.clear()
        self._buffered_bytes = 0
        self.position = max(items[-1].seq, self._offered)
        return Send(items, "live")
