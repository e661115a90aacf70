"""The PostgreSQL store as a `StoreEngine` (eventstore/shared/engine.py): sessions over one
connection each, and the rest of eventstore/pg/ behind the engine's methods."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..shared import StoreInfo
from ..shared.lease import Lease
from .schema import connect, read_store
from .session import PgSession

if TYPE_CHECKING:
    from ..checkpoint import SigningKey
    from ..mirror import Mirror
    from ..shared.export import Exported
    from ..writer import LogWriter
    from .tail import StoreTail


class PgEngine:
    name = "PostgreSQL"

    def __init__(self, url: str) -> None:
        self.url = url

    def session(self) -> PgSession:
        return PgSession(self.url)

    def read_store(self) -> StoreInfo:
        with connect(self.url) as conn:
            return read_store(conn)

    def init_store(
        self,
        partitions: int,
        data_dir: str | os.PathLike[str],
        *,
        seg_bits: int,
        origin: str | None,
    ) -> StoreInfo:
        from .schema import init_store

        return init_store(self.url, partitions, Path(data_dir), seg_bits=seg_bits, origin=origin)

    def open_partition_writer(
        self,
        info: StoreInfo,
        key: SigningKey,
        partition: int,
        lease: Lease,
        mirror: Mirror | None = None,
        **writer_options: Any,
    ) -> LogWriter:
        from .leadership import open_partition_writer

        return open_partition_writer(
            self.url, info, key, partition, lease, mirror, **writer_options
        )

    def tail(self, mirrors: dict[int, Mirror]) -> StoreTail:
        from .tail import StoreTail

        return StoreTail(self.url, mirrors)

    def sync_mirror(self, partition: int, mirror: Mirror) -> int:
        from .tail import sync_mirror

        with connect(self.url) as conn:
            return sync_mirror(conn, partition, mirror)

    def export_log(self, partition: int, out: str | os.PathLike[str]) -> Exported:
        from .export import export_log

        return export_log(self.url, partition, out)

    def store_vkey(self, partition: int) -> str:
        from .export import store_vkey

        return store_vkey(self.url, partition)
