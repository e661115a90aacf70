"""`LeaseKeeper`: the heartbeat that keeps a partition's lease while its writer is idle
(appends renew it too), on any engine."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import one_line
from .engine import StoreSession
from .lease import Lease

log = logging.getLogger("ledgermem.store.lease")


class LeaseKeeper:
    """Renews a lease every `seconds / 3` on a thread of its own, until stopped or lost."""

    def __init__(
        self,
        session: Callable[[], StoreSession],
        lease: Lease,
        on_lost: Callable[[Lease], None] | None = None,
    ) -> None:
        self.new_session, self.lease, self.on_lost = session, lease, on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"ledgermem-lease-p{lease.partition}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        session: StoreSession | None = None
        interval = self.lease.seconds / 3
        while not self._stop.wait(interval):
            try:
                if session is None:
                    session = self.new_session()
                if not session.renew(self.lease):
                    break
            except Exception as exc:  # the next round retries; the deadline protects writes
                log.warning(
                    "partition %d: renewing the lease failed: %s",
                    self.lease.partition,
                    one_line(exc),
                )
                if session is not None:
                    session.close()
                session = None
        if session is not None:
            session.close()
        if not self.lease.valid() and self.on_lost is not None and not self._stop.is_set():
            self.on_lost(self.lease)
