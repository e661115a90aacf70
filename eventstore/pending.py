"""Pending: records that have their seqs and wait to be durable, for threads and event loops.

The writer thread settles a Pending once; any number of threads block in `wait()` and any
number of coroutines, on any event loops, await `wait_async()`. Each coroutine gets a future of
its own loop, which the writer thread resolves through that loop's `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from .record import Record

Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Future]


class Pending:
    """Records that have their seqs but may not be durable yet. `wait()` until they are."""

    __slots__ = ("records", "_done", "_settled", "_error", "_mutex", "_waiters")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._done = threading.Lock()
        self._done.acquire()  # released by the writer thread once the records are durable
        self._settled = False
        self._error: BaseException | None = None
        self._mutex = threading.Lock()
        self._waiters: list[Waiter] | None = None

    def wait(self, timeout: float = -1) -> list[Record]:
        """Block until the records are durable; raise if they never will be."""
        if not self._done.acquire(timeout=timeout):
            raise TimeoutError("the records are not durable yet")
        self._done.release()  # leave it open for other waiters
        if self._error is not None:
            raise self._error
        return self.records

    async def wait_async(self) -> list[Record]:
        """Await until the records are durable; raise if they never will be."""
        future = None
        with self._mutex:
            # `_settled`, not `_done.locked()`: a thread inside wait() holds `_done` for a moment
            # after the settling, and a future registered then would never be resolved.
            if not self._settled:
                loop = asyncio.get_running_loop()
                future = loop.create_future()
                if self._waiters is None:
                    self._waiters = []
                self._waiters.append((loop, future))
        if future is not None:
            await future
        if self._error is not None:
            raise self._error
        return self.records

    def complete(self, error: BaseException | None) -> list[Waiter] | None:
        """Settle: called once, by the writer. Returns the async waiters for `wake_waiters`."""
        with self._mutex:
            self._error = error
            self._settled = True
            self._done.release()
            waiters, self._waiters = self._waiters, None
        return waiters


def wake_waiters(waiters: Iterable[Waiter]) -> None:
    """Resolve the futures of settled Pendings, one `call_soon_threadsafe` per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for loop, future in waiters:
        by_loop.setdefault(loop, []).append(future)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
            loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future]) -> None:
    for future in futures:
        if not future.done():  # a cancelled waiter
            future.set_result(None)  # wait_async raises the Pending's error itself
