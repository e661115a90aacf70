"""`export-log` from a PostgreSQL store: the shared export (eventstore/shared/export.py) over
the table's reads, in one connection."""

from __future__ import annotations

import os

from ..shared.export import Exported, check_partition, export_partition
from . import StoreError, require_psycopg
from .reader import PgReader
from .schema import connect, one_line, read_store

__all__ = ["Exported", "check_partition", "export_log", "store_vkey"]


def export_log(url: str, partition: int, out: str | os.PathLike[str]) -> Exported:
    """Copy partition `partition`'s rows after what `out` holds into `out` (shared/export.py)."""
    psycopg = require_psycopg()
    conn = connect(url)
    try:
        return export_partition(PgReader(conn), read_store(conn), partition, out)
    except psycopg.Error as exc:
        raise StoreError(f"export of partition {partition} failed: {one_line(exc)}") from None
    finally:
        conn.close()


def store_vkey(url: str, partition: int) -> str:
    """The vkey the store recorded for `partition` (lm_head.vkey)."""
    psycopg = require_psycopg()
    conn = connect(url)
    try:
        info = read_store(conn)
        check_partition(info, partition)
        return info.vkeys[partition]
    except psycopg.Error as exc:
        raise StoreError(f"reading the store: {one_line(exc)}") from None
    finally:
        conn.close()
