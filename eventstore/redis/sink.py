"""`RedisSink`: a partition's lines made durable in Redis, fenced by the partition's lease.

The sequencer decided every byte already; this sink only stores them. A batch is one Lua script
(scripts.APPEND) that checks the head hash (last seq, last h, epoch, owner) and appends every
line of the batch to the partition's stream or none, so a commit either lands whole or changes
nothing because another replica took the partition (Refused). The server answers only after its
append-only file is fsynced (`appendfsync always`, checked by schema.connect). When the
connection drops mid-commit nobody knows whether the script ran: the sink reconnects and reads
the head, as PgSink does: our last line at our last seq means committed, the head still at our
predecessor under our epoch means send again, anything else means fenced. It never sends a
script after the lease's local deadline, and answers Unknown when the server stays unreachable
until then. After each durable commit the lines go to the replica's mirror.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ..errors import InvalidInput
from ..mirror import Mirror
from ..record import Record
from ..sequencer import StartSegment
from ..shared import StoreInfo, one_line
from ..shared.fencing import (
    LEASE_EXPIRED,
    Fenced,
    committed,
    decide_after_loss,
    feed_mirror,
    retry_fenced,
)
from ..shared.lease import Lease, safety_margin
from ..sink import (
    COMMITTED,
    Batch,
    CommitResult,
    RedactionRewrite,
    Refused,
    SignedCheckpoint,
)
from . import StoreError, keys, require_redis, scripts
from .reader import RedisReader
from .schema import connect

if TYPE_CHECKING:
    from . import Client

NO_SEGMENT = ("", "", "", "")


class RedisSink:
    """The DurabilitySink of one partition of a Redis store (eventstore/sink.py)."""

    def __init__(
        self, url: str, info: StoreInfo, lease: Lease, mirror: Mirror | None = None
    ) -> None:
        self.url, self.info, self.lease, self.mirror = url, info, lease, mirror
        self.partition = lease.partition
        self.fsync_observer: Callable[[float, int], None] | None = None
        self._redis = require_redis()
        # A reply slower than the lease is worth no more than a lost one: read the head then.
        self._timeout = max(0.2, lease.seconds - safety_margin(lease.seconds))
        self._client: Client | None = connect(url, self._timeout)  # refuses a lossy server
        self._keys = [
            keys.head(self.partition),
            keys.log(self.partition),
            keys.roots(self.partition),
            keys.checkpoints(self.partition),
            keys.checkpoint_sizes(self.partition),
        ]
        # EVALSHA of the append, the script's text sent again only after a NOSCRIPT (a restart).
        self._append_script = self._client.register_script(scripts.APPEND)
        self._reader: Client | None = None  # read_record runs on callers' threads
        self._reader_lock = threading.Lock()
        self.after_loss: collections.Counter[str] = collections.Counter()

    # ---- appends ---------------------------------------------------------------------------

    def commit(self, batch: Batch) -> CommitResult:
        answer = self._append(batch.records, batch.lines, NO_SEGMENT)
        if answer is COMMITTED:
            feed_mirror(self.mirror, self.partition, "extend", batch.lines, batch.records)
        return answer

    def start_segment(self, start: StartSegment) -> CommitResult:
        segment: tuple[Any, ...] = NO_SEGMENT
        if start.checkpoint is not None:  # not segment 0's header: a segment was sealed
            payload = start.record.payload
            assert isinstance(payload, dict)  # the sequencer's segment.open
            root = base64.b64decode(payload["prev_segment_root"])
            segment = (start.number - 1, root, start.record.seq, start.checkpoint)
        answer = self._append([start.record], [start.line], segment)
        if answer is COMMITTED:
            feed_mirror(self.mirror, self.partition, "extend", [start.line], [start.record])
            if start.checkpoint is not None:
                feed_mirror(self.mirror, self.partition, "install_checkpoint", start.checkpoint)
        return answer

    def _append(
        self, records: list[Record], lines: list[bytes], segment: tuple[Any, ...]
    ) -> CommitResult:
        """Run one fenced append; on a lost connection decide from the head (module doc)."""
        first, last = records[0], records[-1]
        while True:
            if not self.lease.valid():
                return Refused(LEASE_EXPIRED)
            lease = self.lease
            args = [
                lease.epoch,
                lease.owner,
                round(lease.seconds * 1000),
                first.seq,
                bytes.fromhex(first.prev),
                bytes.fromhex(last.h),
                len(lines),
                *segment,
                *lines,
            ]
            started = time.monotonic()
            try:
                moved = self._append_script(keys=self._keys, args=args, client=self._writer())
            except self._redis.ResponseError as exc:
                raise StoreError(f"partition {self.partition}: {one_line(exc)}") from None
            except (self._redis.ConnectionError, self._redis.TimeoutError, StoreError) as exc:
                self._drop_writer()
                decision = self._decide_after_loss(first, last, lines[-1], started, exc)
                if decision == "resend":
                    continue
                return decision
            if moved == 1:
                return committed(self.lease, started, self.fsync_observer, len(lines))
            return self._refused()

    def _decide_after_loss(
        self, first: Record, last: Record, last_line: bytes, started: float, exc: BaseException
    ) -> CommitResult | Literal["resend"]:
        """After a connection lost mid-commit: COMMITTED, "resend", Refused or Unknown
        (shared/fencing.py retries the head's read while the lease lasts)."""

        def decide() -> CommitResult | Literal["resend"]:
            client = self._writer()
            last_seq, last_h, epoch, owner = client.hmget(
                keys.head(self.partition), ["last_seq", "last_h", "epoch", "owner"]
            )
            if int(last_seq) >= last.seq:
                held = RedisReader(client).lines_at(self.partition, [last.seq]).get(last.seq)
                if held == last_line:
                    self.lease.extend_from(started)  # the script renewed it, too
                    return COMMITTED
            ours = int(epoch) == self.lease.epoch and owner.decode() == self.lease.owner
            if (
                ours
                and int(last_seq) == first.seq - 1
                and bytes(last_h) == bytes.fromhex(first.prev)
            ):
                return "resend"
            self.lease.lose()
            return Refused(owner.decode() or "nobody")

        lost = (self._redis.ConnectionError, self._redis.TimeoutError, StoreError)
        return decide_after_loss(self.lease, exc, decide, lost, self._drop_writer, self.after_loss)

    def _refused(self) -> Refused:
        """Answer 0: the head is not ours any more (or not where we think it is)."""
        self.lease.lose()
        try:
            owner, epoch = self._writer().hmget(keys.head(self.partition), ["owner", "epoch"])
        except (self._redis.RedisError, StoreError):
            self._drop_writer()
            return Refused("unknown (the store did not answer)")
        name, number = owner.decode(), int(epoch)
        if name == self.lease.owner and number == self.lease.epoch:
            return Refused(f"{name} (this replica, epoch {number}, but the head moved)")
        return Refused(f"{name or 'nobody'} (epoch {number})")

    # ---- checkpoints, reads, redaction -----------------------------------------------------

    def install_checkpoint(self, checkpoint: SignedCheckpoint) -> None:
        def insert(client: Client) -> None:
            done = client.eval(
                scripts.CHECKPOINT,
                3,
                keys.head(self.partition),
                keys.checkpoints(self.partition),
                keys.checkpoint_sizes(self.partition),
                self.lease.epoch,
                self.lease.owner,
                checkpoint.size,
                checkpoint.text,
            )
            if done == 0:
                self._fenced(client)

        self._retrying(insert)
        feed_mirror(self.mirror, self.partition, "install_checkpoint", checkpoint.text)

    def read_record(self, seq: int) -> Record:
        with self._reader_lock:
            for attempt in (1, 2):
                try:
                    if self._reader is None:
                        self._reader = connect(self.url, self._timeout)
                    line = RedisReader(self._reader).lines_at(self.partition, [seq]).get(seq)
                    break
                except (self._redis.ConnectionError, self._redis.TimeoutError) as exc:
                    self._reader, reader = None, self._reader
                    if reader is not None:
                        reader.close()
                    if attempt == 2:
                        raise StoreError(f"the store did not give seq {seq}: {exc}") from exc
        if line is None:
            raise InvalidInput(f"seq {seq} is not in partition {self.partition}'s log")
        return Record.from_line(line)

    def rewrite_redacted(self, rewrite: RedactionRewrite) -> None:
        """Replace the targets' lines by their redacted lines in one fenced script, then ask
        the server to rewrite its append-only file, so the erased bytes leave it too."""
        targets = {
            seq: rs for per_segment in rewrite.targets.values() for seq, rs in per_segment.items()
        }

        def rewrite_lines(client: Client) -> None:
            held = RedisReader(client).lines_at(self.partition, sorted(targets))
            pairs: list[Any] = []
            for seq, redaction_seq in sorted(targets.items()):
                if seq not in held:
                    raise InvalidInput(f"seq {seq} is not in partition {self.partition}'s log")
                record = Record.from_line(held[seq])
                if record.has_payload:  # a retry after a lost reply finds it done
                    pairs += [seq, record.redacted_line(redaction_seq) + b"\n"]
            if not pairs:
                return
            done = client.eval(
                scripts.REDACT,
                3,
                keys.head(self.partition),
                keys.log(self.partition),
                keys.erased(self.partition),
                self.lease.epoch,
                self.lease.owner,
                *pairs,
            )
            if done == 0:
                self._fenced(client)
            with contextlib.suppress(self._redis.ResponseError):  # one is running already
                client.bgrewriteaof()

        self._retrying(rewrite_lines)

    def abandon(self) -> None:
        pass  # an append is one script: nothing half-written to drop

    def close(self) -> None:
        for client in (self._client, self._reader):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        self._client = self._reader = None

    # ---- connections -----------------------------------------------------------------------

    def _writer(self) -> Client:
        if self._client is None:
            self._client = connect(self.url, self._timeout)
        return self._client

    def _drop_writer(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _fenced(self, client: Client) -> None:
        owner, epoch = client.hmget(keys.head(self.partition), ["owner", "epoch"])
        self.lease.lose()
        name = f"{owner.decode()} (epoch {int(epoch)})" if owner else "nobody"
        raise Fenced(f"partition {self.partition} is led by {name} now", name)

    def _retrying(self, write: Callable[[Client], None]) -> None:
        """Run an idempotent fenced write, reconnecting while the lease lasts; once the lease's
        local deadline has passed, the answer is a refusal (shared/fencing.py's retry_fenced)."""
        lost = (self._redis.ConnectionError, self._redis.TimeoutError, StoreError)
        retry_fenced(
            self.partition,
            self.lease,
            lambda: write(self._writer()),
            lost,
            self._redis.RedisError,
            self._drop_writer,
        )
