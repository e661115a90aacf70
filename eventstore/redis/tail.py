"""Feeding every partition's mirror from a Redis store: blocking XREAD for wake-ups, a poll for
the rest (the PostgreSQL tail's LISTEN and poll, eventstore/pg/tail.py).

The XREAD names each partition's stream after the mirror's last seq, so it returns at once
while a mirror is behind and otherwise waits (bounded, so stop() is seen) for the next append;
whatever it returns, the partition is then synced by `sync_mirror` (eventstore/shared/
mirror_sync.py), which reads in seq order and in pages, fills seqs a redaction moved out of the
stream from the `erased` hash, checks contiguity, and hands the lines to `Mirror.extend`, which
checks the chain and skips what the leader's sink put there already. The poll covers anything
else (a reconnect, a lost reply).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import LedgerError
from ..mirror import Mirror
from ..shared import StoreError, one_line
from ..shared.mirror_sync import pause_before_retry, sync_partitions
from ..shared.mirror_sync import sync_mirror as shared_sync
from . import keys, require_redis
from .reader import RedisReader
from .schema import connect

if TYPE_CHECKING:
    from . import Client

STOP_CHECK = 0.25  # seconds: the longest a blocking read lasts before looking at stop()


def sync_mirror(client: Client, partition: int, mirror: Mirror) -> int:
    """Extend `mirror` with the partition's committed records beyond its size, then install the
    newest checkpoint it covers. Returns the mirror's size."""
    return shared_sync(RedisReader(client), partition, mirror)


class StoreTail:
    """Feeds every partition's mirror from the store: XREAD BLOCK plus a poll."""

    def __init__(self, url: str, mirrors: dict[int, Mirror], *, poll_interval: float = 0.5) -> None:
        self.url = url
        self.mirrors = mirrors
        self.poll_interval = poll_interval
        self.failed: dict[int, LedgerError] = {}  # partitions whose lines the mirror refused
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._sync_client: Client | None = None
        self._sync_lock = threading.Lock()

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
            if self._sync_client is not None:
                self._sync_client.close()
            self._sync_client = None

    def _run(self) -> None:
        redis = require_redis()
        backoff = self.poll_interval
        while not self._stopping.is_set():
            client = None
            try:
                client = connect(self.url, timeout=STOP_CHECK + 5)
                self._feed(client)
            except (redis.RedisError, StoreError, OSError) as exc:
                if self._stopping.is_set():
                    break
                backoff = pause_before_retry(self._stopping, backoff, one_line(exc))
            except Exception:  # a bug must not end the tail: every mirror would go stale
                backoff = pause_before_retry(self._stopping, backoff, None)
            finally:
                if client is not None:
                    client.close()

    def _feed(self, client: Client) -> None:
        self._sync_all(client)  # whatever was committed while no one read
        next_poll = time.monotonic() + self.poll_interval
        while not self._stopping.is_set():
            wait = min(STOP_CHECK, max(0.0, next_poll - time.monotonic()))
            after = {
                keys.log(p): keys.entry_id(m.size - 1) if m.size else "0-0"
                for p, m in self.mirrors.items()
                if p not in self.failed
            }
            woken: set[int] = set()
            if after and wait > 0:
                found = client.xread(after, count=1, block=max(1, int(wait * 1000)))
                woken = {int(name.decode().split("{p")[1].split("}")[0]) for name, _ in found}
            if time.monotonic() >= next_poll:
                self._sync_all(client)  # the poll
                next_poll = time.monotonic() + self.poll_interval
            else:
                for partition in sorted(woken):
                    self._sync_one(client, partition)

    def _sync_all(self, client: Client) -> None:
        self._sync(client, sorted(self.mirrors))

    def _sync_one(self, client: Client, partition: int) -> None:
        self._sync(client, (partition,))

    def _sync(self, client: Client, partitions: Iterable[int]) -> None:
        """Sync `partitions`; one the store and the mirror disagree on stops (`failed`)."""
        sync_partitions(
            lambda partition, mirror: sync_mirror(client, partition, mirror),
            partitions,
            self.mirrors,
            self.failed,
        )

    def sync(self, partition: int) -> int:
        """Copy every record committed now into the partition's mirror (blocking); its size."""
        redis = require_redis()
        with self._sync_lock:
            for attempt in (1, 2):
                if self._sync_client is None:
                    self._sync_client = connect(self.url)
                try:
                    return sync_mirror(self._sync_client, partition, self.mirrors[partition])
                except (redis.ConnectionError, redis.TimeoutError):
                    self._sync_client.close()
                    self._sync_client = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")
