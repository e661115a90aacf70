"""The Redis store as a `StoreEngine` (eventstore/shared/engine.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..shared import StoreInfo
from ..shared.lease import Lease
from .schema import connect, read_store
from .session import RedisSession

if TYPE_CHECKING:
    from ..checkpoint import SigningKey
    from ..mirror import Mirror
    from ..shared.export import Exported
    from ..writer import LogWriter
    from .tail import StoreTail


class RedisEngine:
    name = "Redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self._partitions: int | None = None

    def session(self) -> RedisSession:
        return RedisSession(self.url, self._partitions)

    def read_store(self) -> StoreInfo:
        client = connect(self.url)
        try:
            info = read_store(client)
        finally:
            client.close()
        self._partitions = info.partitions
        return info

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

        client = connect(self.url)
        try:
            return sync_mirror(client, partition, mirror)
        finally:
            client.close()

    def export_log(self, partition: int, out: str | os.PathLike[str]) -> Exported:
        from .export import export_log

        return export_log(self.url, partition, out)

    def store_vkey(self, partition: int) -> str:
        from .export import store_vkey

        return store_vkey(self.url, partition)
