"""Which partitions this replica should take or give up: a pure function of one look at the store.

Inputs are what the leadership loop reads each tick (the heads' owners and whether their leases
expired by the database's clock, the replicas whose heartbeat is fresh) plus what this replica
knows of itself. The rules, in order of importance:

1. Availability first: a partition whose lease expired is taken by someone. A replica leading
   fewer than its share (ceil(P / live replicas)) takes at once; one at or above its share waits
   `grace` seconds first, so that an under-loaded replica gets it, unless no other live replica
   is under its share (then waiting would only keep the partition leaderless).
2. Spread: a replica leading more than its share while another live replica leads fewer gives up
   one partition per tick (released, so the other can take it at once). It does not take back
   what it released recently while someone else could take it.
3. Preferences break ties the same way on every replica: partition p prefers the live replica at
   index p mod N of the sorted ids, so two idle replicas starting together reach for different
   partitions instead of racing for the same one (a lost race is harmless: `take` is atomic).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class HeadView:
    partition: int
    owner: str | None
    expired: bool  # by the database's clock: the lease can be taken

    @property
    def free(self) -> bool:
        return self.owner is None or self.expired


@dataclass(frozen=True)
class Plan:
    take: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


def share(partitions: int, live: int) -> int:
    """The most partitions a replica should lead when `live` replicas share `partitions`."""
    return math.ceil(partitions / max(live, 1))


def preferred(partition: int, live: list[str]) -> str:
    return live[partition % len(live)]


def plan(
    heads: Iterable[HeadView],
    live: Iterable[str],
    me: str,
    leading: set[int],
    *,
    releasable: set[int] | None = None,
    free_for: Mapping[int, float] | None = None,
    released: set[int] | frozenset[int] = frozenset(),
    grace: float = 1.0,
) -> Plan:
    """What to do this tick.

    heads       every partition's head (owner, expired)
    live        replica ids with a fresh heartbeat (this one is added if missing)
    leading     the partitions this replica holds a lease on (leading or taking over)
    releasable  those it may give up now (held long enough; default: all of `leading`)
    free_for    seconds each free partition has been seen free by this replica
    released    partitions this replica gave up recently
    """
    heads = sorted(heads, key=lambda head: head.partition)
    replicas = sorted(set(live) | {me})
    fair = share(len(heads), len(replicas))
    counts = dict.fromkeys(replicas, 0)
    for head in heads:
        if not head.free and head.owner in counts and head.owner != me:
            counts[head.owner] += 1
    counts[me] = len(leading)
    free_for = free_for or {}
    others_under = [r for r in replicas if r != me and counts[r] < fair]

    free = [h.partition for h in heads if h.free and h.partition not in leading]
    free.sort(key=lambda p: (preferred(p, replicas) != me, p))
    take = []
    for partition in free:
        waited = free_for.get(partition, 0.0) >= grace
        if others_under and not waited and (counts[me] >= fair or partition in released):
            continue
        take.append(partition)
        counts[me] += 1

    release: tuple[int, ...] = ()
    if not take and counts[me] > fair and others_under:
        candidates = sorted(leading if releasable is None else releasable & leading)
        if candidates:
            # Prefer one an under-loaded replica prefers: that is where it will land.
            candidates.sort(key=lambda p: (preferred(p, replicas) not in others_under, -p))
            release = (candidates[0],)
    return Plan(tuple(take), release)
