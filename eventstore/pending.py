"""Pending: records that have their seqs and wait to be durable, for threads and event loops.

The writer settles its appends in batches: every submit between two drains of its queue joins
one `Settlement`, which the writer thread settles once, after the batch is durable (or failed).
A `Pending` is one caller's records plus the settlement it waits on, so a submit costs no lock of
its own. Any number of threads block in `wait()`, passing the settlement's one lock on from one
to the next; any number of coroutines, on any event loops, await `wait_async()`: each gets a
future of its own loop, and the writer resolves all the futures of one loop with one
`call_soon_threadsafe` per batch (`wake_waiters`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from .record import Record

Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Future]


class Settlement:
    """The outcome of one batch of appends: durable, or the error that stopped the writer."""

    __slots__ = ("settled", "error", "_done", "_mutex", "_waiters")

    def __init__(self) -> None:
        self.settled = False
        self.error: BaseException | None = None
        self._done = threading.Lock()
        self._done.acquire()  # released by the writer thread once the batch is settled
        self._mutex = threading.Lock()
        self._waiters: list[Waiter] = []

    def wait(self, timeout: float = -1) -> bool:
        """Block until settled; False on timeout."""
        if self.settled:
            return True
        if not self._done.acquire(timeout=timeout):
            return False
        self._done.release()  # pass it on: every thread waiting on this batch goes through it
        return True

    def add_waiter(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> bool:
        """Have the writer resolve `future` on `loop` once settled; False if it is already."""
        with self._mutex:
            # `settled`, not `_done.locked()`: a thread inside wait() holds `_done` for a moment
            # after the settling, and a future registered then would never be resolved.
            if self.settled:
                return False
            self._waiters.append((loop, future))
            return True

    def settle(self, error: BaseException | None) -> list[Waiter]:
        """Called once, by the writer. Returns the async waiters for `wake_waiters`."""
        with self._mutex:
            self.error = error
            self.settled = True
            waiters, self._waiters = self._waiters, []
        self._done.release()
        return waiters


class Pending:
    """Records that have their seqs but may not be durable yet. `wait()` until they are."""

    __slots__ = ("records", "settlement")

    def __init__(self, records: list[Record], settlement: Settlement) -> None:
        self.records = records
        self.settlement = settlement

    def wait(self, timeout: float = -1) -> list[Record]:
        """Block until the records are durable; raise if they never will be."""
        settlement = self.settlement
        if not settlement.settled and not settlement.wait(timeout):
            raise TimeoutError("the records are not durable yet")
        return self.result()

    async def wait_async(self) -> list[Record]:
        """Await until the records are durable; raise if they never will be."""
        settlement = self.settlement
        if not settlement.settled:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            if settlement.add_waiter(loop, future):
                await future
        return self.result()

    def result(self) -> list[Record]:
        """The records of a settled Pending, or the error that keeps them from being durable."""
        error = self.settlement.error
        if error is not None:
            raise error
        return self.records


def settled(error: BaseException | None = None) -> Settlement:
    """A settlement that is settled already: for what has nothing to wait for."""
    settlement = Settlement()
    settlement.settle(error)
    return settlement


def wake_waiters(waiters: Iterable[Waiter]) -> None:
    """Resolve the futures of a settled batch, one `call_soon_threadsafe` per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for loop, future in waiters:
        futures = by_loop.get(loop)
        if futures is None:
            by_loop[loop] = [future]
        else:
            futures.append(future)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
            loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future]) -> None:
    for future in futures:
        if not future.done():  # a cancelled waiter
            future.set_result(None)  # the waiter reads the settlement's outcome itself
