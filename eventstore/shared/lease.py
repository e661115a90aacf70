"""A partition's lease as a replica holds it, whatever the store keeps it in.

The store's side (an lm_head row in PostgreSQL, a head hash in Redis) grants a lease only once
the previous one expired by the store's clock, and bumps the epoch, which every write names; an
old leader's writes then match nothing. The local side is `deadline`: on this process's
monotonic clock, taken at the START of the call that granted or renewed the lease, minus a
safety margin, so the leader stops sending writes before the store could hand the partition to
someone else, whatever the call's latency was.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import InvalidInput


def safety_margin(seconds: float) -> float:
    """How long before the lease's end the leader stops writing (clock drift, scheduling)."""
    return min(0.5, seconds / 4)


@dataclass
class Lease:
    partition: int
    epoch: int
    owner: str  # the replica id
    seconds: float  # lease length
    deadline: float  # time.monotonic() after which this replica must not write
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _lost: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def granted(
        cls, partition: int, epoch: int, owner: str, seconds: float, started: float
    ) -> Lease:
        """A lease the store granted in a call sent at monotonic time `started`."""
        return cls(partition, epoch, owner, seconds, started + seconds - safety_margin(seconds))

    def valid(self) -> bool:
        return time.monotonic() < self.deadline

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def extend_from(self, started_monotonic: float) -> None:
        """The store renewed the lease in a call sent at `started_monotonic`."""
        deadline = started_monotonic + self.seconds - safety_margin(self.seconds)
        with self._lock:
            if deadline > self.deadline and not self._lost:
                self.deadline = deadline

    def lose(self) -> None:
        """The lease is gone (fenced or released): no more writes from here, even if a renewal
        sent before answers after (the epoch would fence its writes anyway)."""
        with self._lock:
            self._lost = True
            self.deadline = float("-inf")


@dataclass(frozen=True)
class Head:
    partition: int
    last_seq: int
    epoch: int
    owner: str | None
    lease_until: datetime | None  # None: never taken
    expired: bool  # by the store's clock


@dataclass(frozen=True)
class Replica:
    """A service replica's heartbeat in the store: live while fresher than one lease."""

    id: str
    url: str
    live: bool


def check_seconds(seconds: float) -> None:
    if not isinstance(seconds, int | float) or not 0 < seconds <= 3600:
        raise InvalidInput(f"a lease lasts between 0 and 3600 seconds, not {seconds!r}")


def take_with(
    partition: int, owner: str, seconds: float, ask: Callable[[], int | None]
) -> Lease | None:
    """Take `partition`'s lease through `ask()`, the engine's one round trip that grants it and
    answers the new epoch (None: someone holds it). The lease's deadline counts from before the
    round trip (module doc)."""
    check_seconds(seconds)
    started = time.monotonic()
    epoch = ask()
    if epoch is None:
        return None
    return Lease.granted(partition, epoch, owner, seconds, started)


def renew_with(lease: Lease, ask: Callable[[], bool]) -> bool:
    """Extend `lease` through `ask()`, the engine's fenced renewal (False: the store no longer
    grants it). False: it was lost, and `lease` is marked so. The new deadline counts from
    before the round trip."""
    started = time.monotonic()
    if not ask():
        lease.lose()
        return False
    lease.extend_from(started)
    return True
