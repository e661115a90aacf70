"""Feeding every partition's mirror from the table: LISTEN for wake-ups, a poll for the rest.

A NOTIFY is only a hint that rows were committed ("partition:first:last", never the lines): it
can be lost (the listening backend dies, the notification queue fills up, a pooler drops it,
NOTIFY is off), so nothing depends on it. On a wake-up, on every poll interval and after every
reconnect the tail reads each partition's rows after the mirror's size, in seq order and in
pages, and hands them to `Mirror.extend`, which skips what it already holds (the leader's sink
feeds its own mirror too) and refuses a gap or a fork. The rows of one page must be contiguous
from the mirror's size; a page that is not raises, because committed rows never have holes:
someone deleted rows.

Redactions need no re-reading of old rows: the mirror rewrites the targets itself when the
redaction record reaches it. The newest checkpoint that the mirror's records cover is copied
into it after each sync, so a mirror directory always verifies on its own.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import LedgerError
from ..mirror import Mirror
from ..shared.mirror_sync import pause_before_retry, sync_partitions
from ..shared.mirror_sync import sync_mirror as shared_sync
from . import StoreError, require_psycopg
from .deadline import within
from .reader import PgReader
from .schema import NOTIFY_CHANNEL, connect_within, one_line

if TYPE_CHECKING:
    from . import Connection

STOP_CHECK = 0.25  # seconds: the longest a wait for a wake-up lasts before looking at stop()
# The longest one query of the tail (a page, a checkpoint, LISTEN) or a new connection may wait
# on the store before the connection is cut and made anew (deadline.py): a connection that went
# silent (TCP alive, no bytes) would otherwise stop feeding the mirrors for as long as it lasts.
QUERY_SECONDS = 30.0


class StoreTail:
    """Feeds every partition's mirror from the table: LISTEN lm_records plus a poll."""

    def __init__(
        self,
        url: str,
        mirrors: dict[int, Mirror],
        *,
        poll_interval: float = 0.5,
        listen: bool = True,
    ) -> None:
        self.url = url
        self.mirrors = mirrors
        self.poll_interval = poll_interval
        self.listen = listen
        self.failed: dict[int, LedgerError] = {}  # partitions whose rows the mirror refused
        self.backend_pid: int | None = None  # the feeding connection's backend (for operators)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._sync_conn: Connection | None = None
        self._sync_lock = threading.Lock()
        self._feed_conn: Connection | None = None
        self._fed = False  # the current connection has synced once

    # ---- the thread --------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="ledgermem-store-tail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._sync_lock:
            _close(self._sync_conn)
            self._sync_conn = None

    def _run(self) -> None:
        psycopg = require_psycopg()
        backoff = self.poll_interval
        while not self._stopping.is_set():
            try:
                self._feed()
            except (psycopg.Error, StoreError, OSError) as exc:
                if self._stopping.is_set():
                    break
                if self._fed:  # it worked until now (a killed backend): retry soon
                    self._fed, backoff = False, self.poll_interval
                backoff = pause_before_retry(self._stopping, backoff, one_line(exc))
                continue
            except Exception:  # a bug must not end the tail: every mirror would go stale
                backoff = pause_before_retry(self._stopping, backoff, None)
                continue
            finally:
                _close(self._feed_conn)
                self._feed_conn = None

    def _feed(self) -> None:
        conn = self._feed_conn = connect_within(self.url, QUERY_SECONDS)
        self.backend_pid = conn.info.backend_pid
        if self.listen:
            with within(conn, time.monotonic() + QUERY_SECONDS, "LISTEN"):
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        # Whatever was committed while no one listened: the wake-ups for it are gone.
        self._sync_all(conn)
        self._fed = True
        next_poll = time.monotonic() + self.poll_interval
        while not self._stopping.is_set():
            # Bounded, so that stop() is seen soon even with a long poll interval.
            wait = min(STOP_CHECK, max(0.0, next_poll - time.monotonic()))
            woken: dict[int, int] = {}  # partition -> the last seq a wake-up named
            if self.listen:
                for notify in conn.notifies(timeout=wait, stop_after=1):
                    _note(woken, notify.payload)
                # Several commits may have notified at once: take every wake-up queued so far.
                for notify in conn.notifies(timeout=0):
                    _note(woken, notify.payload)
            else:
                self._stopping.wait(wait)
            if time.monotonic() >= next_poll:
                self._sync_all(conn)  # the poll: wake-ups can be lost
                next_poll = time.monotonic() + self.poll_interval
            else:
                for partition, last in sorted(woken.items()):
                    mirror = self.mirrors.get(partition)
                    # The leader's own commits are in its mirror already (its sink put them
                    # there): no query for a wake-up about rows the mirror holds.
                    if mirror is not None and mirror.size <= last:
                        self._sync_one(conn, partition)

    def _sync_all(self, conn: Connection) -> None:
        self._sync(conn, sorted(self.mirrors))

    def _sync_one(self, conn: Connection, partition: int) -> None:
        self._sync(conn, (partition,))

    def _sync(self, conn: Connection, partitions: Iterable[int]) -> None:
        """Sync `partitions`; one the table and the mirror disagree on stops (`failed`)."""
        sync_partitions(
            lambda partition, mirror: sync_mirror(conn, partition, mirror),
            partitions,
            self.mirrors,
            self.failed,
        )

    # ---- on demand ---------------------------------------------------------------------------

    def sync(self, partition: int) -> int:
        """Copy every row committed now into the partition's mirror (blocking); its size."""
        psycopg = require_psycopg()
        with self._sync_lock:
            for attempt in (1, 2):
                try:
                    if self._sync_conn is None:
                        self._sync_conn = connect_within(self.url, QUERY_SECONDS)
                    return sync_mirror(self._sync_conn, partition, self.mirrors[partition])
                except (psycopg.OperationalError, StoreError):
                    _close(self._sync_conn)
                    self._sync_conn = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")


def sync_mirror(conn: Connection, partition: int, mirror: Mirror) -> int:
    """Extend `mirror` with the partition's committed rows beyond its size, then install the
    newest checkpoint it covers (eventstore/shared/mirror_sync.py), each query cut after
    QUERY_SECONDS without an answer (deadline.py). Returns the mirror's size."""
    return shared_sync(PgReader(conn, QUERY_SECONDS), partition, mirror)


def _note(woken: dict[int, int], payload: str) -> None:
    """Record a wake-up "partition:first:last"; anything else is not ours (the poll covers
    whatever it was about)."""
    try:
        partition, _, last = (int(part) for part in payload.split(":"))
    except ValueError:
        return
    woken[partition] = max(last, woken.get(partition, -1))


def _close(conn: Connection | None) -> None:
    if conn is not None:
        # Closing a broken connection: nothing is left to do when it fails.
        with contextlib.suppress(Exception):
            conn.close()
