"""The `append_async` calls an event loop makes in one turn, submitted to the writer together.

Concurrent tasks that append run one after another within a turn of their loop. Each call
queues its checked entries in the loop's `LoopBatch` and awaits a future of its own; the first
call of a turn schedules the batch's submission with `call_soon`, which runs after every task
already scheduled in the turn. The submission takes the writer's lock once, assigns the calls'
records in the order the calls were made, queues them as one run of operations and registers
the futures on the writer's settlement: one lock, one queue hand-off and, once durable, one
`call_soon_threadsafe` wake-up per batch, instead of one of each per call.

Each call keeps its own outcome: a stale `expected_size` (compared, as `submit` does, with the
log's size including everything assigned before it, the earlier calls of the same batch
included) fails that call alone with StalePosition and queues nothing of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .entry import Entry
from .pending import Pending

# One call: its entries, its expected_size, what it will read its records from, its future.
Call = tuple[list[Entry], int | None, Pending, asyncio.Future]


class LoopBatch:
    """The calls one loop made since its batch was last submitted."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[Call] = []


class LoopBatches:
    """Each running loop's open batch; `submit(calls)` is the writer's, under its lock."""

    __slots__ = ("_open", "_submit")

    def __init__(self, submit: Callable[[list[Call]], None]) -> None:
        # Only a loop's own thread touches its entry; each dict operation is atomic.
        self._open: dict[asyncio.AbstractEventLoop, LoopBatch] = {}
        self._submit = submit

    async def append(self, entries: list[Entry], expected_size: int | None) -> Pending:
        """Queue the entries in this turn's batch; return their Pending once it is settled
        (the caller reads the records, or the error, from it)."""
        loop = asyncio.get_running_loop()
        batch = self._open.get(loop)
        if batch is None:
            batch = self._open[loop] = LoopBatch()
            loop.call_soon(self._flush, loop)
        future = loop.create_future()
        pending = Pending()
        batch.calls.append((entries, expected_size, pending, future))
        await future
        return pending

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        calls = self._open.pop(loop).calls
        try:
            self._submit(calls)
        except BaseException as exc:  # never leave a caller waiting
            for _, _, _, future in calls:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
