"""`PgSink`: a partition's lines made durable in PostgreSQL, fenced by the partition's lease.

The sequencer decided every byte already; this sink only stores them. A batch is one statement
(statements.APPEND) that advances the head row only while it still holds the batch's
predecessor under our epoch, so a commit either lands whole, or changes nothing because another
replica took the partition (Refused). What the sink adds to the file sink is the doubt of a
network: when the connection drops mid-commit nobody knows whether the transaction committed.
The sink then reconnects and reads the head: our last (seq, h) in the table means committed,
the head still at our predecessor under our epoch means send again, anything else means fenced.
It never sends a statement after the lease's local deadline (lease.py), and answers Unknown
when the store stays unreachable until then: the writer stops and nothing is acknowledged.

After each durable commit the lines go to the replica's mirror (`mirror.extend`), after each
checkpoint its text (`mirror.install_checkpoint`): the mirror is a cache fed from the table too,
so an error there is logged and never turns a durable commit into a failure.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ..errors import InvalidInput
from ..mirror import Mirror
from ..record import Record
from ..sequencer import StartSegment
from ..shared.fencing import (
    LEASE_EXPIRED,
    Fenced,
    StoreUnreachable,
    committed,
    decide_after_loss,
    feed_mirror,
    retry_fenced,
)
from ..sink import (
    COMMITTED,
    Batch,
    CommitResult,
    RedactionRewrite,
    Refused,
    SignedCheckpoint,
    Unknown,
)
from . import StoreError, require_psycopg, statements
from .deadline import within
from .lease import Lease, safety_margin
from .schema import StoreInfo, connect_within, one_line, one_row

if TYPE_CHECKING:
    from . import Connection

__all__ = ["LEASE_EXPIRED", "Fenced", "PgSink", "StoreUnreachable"]

log = logging.getLogger(__name__)

VACUUM_SECONDS = 60.0  # the client-side bound of the VACUUM after a redaction rewrite


class PgSink:
    """The DurabilitySink of one partition of a shared store (eventstore/sink.py)."""

    def __init__(
        self, url: str, info: StoreInfo, lease: Lease, mirror: Mirror | None = None
    ) -> None:
        self.url, self.info, self.lease, self.mirror = url, info, lease, mirror
        self.partition = lease.partition
        self.fsync_observer: Callable[[float, int], None] | None = None
        self._psycopg = require_psycopg()
        # Refuses synchronous_commit = off at once; a stalled handshake ends within a lease.
        self._conn: Connection | None = connect_within(url, lease.seconds)
        self._timeout_ms: int | None = None  # the writer session's statement_timeout (_bound)
        # read_record runs on callers' threads: a connection of its own.
        self._reader: Connection | None = None
        self._reader_lock = threading.Lock()
        # How each commit that lost its connection was decided, by the head: for metrics/tests.
        self.after_loss: collections.Counter[str] = collections.Counter()

    # ---- appends ---------------------------------------------------------------------------

    def commit(self, batch: Batch) -> CommitResult:
        params = self._append_params(batch.records, batch.lines, batch.leaves)
        answer = self._append(statements.APPEND, params)
        if answer is COMMITTED:
            self._to_mirror("extend", batch.lines, batch.records)
        return answer

    def start_segment(self, start: StartSegment) -> CommitResult:
        params = self._append_params([start.record], [start.line], [start.leaf])
        if start.checkpoint is None:  # segment 0's header: nothing before it
            answer = self._append(statements.APPEND, params)
        else:
            payload = start.record.payload
            assert isinstance(payload, dict)  # the sequencer's segment.open
            params["sealed_segment"] = start.number - 1
            params["sealed_root"] = base64.b64decode(payload["prev_segment_root"])
            params["cp_size"] = start.record.seq
            params["cp_text"] = start.checkpoint
            answer = self._append(statements.START_SEGMENT, params)
        if answer is COMMITTED:
            self._to_mirror("extend", [start.line], [start.record])
            if start.checkpoint is not None:
                self._to_mirror("install_checkpoint", start.checkpoint)
        return answer

    def _append_params(
        self, records: list[Record], lines: list[bytes], leaves: list[bytes]
    ) -> dict[str, Any]:
        first, last = records[0].seq, records[-1].seq
        return {
            **self._fence(),
            "first_seq": first,
            "last_seq": last,
            "prev": bytes.fromhex(records[0].prev),
            "last_h": leaves[-1],
            "seqs": [r.seq for r in records],
            "hs": leaves,
            "lines": lines,
            "note": f"{self.partition}:{first}:{last}",
        }

    def _append(self, sql: str, params: dict[str, Any]) -> CommitResult:
        """Send one fenced append; on a lost connection decide from the head (see module doc)."""
        while True:
            if not self.lease.valid():
                return Refused(LEASE_EXPIRED)
            started = time.monotonic()
            try:
                conn = self._writer()
                with within(conn, self._cut_at(), "an append"):
                    self._bound(conn)
                    inserted, moved = one_row(conn.execute(sql, params))
            except self._psycopg.errors.QueryCanceled as exc:
                # Our own statement deadline (the lease's end): the head row locked, or the
                # server too slow. A cancelled statement rolled back: nothing was committed, and
                # the lease ends now, so nothing more may be sent (503 with Retry-After).
                self._drop_writer()
                return Unknown(
                    "not committed: the store did not finish the commit before this replica's "
                    f"lease on partition {self.partition} ends ({one_line(exc)})"
                )
            except (self._psycopg.OperationalError, StoreError) as exc:  # StoreError: reconnecting
                self._drop_writer()
                decision = self._decide_after_loss(params, started, exc)
                if decision == "resend":
                    continue
                return decision
            if moved:
                if inserted != len(params["seqs"]):  # cannot happen: one statement, all or none
                    raise StoreError(f"an append inserted {inserted} of {len(params['seqs'])} rows")
                return committed(self.lease, started, self.fsync_observer, inserted)
            return self._refused()

    def _decide_after_loss(
        self, params: dict[str, Any], started: float, exc: BaseException
    ) -> CommitResult | Literal["resend"]:
        """After a connection lost mid-commit: COMMITTED, "resend", Refused or Unknown
        (shared/fencing.py retries the head's read while the lease lasts)."""

        def decide() -> CommitResult | Literal["resend"]:
            conn = self._writer()
            with within(conn, self._cut_at(), "the head's read after a lost commit"):
                last_seq, last_h, epoch, owner = one_row(
                    conn.execute(
                        "SELECT last_seq, last_h, epoch, owner FROM lm_head WHERE partition = %s",
                        (self.partition,),
                    )
                )
                row = conn.execute(
                    "SELECT h FROM lm_record WHERE partition = %s AND seq = %s",
                    (self.partition, params["last_seq"]),
                ).fetchone()
            held = row is not None and bytes(row[0]) == params["last_h"]
            if last_seq >= params["last_seq"] and held:
                self.lease.extend_from(started)  # the statement renewed it, too
                return COMMITTED
            ours = epoch == self.lease.epoch and owner == self.lease.owner
            if ours and last_seq == params["first_seq"] - 1 and bytes(last_h) == params["prev"]:
                return "resend"
            self.lease.lose()
            return Refused(owner or "nobody")

        lost = (self._psycopg.OperationalError, StoreError)
        return decide_after_loss(self.lease, exc, decide, lost, self._drop_writer, self.after_loss)

    def _refused(self) -> Refused:
        """Zero rows: the head is not ours any more (or not where we think it is)."""
        self.lease.lose()
        try:
            conn = self._writer(time.monotonic() + self.lease.seconds)
            with within(conn, time.monotonic() + self.lease.seconds, "the head's owner"):
                row = one_row(
                    conn.execute(
                        "SELECT owner, epoch FROM lm_head WHERE partition = %s", (self.partition,)
                    )
                )
        except (self._psycopg.OperationalError, StoreError):
            self._drop_writer()
            return Refused("unknown (the store did not answer)")
        owner, epoch = row
        if owner == self.lease.owner and epoch == self.lease.epoch:
            return Refused(f"{owner} (this replica, epoch {epoch}, but the head moved)")
        return Refused(f"{owner} (epoch {epoch})")

    # ---- checkpoints, reads, redaction -----------------------------------------------------

    def install_checkpoint(self, checkpoint: SignedCheckpoint) -> None:
        params = {**self._fence(), "size": checkpoint.size, "text": checkpoint.text}

        def insert(conn: Connection) -> None:
            if conn.execute(statements.INSERT_CHECKPOINT, params).fetchone() is None:
                self._check_still_ours(conn)  # else it was there already: fine

        self._retrying(insert)
        self._to_mirror("install_checkpoint", checkpoint.text)

    def read_record(self, seq: int) -> Record:
        with self._reader_lock:
            for attempt in (1, 2):
                # A read waits on the store at most a lease (deadline.py), then fails.
                deadline = time.monotonic() + self.lease.seconds
                try:
                    if self._reader is None:
                        self._reader = connect_within(self.url, deadline - time.monotonic())
                    with within(self._reader, deadline, f"a read of seq {seq}"):
                        row = self._reader.execute(
                            "SELECT line FROM lm_record WHERE partition = %s AND seq = %s",
                            (self.partition, seq),
                        ).fetchone()
                    break
                except (self._psycopg.OperationalError, StoreError) as exc:
                    self._reader, reader = None, self._reader
                    if reader is not None:
                        reader.close()
                    if attempt == 2:
                        raise StoreError(f"the store did not give seq {seq}: {exc}") from exc
        if row is None:
            raise InvalidInput(f"seq {seq} is not in partition {self.partition}'s log")
        return Record.from_line(bytes(row[0]))

    def rewrite_redacted(self, rewrite: RedactionRewrite) -> None:
        """Remove the targets' payloads in one fenced transaction, then VACUUM (issue 14)."""
        targets = {
            seq: rs for per_segment in rewrite.targets.values() for seq, rs in per_segment.items()
        }

        def rewrite_rows(conn: Connection) -> None:
            with conn.transaction():
                if conn.execute(statements.LOCK_HEAD_IF_OURS, self._fence()).fetchone() is None:
                    self._check_still_ours(conn)
                for seq, redaction_seq in sorted(targets.items()):
                    row = one_row(  # a target: a durable record before the redaction
                        conn.execute(
                            "SELECT line FROM lm_record WHERE partition = %s AND seq = %s",
                            (self.partition, seq),
                        )
                    )
                    record = Record.from_line(bytes(row[0]))
                    if record.has_payload:  # a retry after a lost commit finds it done
                        line = record.redacted_line(redaction_seq) + b"\n"
                        conn.execute(
                            statements.REWRITE_LINE,
                            {"partition": self.partition, "seq": seq, "line": line},
                        )

        self._retrying(rewrite_rows)
        self._vacuum()

    def _vacuum(self) -> None:
        """VACUUM is no fenced write, and on a large table it may take longer than a lease: it
        runs without the statement deadline, under a client-side bound of its own. When it fails
        the rewrite stands (it is committed); autovacuum removes the old versions later."""
        try:
            conn = self._writer()
            with within(conn, time.monotonic() + VACUUM_SECONDS, "VACUUM lm_record"):
                conn.execute("SET statement_timeout = 0")
                self._timeout_ms = None
                conn.execute(statements.VACUUM_RECORDS)
        except (self._psycopg.Error, StoreError) as exc:
            self._drop_writer()
            log.warning("partition %d: VACUUM after a redaction failed: %s", self.partition, exc)

    def abandon(self) -> None:
        pass  # an append is one transaction: nothing half-written to drop

    def close(self) -> None:
        for conn in (self._conn, self._reader):
            if conn is not None:
                with contextlib.suppress(Exception):  # closing a broken connection
                    conn.close()
        self._conn = self._reader = None

    # ---- connections -----------------------------------------------------------------------

    def _fence(self) -> dict[str, Any]:
        lease = self.lease
        return {
            "partition": lease.partition,
            "epoch": lease.epoch,
            "owner": lease.owner,
            "seconds": lease.seconds,
        }

    def _writer(self, deadline: float | None = None) -> Connection:
        """The writer's connection; a new one is given up on at `deadline` (by default the
        lease's end plus its safety margin: `_cut_at`), so a stalled handshake cannot hold the
        writer either."""
        if self._conn is None:
            until = self._cut_at() if deadline is None else deadline
            self._conn = connect_within(self.url, until - time.monotonic())
            self._timeout_ms = None  # a new session: no statement deadline yet
        return self._conn

    def _cut_at(self) -> float:
        """When a store call of the writer is cut on this side (deadline.py): the lease's local
        deadline plus its safety margin, later than the statement_timeout `_bound` sets (so a
        lock or a slow server is the server's clean cancel), and about when the database's
        lease ends: a connection that gave no answer by then is stalled."""
        return self.lease.deadline + safety_margin(self.lease.seconds)

    def _bound(self, conn: Connection) -> None:
        """Give the writer's session a statement deadline within the lease: `statement_timeout`
        (which counts lock waits too) no later than the lease's local deadline plus half its
        safety margin, so a locked head row or a server that stopped making progress cuts the
        statement before the database's lease ends, instead of hanging the writer as long as
        the stall. A new SET is sent only when the one in force would end too late (the
        deadline moves forward with each commit and renewal, so under load it is rare)."""
        slack = safety_margin(self.lease.seconds) / 2
        now = time.monotonic()
        current = self._timeout_ms
        if current is not None and now + current / 1000 <= self.lease.deadline + slack:
            return
        ms = max(1, int(self.lease.remaining() * 1000))
        conn.execute(f"SET statement_timeout = {ms}")
        self._timeout_ms = ms

    def _drop_writer(self) -> None:
        conn, self._conn = self._conn, None
        self._timeout_ms = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _check_still_ours(self, conn: Connection) -> None:
        row = conn.execute(
            "SELECT owner, epoch FROM lm_head WHERE partition = %s", (self.partition,)
        ).fetchone()
        if row is None or row[0] != self.lease.owner or row[1] != self.lease.epoch:
            self.lease.lose()
            owner = f"{row[0]} (epoch {row[1]})" if row else "nobody"
            raise Fenced(f"partition {self.partition} is led by {owner} now", owner)

    def _retrying(self, write: Callable[[Connection], None]) -> None:
        """Run an idempotent fenced write, reconnecting while the lease lasts.

        Once the lease's local deadline has passed, the answer is a refusal (`Fenced` with
        LEASE_EXPIRED: the writer answers CommitRefused, as for an append sent too late),
        whatever the last attempt met: a lost connection found after the deadline (a leader
        paused past its lease and woken) is the lease's end, not an unreachable store
        (shared/fencing.py's retry_fenced)."""

        def attempt() -> None:
            conn = self._writer()
            with within(conn, self._cut_at(), "a fenced write"):
                self._bound(conn)
                write(conn)

        # A session the server ended for idling in a transaction (schema.connect) is a lost
        # connection too: this replica was paused mid-rewrite; the lease check decides.
        lost = (
            self._psycopg.OperationalError,
            self._psycopg.errors.IdleInTransactionSessionTimeout,
            StoreError,
        )
        retry_fenced(
            self.partition, self.lease, attempt, lost, self._psycopg.Error, self._drop_writer
        )

    def _to_mirror(self, method: str, *arguments: object) -> None:
        feed_mirror(self.mirror, self.partition, method, *arguments)
