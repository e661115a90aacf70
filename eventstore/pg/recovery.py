"""Taking over a partition of a PostgreSQL store: the shared recovery
(eventstore/shared/recovery.py) over the table's reads (`PgReader`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checkpoint import SigningKey
from ..file_recovery import Recovered
from ..shared import StoreInfo
from ..shared import recovery as shared
from ..shared.recovery import partition_key
from ..sink import DurabilitySink
from .reader import PgReader

if TYPE_CHECKING:
    from . import Connection

__all__ = ["partition_key", "recover_partition"]


def recover_partition(
    conn: Connection,
    info: StoreInfo,
    key: SigningKey,
    partition: int,
    *,
    sink: DurabilitySink | None = None,
) -> Recovered | None:
    """Where partition `partition`'s log stands in the table, checked; None when it is empty."""
    return shared.recover_partition(PgReader(conn), info, key, partition, sink=sink)
