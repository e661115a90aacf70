"""A partition's lease: who may write it, until when, and the epoch that fences everyone else.

Leadership lives in the head row (lm_head): `take` succeeds only once the previous lease expired
by the database's clock, and bumps the epoch, which every append names; an old leader's
statements then match no row. The lease also has a local side: `deadline` is on this process's
monotonic clock, taken at the START of the statement that granted or renewed the lease, minus a
safety margin, so the leader stops sending writes before the database could hand the partition
to someone else, whatever the statement's latency was. Advisory locks are not used: they vanish
on a database restart and fence nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import InvalidInput
from . import statements

if TYPE_CHECKING:
    from . import Connection


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

    def valid(self) -> bool:
        return time.monotonic() < self.deadline

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def extend_from(self, started_monotonic: float) -> None:
        """The database renewed the lease in a statement sent at `started_monotonic`."""
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
    expired: bool  # by the database's clock


def take(conn: Connection, partition: int, owner: str, seconds: float) -> Lease | None:
    """Take partition's lease if it expired (or was released); None while someone holds it."""
    _check_seconds(seconds)
    started = time.monotonic()
    row = conn.execute(
        statements.TAKE, {"partition": partition, "owner": owner, "seconds": seconds}
    ).fetchone()
    if row is None:
        return None
    return Lease(partition, row[0], owner, seconds, started + seconds - safety_margin(seconds))


def renew(conn: Connection, lease: Lease) -> bool:
    """Extend the lease (the heartbeat). False: it was lost, and `lease` is marked so."""
    started = time.monotonic()
    row = conn.execute(statements.RENEW, _fence(lease)).fetchone()
    if row is None:
        lease.lose()
        return False
    lease.extend_from(started)
    return True


def release(conn: Connection, lease: Lease) -> None:
    """Give the partition up now (on a clean stop), so another replica need not wait it out."""
    lease.lose()
    conn.execute(statements.RELEASE, _fence(lease))


def heads(conn: Connection) -> list[Head]:
    """Every partition's head. A lease never taken has lease_until `-infinity`, which psycopg
    cannot load as a datetime: it is read as None (and counts as expired)."""
    rows = conn.execute(
        "SELECT partition, last_seq, epoch, owner, "
        "CASE WHEN isfinite(lease_until) THEN lease_until END, lease_until < now() "
        "FROM lm_head ORDER BY partition"
    ).fetchall()
    return [Head(*row) for row in rows]


def _fence(lease: Lease) -> dict:
    return {
        "partition": lease.partition,
        "epoch": lease.epoch,
        "owner": lease.owner,
        "seconds": lease.seconds,
    }


def _check_seconds(seconds: float) -> None:
    if not isinstance(seconds, int | float) or not 0 < seconds <= 3600:
        raise InvalidInput(f"a lease lasts between 0 and 3600 seconds, not {seconds!r}")
