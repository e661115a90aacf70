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

from typing import TYPE_CHECKING

from ..shared.lease import Head, Lease, renew_with, safety_margin, take_with
from . import statements

if TYPE_CHECKING:
    from . import Connection


__all__ = ["Head", "Lease", "heads", "release", "renew", "safety_margin", "take"]


def take(conn: Connection, partition: int, owner: str, seconds: float) -> Lease | None:
    """Take partition's lease if it expired (or was released); None while someone holds it."""

    def ask() -> int | None:
        params = {"partition": partition, "owner": owner, "seconds": seconds}
        row = conn.execute(statements.TAKE, params).fetchone()
        return None if row is None else int(row[0])

    return take_with(partition, owner, seconds, ask)


def renew(conn: Connection, lease: Lease) -> bool:
    """Extend the lease (the heartbeat). False: it was lost, and `lease` is marked so."""
    return renew_with(
        lease, lambda: conn.execute(statements.RENEW, _fence(lease)).fetchone() is not None
    )


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
