"""Client-side deadlines for store calls: a stalled connection ends at a deadline, not never.

`statement_timeout` is enforced by the server, so it cannot end a wait for bytes that never
arrive: a connection whose peer stays alive but silent (a frozen proxy or NAT, a half-dead
link whose kernel still acknowledges) leaves psycopg waiting on its socket for as long as the
stall lasts, and keepalives do not help, because they are acknowledged. psycopg 3's blocking
`execute` takes no timeout, and `cancel_safe` sends its cancel request over a new connection
that the same stall swallows. So the deadline is kept here, on this side:

- `within(conn, deadline)` arms a process-wide watchdog (one thread, a heap of deadlines) for the
  calls made inside the block. When the deadline passes first, the watchdog shuts the
  connection's socket down (`shutdown(2)` on a duplicate of its descriptor, under the lock that
  the block's end takes too, so it never touches a descriptor the block has given back). libpq
  then sees the connection end, psycopg raises, and the block raises `StoreStalled`: the caller
  drops the connection and makes a new one, as after any lost connection. The descriptor itself
  is closed only by the caller (`conn.close()`), never by the watchdog.
- `schema.connect_within(url, seconds)` makes a new connection under the same rule: a stall
  would hold its handshake up to `connect_timeout` (whole seconds, at least 2), so it is made on
  a helper thread that is given up on at the deadline (the helper closes whatever it gets late).

Nothing here decides what a stall means for the log: the sink treats `StoreStalled` as a lost
connection (read the head, or answer Unknown at the lease's end), which fencing makes safe.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import StoreError, require_psycopg

if TYPE_CHECKING:
    from . import Connection


class StoreStalled(StoreError):
    """The store did not answer before a client-side deadline; the connection was cut."""


@dataclass(eq=False)
class _Armed:
    deadline: float
    fd: int
    done: bool = False
    cut: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Watchdog:
    """One thread that cuts the connections whose armed deadline passed."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Armed]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.cuts = 0  # connections cut so far

    def arm(self, conn: Connection, deadline: float) -> _Armed:
        armed = _Armed(deadline, conn.fileno())
        with self._cond:
            # Calls that ended leave their entries; those at the top go now, so the heap holds
            # about the calls in flight rather than every call of the last lease.
            while self._heap and self._heap[0][2].done:
                heapq.heappop(self._heap)
            heapq.heappush(self._heap, (deadline, next(self._order), armed))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ledgermem-store-deadlines", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is armed:
                self._cond.notify()
        return armed

    def disarm(self, armed: _Armed) -> None:
        with armed.lock:
            armed.done = True  # the heap entry is dropped when its time comes

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                deadline, _, armed = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0 and not armed.done:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            self._cut(armed)

    def _cut(self, armed: _Armed) -> None:
        with armed.lock:
            if armed.done:
                return
            armed.cut = True
            self.cuts += 1
            # A duplicate of the descriptor: shutdown acts on the socket both share, which wakes
            # libpq's wait with an end of stream; closing the duplicate leaves the original open.
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(armed.fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)


WATCHDOG = Watchdog()


@contextlib.contextmanager
def within(conn: Connection, deadline: float, what: str) -> Iterator[None]:
    """Run the block's calls on `conn` until `deadline` (time.monotonic()) at the latest; past
    it the connection is cut and the block raises `StoreStalled` naming `what`. After a cut the
    connection is unusable: the caller closes it and connects again."""
    psycopg = require_psycopg()
    armed = WATCHDOG.arm(conn, deadline)
    try:
        yield
    except psycopg.Error as exc:
        WATCHDOG.disarm(armed)
        if armed.cut:
            raise StoreStalled(stalled(what)) from exc
        raise
    finally:
        WATCHDOG.disarm(armed)
    if armed.cut:  # cut just after the last call returned: its answer stands, the socket is gone
        with contextlib.suppress(Exception):
            conn.close()


def stalled(what: str) -> str:
    return f"the store did not answer {what} before its deadline: the connection was cut"
