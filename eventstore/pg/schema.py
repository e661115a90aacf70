"""The shared store's tables, creating them (`init-store`), and reading what they describe.

    lm_store         one row: origin, partitions P, seg_bits (fixed at creation)
    lm_head          per partition: vkey, the chain head (last_seq, last_h), the lease
                     (epoch, owner, lease_until): the row every write is fenced on
    lm_record        the log: (partition, seq) -> h and the exact line bytes (newline included)
    lm_checkpoint    signed checkpoints per partition; the newest is the largest size
    lm_segment_root  the Merkle root of each full segment: a takeover rebuilds from these
    lm_replica       live service replicas: id, internal URL, last heartbeat (balance, forwarding)

The head of an empty partition is (-1, genesis(origin/pN)), so the append statement's
precondition "the head is the batch's predecessor" needs no special case for seq 0. Times are
the database's (`now()`), never a replica's clock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..layout import DataDir
from ..partitions import check_partitions, partition_origin
from ..record import genesis
from ..shared import StoreInfo, adopt_store, one_line, redact_url
from . import StoreError, require_psycopg
from .deadline import StoreStalled, stalled, within

if TYPE_CHECKING:
    from psycopg import Cursor

    from . import Connection

DDL = """
CREATE TABLE IF NOT EXISTS lm_store (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    origin text NOT NULL,
    partitions integer NOT NULL CHECK (partitions >= 1),
    seg_bits integer NOT NULL CHECK (seg_bits BETWEEN 2 AND 40),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS lm_head (
    partition integer PRIMARY KEY,
    vkey text NOT NULL,
    last_seq bigint NOT NULL DEFAULT -1,
    last_h bytea NOT NULL,
    epoch bigint NOT NULL DEFAULT 0,
    owner text,
    lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE TABLE IF NOT EXISTS lm_record (
    partition integer NOT NULL,
    seq bigint NOT NULL,
    h bytea NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (partition, seq)
);
CREATE TABLE IF NOT EXISTS lm_checkpoint (
    partition integer NOT NULL,
    size bigint NOT NULL,
    text text NOT NULL,
    epoch bigint NOT NULL,
    PRIMARY KEY (partition, size)
);
CREATE TABLE IF NOT EXISTS lm_segment_root (
    partition integer NOT NULL,
    segment bigint NOT NULL,
    root bytea NOT NULL,
    PRIMARY KEY (partition, segment)
);
CREATE TABLE IF NOT EXISTS lm_replica (
    id text PRIMARY KEY,
    url text NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now()
);
"""

__all__ = [
    "StoreError",
    "StoreInfo",
    "connect",
    "init_store",
    "one_line",
    "read_store",
    "redact_url",
]

NOTIFY_CHANNEL = "lm_records"  # payload "partition:first:last", never the lines


# A peer that vanishes (a network partition, a host gone) must end a statement with an error,
# which the sink turns into "read the head", rather than leave the writer waiting forever:
# keepalives probe an idle connection, and tcp_user_timeout (ms) bounds unacknowledged sends.
# Defaults only: a parameter the URL sets itself wins.
TCP_DEADLINES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}


IDLE_IN_TRANSACTION_MS = 1000


def connect(url: str, deadline: float | None = None) -> Connection:
    """A connection to the store's database (autocommit: each statement is its own transaction,
    `with conn.transaction()` groups several), refusing one that could lose acknowledged commits.
    With a `deadline` (time.monotonic()), its first statements are cut there (deadline.py)."""
    psycopg = require_psycopg()
    try:
        given = psycopg.conninfo.conninfo_to_dict(url)
        defaults = {k: v for k, v in TCP_DEADLINES.items() if k not in given}
        conn = psycopg.connect(url, autocommit=True, connect_timeout=5, **defaults)
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to the store {redact_url(url)}: {one_line(exc)}"
        ) from None
    try:
        with within(conn, time.monotonic() + 5 if deadline is None else deadline, "a new session"):
            _prepare(conn)
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close()
        raise
    return conn


def _prepare(conn: Connection) -> None:
    # A replica paused inside a transaction (SIGSTOP, swap, a long GC) while it holds the head
    # row's lock, during a redaction rewrite, would block every takeover of that partition until
    # it woke: the lease is no fence against a lock. The server ends a session idle in a
    # transaction this long, which rolls it back and frees the row; a healthy client sends its
    # statements back to back and never comes near it.
    conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
    setting = one_row(conn.execute("SHOW synchronous_commit"))[0]
    if setting not in ("on", "remote_write", "remote_apply"):
        raise StoreError(
            f"the store's synchronous_commit is {setting!r}: a commit could be acknowledged and "
            "then lost; set synchronous_commit = on"
        )


def connect_within(url: str, seconds: float) -> Connection:
    """`connect(url)`, given up on after `seconds` (StoreStalled): a handshake that gets no
    answer does not hold the caller past its deadline. The helper thread that connects ends by
    itself within `connect_timeout` and the deadline, and closes what it got too late."""
    if seconds <= 0:
        raise StoreStalled(stalled("a new connection"))
    deadline = time.monotonic() + seconds
    box: dict[str, object] = {}
    lock = threading.Lock()
    ready = threading.Event()

    def run() -> None:
        made: Connection | BaseException
        try:
            made = connect(url, deadline)
        except BaseException as exc:  # handed to the caller
            made = exc
        with lock:
            abandoned = box.get("abandoned", False)
            box["result"] = made
        ready.set()
        if abandoned and not isinstance(made, BaseException):
            with contextlib.suppress(Exception):
                made.close()

    threading.Thread(target=run, name="ledgermem-store-connect", daemon=True).start()
    ready.wait(seconds)
    with lock:
        if "result" not in box:
            box["abandoned"] = True
            raise StoreStalled(stalled("a new connection"))
        result = box["result"]
    if isinstance(result, BaseException):
        raise result
    return result  # type: ignore[return-value]


def init_store(
    url: str,
    partitions: int,
    data_dir: str | Path,
    *,
    seg_bits: int = 16,
    origin: str | None = None,
) -> StoreInfo:
    """Create the schema and record the origin and each partition's vkey (idempotent).

    The key comes from `data_dir` (created there if it has none). Running it again on an
    existing store checks that P and the key match and changes nothing."""
    from ..store import load_or_create_key

    check_partitions(partitions)
    conn = connect(url)
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(7468101)")  # two init-stores at once
            conn.execute(DDL)
            existing = _read_store(conn)
            if existing is not None:
                return adopt_store(existing, partitions, data_dir)
            info = load_or_create_key(DataDir(data_dir), origin, create=True)
            key = info.key
            conn.execute(
                "INSERT INTO lm_store (origin, partitions, seg_bits) VALUES (%s, %s, %s)",
                (key.origin, partitions, seg_bits),
            )
            vkeys = []
            for n in range(partitions):
                part_origin = partition_origin(key.origin, n)
                vkey = str(key.with_origin(part_origin).vkey)
                vkeys.append(vkey)
                conn.execute(
                    "INSERT INTO lm_head (partition, vkey, last_h) VALUES (%s, %s, %s)",
                    (n, vkey, genesis(part_origin)),
                )
            return StoreInfo(key.origin, partitions, seg_bits, tuple(vkeys))
    finally:
        conn.close()


def read_store(conn: Connection) -> StoreInfo:
    """The store's description; StoreError when `init-store` never ran on this database."""
    psycopg = require_psycopg()
    try:
        info = _read_store(conn)
    except psycopg.errors.UndefinedTable:
        info = None
    if info is None:
        url = store_url_of(conn)
        raise StoreError(
            f"the database {url} holds no ledgermem store: create it first with "
            f"`ledgermem init-store {url} --partitions P --data DIR`"
        )
    return info


def store_url_of(conn: Connection) -> str:
    """The URL of `conn`'s database, for messages: never its password, nor its parameters."""
    info = conn.info
    user = f"{info.user}@" if info.user else ""
    return f"postgresql://{user}{info.host}:{info.port}/{info.dbname}"


def _read_store(conn: Connection) -> StoreInfo | None:
    row = conn.execute("SELECT origin, partitions, seg_bits FROM lm_store").fetchone()
    if row is None:
        return None
    vkeys = [v for (v,) in conn.execute("SELECT vkey FROM lm_head ORDER BY partition")]
    return StoreInfo(row[0], row[1], row[2], tuple(vkeys))


def one_row(cursor: Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The row of a query that always has one: a partition's head row (init-store made it), a
    SELECT of aggregates."""
    row = cursor.fetchone()
    assert row is not None, "a row init-store creates is missing"
    return row
