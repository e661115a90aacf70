"""lm_replica: which service replicas are alive, and where the others reach them.

Every replica upserts its row (id, internal URL, seen_at = now()) on each tick of its leadership
loop; a replica is live while its row is younger than one lease period, so a replica killed with
-9 drops out of the live set at about the time its leases expire. A graceful stop deletes the
row. Times are the database's clock, never a replica's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..shared.lease import Replica

if TYPE_CHECKING:
    from . import Connection

STALE_ROWS = "1 hour"  # rows of replicas long gone are deleted by whoever beats next


def heartbeat(conn: Connection, replica_id: str, url: str) -> None:
    conn.execute(
        "INSERT INTO lm_replica (id, url, seen_at) VALUES (%s, %s, now()) "
        "ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = now()",
        (replica_id, url),
    )


def replicas(conn: Connection, live_seconds: float) -> list[Replica]:
    """Every replica row, with whether its heartbeat is fresher than `live_seconds`."""
    rows = conn.execute(
        "SELECT id, url, seen_at > now() - make_interval(secs => %s) FROM lm_replica",
        (live_seconds,),
    ).fetchall()
    return [Replica(id_, url, live) for id_, url, live in rows]


def leave(conn: Connection, replica_id: str) -> None:
    conn.execute("DELETE FROM lm_replica WHERE id = %s", (replica_id,))


def prune(conn: Connection) -> None:
    conn.execute(f"DELETE FROM lm_replica WHERE seen_at < now() - interval '{STALE_ROWS}'")
