"""Several service replicas over one shared store (docs/scale-out-replicas.md).

`Cluster` is one replica's view: every partition's mirror and hub, the leadership loop that
takes, renews, balances and gives up partition leases, and `route(p)` for requests.
"""

from __future__ import annotations

from streams.cluster.cluster import Cluster, partition_dir
from streams.cluster.routes import Local, NoLeader, Remote, Route

__all__ = ["Cluster", "Local", "NoLeader", "Remote", "Route", "partition_dir"]
