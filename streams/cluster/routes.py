"""Where a partition's session calls run: here, on another replica, or nowhere yet.

`Cluster.route(p)` answers one of these from a cache the leadership loop keeps, so a request
pays no database round trip to learn its leader; a stale `Remote` costs the forwarder one 421
and a refresh (streams/cluster/forwarding.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from sections.runtime.memory import Memory


@dataclass(frozen=True)
class Local:
    """This replica leads the partition: run the call on `memory`."""

    memory: Memory


@dataclass(frozen=True)
class Remote:
    """Another replica leads it (per lm_head.owner); `url` is its internal base URL."""

    url: str
    replica: str


@dataclass(frozen=True)
class NoLeader:
    """No replica leads it right now (a takeover is due or under way)."""

    retry_after: float


Route = Local | Remote | NoLeader
