"""The log on PostgreSQL: a shared store of P partitions, each one complete log with one fenced
leader (docs/scale-out.md).

Everything here is an I/O layer over the same sans-I/O core as the file store: the sequencer
decides every byte, `PgSink` makes the bytes durable in a table, and the mirror keeps each
replica's copy as spec segment files. psycopg is an optional dependency (the `postgresql`
extra); `require_psycopg()` names the install step when it is missing.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

from ..shared import StoreError

if TYPE_CHECKING:
    import psycopg

    # What `schema.connect` returns: autocommit, rows as tuples (psycopg's default).
    Connection: TypeAlias = psycopg.Connection[tuple[Any, ...]]


__all__ = ["StoreError", "require_psycopg"]


def require_psycopg() -> ModuleType:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the test extra installs it
        raise StoreError(
            "a PostgreSQL store needs psycopg: pip install 'ledgermem[postgresql]'"
        ) from None
    return psycopg
