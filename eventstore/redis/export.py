"""`export-log` from a Redis store: the shared export (eventstore/shared/export.py) over the
stream's reads, so the segment files hold byte for byte the lines that were appended."""

from __future__ import annotations

import os

from ..shared import StoreError, one_line
from ..shared.export import Exported, check_partition, export_partition
from . import require_redis
from .reader import RedisReader
from .schema import connect, read_store

__all__ = ["Exported", "export_log", "store_vkey"]


def export_log(url: str, partition: int, out: str | os.PathLike[str]) -> Exported:
    redis = require_redis()
    client = connect(url)
    try:
        return export_partition(RedisReader(client), read_store(client), partition, out)
    except redis.RedisError as exc:
        raise StoreError(f"export of partition {partition} failed: {one_line(exc)}") from None
    finally:
        client.close()


def store_vkey(url: str, partition: int) -> str:
    redis = require_redis()
    client = connect(url)
    try:
        info = read_store(client)
        check_partition(info, partition)
        return info.vkeys[partition]
    except redis.RedisError as exc:
        raise StoreError(f"reading the store: {one_line(exc)}") from None
    finally:
        client.close()
