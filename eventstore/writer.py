"""The single writer of a log directory: recovery on open, group commit, rotation, checkpoints.

Appending has two halves. `submit()` runs on the caller's thread under a short lock that does no
I/O: it assigns seqs, hashes, builds the lines (rotating segments on the way) and queues them, so
the caller knows its records at once and commands can apply them in seq order. One thread owned
by the writer then drains everything queued while it was busy, writes it, and makes it durable
with one fdatasync (group commit) before acknowledging any of it: threads wait on a lock, asyncio
tasks on a future, so the event loop never blocks on disk.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path

import orjson

from . import layout, segfile
from .atomic import fsync_dir
from .checkpoint import CheckpointError, SigningKey, parse_checkpoint, sign_checkpoint
from .errors import BadKey, CorruptLog, InvalidInput, InvalidPayload, StalePosition, WriterClosed
from .identifiers import CONTROL_TENANT, check_event_identifiers
from .jcs import canonical
from .lockfile import WriterLock
from .merkle import CompactRange
from .record import FORMAT_NAME, MAX_LINE_BYTES, Record, genesis, new_record
from .recovery import scan_tail

_sha256 = hashlib.sha256


DEFAULT_SEG_BITS = 16
# A line is at most 16 MiB; the envelope (identifiers up to 128 bytes, hashes) stays under 1 KiB.
MAX_PAYLOAD_BYTES = MAX_LINE_BYTES - 1024


class Durability(Enum):
    FSYNC = "fsync"
    # Acknowledges before the bytes reach stable storage. Tests and benchmarks only: a crash
    # loses acknowledged records. The name is long so that nobody picks it by accident.
    UNSAFE_NO_FSYNC = "unsafe-no-fsync"


class Entry:
    """One record to append, already checked: identifiers valid, payload in JCS form."""

    __slots__ = ("tenant", "session", "section", "type", "payload", "jcs", "_ident")

    def __init__(self, tenant: str, session: str, section: str, type_: str, payload: object):
        check_event_identifiers(tenant, session, section, type_)
        self.tenant, self.session, self.section, self.type = tenant, session, section, type_
        self.payload = payload
        self.jcs = canonical(payload)
        if len(self.jcs) > MAX_PAYLOAD_BYTES:
            raise InvalidPayload(
                f"the payload is {len(self.jcs)} bytes in JCS form; a record's line is at most 16 MiB, "
                f"so payloads are limited to {MAX_PAYLOAD_BYTES} bytes: keep large data outside the log"
            )

    @classmethod
    def control(cls, type_: str, payload: dict) -> Entry:
        entry = cls.__new__(cls)
        entry.tenant = entry.session = entry.section = CONTROL_TENANT
        entry.type, entry.payload, entry.jcs = type_, payload, canonical(payload)
        return entry


def _as_entry(item: Entry | Sequence) -> Entry:
    return item if isinstance(item, Entry) else Entry(*item)


class Pending:
    """Records that have their seqs but may not be durable yet. `wait()` until they are."""

    __slots__ = ("records", "_done", "_error", "_mutex", "_loop", "_future")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._done = threading.Lock()
        self._done.acquire()  # released by the writer thread once the records are durable
        self._error: BaseException | None = None
        self._mutex = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future | None = None

    def wait(self, timeout: float = -1) -> list[Record]:
        """Block until the records are durable; raise if they never will be."""
        if not self._done.acquire(timeout=timeout):
            raise TimeoutError("the records are not durable yet")
        self._done.release()  # leave it open for other waiters
        if self._error is not None:
            raise self._error
        return self.records

    async def wait_async(self) -> list[Record]:
        with self._mutex:
            if self._done.locked():
                self._loop = asyncio.get_running_loop()
                self._future = self._loop.create_future()
            future = self._future if self._done.locked() else None
        if future is not None:
            await future
        if self._error is not None:
            raise self._error
        return self.records

    def _complete(self, error: BaseException | None) -> tuple | None:
        """Called on the writer thread; returns (loop, future) to settle, if an async waiter is."""
        with self._mutex:
            self._error = error
            self._done.release()
            if self._future is not None:
                return self._loop, self._future
        return None


class _Lines:
    """Lines to append to the current segment."""

    __slots__ = ("data", "records", "leaves", "pending")

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.records: list[Record] = []
        self.leaves: list[bytes] = []
        self.pending: Pending | None = None


class _Segment:
    """Start segment `number` (the lines before are durable by then) with its segment.open line."""

    __slots__ = ("number", "line", "record", "leaf", "checkpoint", "create")

    def __init__(
        self,
        number: int,
        line: bytes,
        record: Record,
        leaf: bytes,
        checkpoint: str | None,
        create: bool,
    ):
        self.number, self.line, self.record, self.leaf = number, line, record, leaf
        self.checkpoint, self.create = checkpoint, create


class _Control:
    """Work for the writer thread after everything before it is durable: checkpoint, redact, close."""

    __slots__ = ("kind", "args", "pending")

    def __init__(self, kind: str, args: object = None, pending: Pending | None = None) -> None:
        self.kind, self.args, self.pending = kind, args, pending


class LogWriter:
    """Append-only writer of one log directory. Use `open()`; always `close()`."""

    def __init__(self) -> None:
        raise TypeError("use LogWriter.open()")

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        log_dir: str | os.PathLike[str],
        key: SigningKey,
        *,
        seg_bits: int = DEFAULT_SEG_BITS,
        durability: Durability = Durability.FSYNC,
        checkpoint_interval: float = 1.0,
        create: bool = True,
        clock: Callable[[], int] = time.time_ns,
    ) -> LogWriter:
        """Open a log for writing, creating it or recovering it (log-format.md section 8)."""
        self = object.__new__(cls)
        self.log_dir = Path(log_dir)
        self.key = key
        self.origin = key.origin
        self.durability = durability
        self.checkpoint_interval = checkpoint_interval
        self._clock = clock
        self._listeners: list[Callable[[list[Record]], None]] = []
        # _assign guards seq assignment (callers' threads, no I/O); _cond guards the queue.
        self._assign = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Lines | _Segment | _Control] = []
        self._redacting = threading.Lock()
        self._closing = False
        self._closed = False
        self._finished = False
        self._failed: BaseException | None = None
        self._salts = b""
        self._salt_offset = 0
        self._fd = -1
        self._durable_offset = 0
        self._wtree = CompactRange()  # the written tree: what checkpoints sign
        self._durable_size = 0
        self._cp_size = 0
        self._cp_time = 0.0
        self.last_resume: dict | None = None
        # Called on the writer thread with (seconds, lines) after each fdatasync: for metrics.
        self.fsync_observer: Callable[[float, int], None] | None = None
        if not 2 <= seg_bits <= 40:
            raise InvalidInput(f"seg_bits {seg_bits} is outside 2..40")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.log_dir / layout.LOCK)
        self._lock.acquire()
        try:
            segments = layout.list_segments(self.log_dir)
            if not segments:
                if not create:
                    raise CorruptLog(f"{self.log_dir} holds no log (no segment files)")
                self._remove_temporaries()
                self._create(seg_bits)
            else:
                self._recover(segments, seg_bits)
        except BaseException:
            self._close_fd()
            self._lock.release()
            raise
        self._thread = threading.Thread(target=self._run, name="ledgermem-writer", daemon=True)
        self._thread.start()
        return self

    def _remove_temporaries(self) -> None:
        # A crash mid-redaction or mid-checkpoint leaves a *.tmp beside the intact original.
        # Only called once the log is found sound: a refused open leaves every file as it was,
        # and a checkpoint.tmp may be evidence of records that have since gone missing.
        for entry in os.scandir(self.log_dir):
            if entry.name.endswith(".tmp") and entry.is_file():
                os.unlink(entry.path)

    def _set_geometry(self, seg_bits: int) -> None:
        self.seg_bits = seg_bits
        self._seg_size = 1 << seg_bits
        self._mask = self._seg_size - 1

    def _create(self, seg_bits: int) -> None:
        self._set_geometry(seg_bits)
        self._tree = CompactRange()
        self._seg_tree = CompactRange()
        self._size = 0
        self._prev = genesis(self.origin)
        self._segment = 0
        header = {
            "first_seq": 0,
            "format": FORMAT_NAME,
            "origin": self.origin,
            "seg_bits": seg_bits,
            "segment": 0,
            "vkey": str(self.key.vkey),
        }
        line, record, leaf = self._encode(Entry.control("segment.open", header), self.now())
        self._execute([_Segment(0, line, record, leaf, None, create=True)])
        self._write_checkpoint_file()

    def _recreate(self, path: Path, seg_bits: int) -> None:
        """Start again after a crash that left segment 0 without a complete header line.

        The first checkpoint is written only after the header is durable, so a `checkpoint`
        file means the header was complete once: then this is damage, not a crash leftover.
        """
        checkpoint = self.log_dir / layout.CHECKPOINT
        if checkpoint.exists():
            raise CorruptLog(
                f"{path} has no complete header line, but {checkpoint} exists, so the header "
                "was durable once: records behind a checkpoint are missing"
            )
        self._remove_temporaries()
        fragment = path.read_bytes()
        if fragment:
            self._quarantine(0, 0, fragment)
        path.unlink()
        fsync_dir(self.log_dir)
        self._create(seg_bits)

    def _recover(self, segments: list[tuple[int, Path]], seg_bits: int) -> None:
        numbers = [n for n, _ in segments]
        if numbers != list(range(len(numbers))):
            raise CorruptLog(
                f"{self.log_dir}: segment numbers are not contiguous from 0: {numbers}"
            )
        if numbers == [0] and segfile.first_line(segments[0][1]) is None:
            self._recreate(segments[0][1], seg_bits)  # a crash while the log was being created
            return
        header = self._read_header(segments[0][1])
        self._set_geometry(header["seg_bits"])
        size_s = self._seg_size
        last_n, last_path = segments[-1]

        # 1. The compact range from the roots of the full segments before the last one.
        self._tree = CompactRange()
        for n in range(last_n):
            self._tree.append_subtree(size_s, self._segment_root(n, segments))
        prev = genesis(self.origin) if last_n == 0 else self._last_hash(segments[last_n - 1][1])

        # 2. Validate the last segment and find its crash leftover.
        data = last_path.read_bytes()
        scan = scan_tail(data, last_n * size_s, prev, self.seg_bits, last_path.name)
        survivors = last_n * size_s + scan.count

        # 3. Refuse when a checkpoint covers more than survives or disagrees with the records.
        newest = self._check_checkpoints(last_n, scan, survivors)
        self._remove_temporaries()  # from here on the files change

        torn_bytes, fragment_sha = 0, None
        if scan.leftover_offset is not None:
            fragment = data[scan.leftover_offset :]
            torn_bytes, fragment_sha = len(fragment), _sha256(fragment).hexdigest()
            self._quarantine(last_n, scan.leftover_offset, fragment)
            with open(last_path, "r+b") as f:
                f.truncate(scan.leftover_offset)
                os.fsync(f.fileno())

        # The state the next append continues from, on both sides of the queue.
        self._seg_tree = CompactRange()
        for leaf in scan.leaves:
            self._tree.append(leaf)
            self._seg_tree.append(leaf)
        self._size = survivors
        self._prev = scan.leaves[-1] if scan.leaves else prev
        self._segment = last_n
        self._wtree = self._tree.copy()
        self._durable_size = survivors
        self._open_segment_file(last_n, existing=True)
        self._cp_size = newest
        self._cp_time = time.monotonic()

        last_event = self._last_event(scan, segments)
        clean = (
            bool(last_event)
            and last_event["tenant"] == CONTROL_TENANT
            and last_event["type"] == "log.close"
        )
        if (
            last_event is not None
            and last_event["type"] == "redaction"
            and last_event["tenant"] == CONTROL_TENANT
        ):
            self._finish_redaction(last_event)
        ts = self.now()
        ops: list = []
        if scan.count == 0:  # the crash came between the seal and the next segment.open
            sealed_root = segment_root_from_files(self.log_dir, last_n - 1, size_s)
            ops.append(self._segment_open(ts, sealed_root, create=False))
        elif self._size & self._mask == 0:
            ops.append(self._next_segment(ts))  # the last segment is full and sealed
        resume = {
            "checkpoint_size": newest,
            "clean": clean,
            "fragment_sha256": fragment_sha,
            "torn_bytes": torn_bytes,
        }
        ops.extend(self._assign_entries([Entry.control("log.resume", resume)], ts, None))
        self._execute(ops)
        self.last_resume = resume
        self._write_checkpoint_file()

    def _read_header(self, path: Path) -> dict:
        line = segfile.first_line(path)
        try:
            header = orjson.loads(line)["payload"]  # type: ignore[arg-type]
            seg_bits, origin, vkey = header["seg_bits"], header["origin"], header["vkey"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise CorruptLog(f"{path}: the first line is not a segment 0 header") from None
        if origin != self.origin or vkey != str(self.key.vkey):
            raise BadKey(
                f"the signing key is for {self.key.vkey}, but {path} was made by {vkey}: "
                "use the key this log was created with"
            )
        if type(seg_bits) is not int or not 2 <= seg_bits <= 40:
            raise CorruptLog(f"{path}: seg_bits {seg_bits!r} is outside 2..40")
        return header

    def _segment_root(self, n: int, segments: list[tuple[int, Path]]) -> bytes:
        """Root of full segment n: from the next segment.open, or from the leaves themselves."""
        following = segfile.first_line(segments[n + 1][1])
        if following is not None:
            try:
                return base64.b64decode(orjson.loads(following)["payload"]["prev_segment_root"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                pass
        leaves = segfile.leaf_hashes(segments[n][1])
        if len(leaves) != self._seg_size:
            raise CorruptLog(f"{segments[n][1]} holds {len(leaves)} records, not {self._seg_size}")
        tree = CompactRange()
        for leaf in leaves:
            tree.append(leaf)
        return tree.root()

    def _last_hash(self, path: Path) -> bytes:
        lines = segfile.last_lines(path, 1)
        if not lines:
            raise CorruptLog(f"{path} is empty, but a later segment exists")
        obj = orjson.loads(lines[0])
        if obj.get("type") != "segment.seal":
            raise CorruptLog(f"{path} is followed by another segment but is not sealed")
        return bytes.fromhex(obj["h"])

    def _check_checkpoints(self, last_n: int, scan, survivors: int) -> int:
        newest = 0
        texts = []
        path = self.log_dir / layout.CHECKPOINT
        if path.exists():
            texts.append((path.name, path.read_text("utf-8")))
        if last_n > 0 and scan.first is not None:
            texts.append((f"segment.open@{scan.first['seq']}", scan.first["payload"]["checkpoint"]))
        for source, text in texts:
            try:
                cp = parse_checkpoint(text, self.key.vkey)
            except CheckpointError as exc:
                raise CorruptLog(f"{source} does not verify: {exc}") from None
            if cp.size > survivors:
                raise CorruptLog(
                    f"{source} covers {cp.size} records but only {survivors} survive in "
                    f"{layout.segment_name(last_n)}: records behind a checkpoint are missing"
                )
            if self._root_at(cp.size, last_n, scan) != cp.root:
                raise CorruptLog(
                    f"{source} (size {cp.size}) disagrees with the records' Merkle root"
                )
            newest = max(newest, cp.size)
        return newest

    def _root_at(self, size: int, last_n: int, scan) -> bytes:
        first_of_last = last_n * self._seg_size
        if size >= first_of_last:
            tree = self._tree.copy()
            for leaf in scan.leaves[: size - first_of_last]:
                tree.append(leaf)
            return tree.root()
        # An older checkpoint: rebuild from the segment roots and the leaves of one segment.
        segments = layout.list_segments(self.log_dir)
        tree = CompactRange()
        whole, rest = divmod(size, self._seg_size)
        for n in range(whole):
            tree.append_subtree(self._seg_size, self._segment_root(n, segments))
        for leaf in segfile.leaf_hashes(segments[whole][1])[:rest]:
            tree.append(leaf)
        return tree.root()

    def _quarantine(self, segment: int, offset: int, fragment: bytes) -> None:
        qdir = self.log_dir / layout.QUARANTINE
        if not qdir.is_dir():
            qdir.mkdir()
            fsync_dir(self.log_dir)  # else a power loss can drop the new directory
        name = layout.quarantine_name(segment, offset, set(os.listdir(qdir)))
        fd = os.open(qdir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(fragment)
            while view:  # the segment is cut right after: every byte must be in the copy
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(qdir)

    def _last_event(self, scan, segments: list[tuple[int, Path]]) -> dict | None:
        """The last record that is not segment.seal/open, parsed."""
        last_event = scan.last_event
        if last_event is None and len(segments) > 1:
            lines = segfile.last_lines(segments[-2][1], 2)
            last_event = orjson.loads(lines[0]) if len(lines) == 2 else None
        return last_event

    def _finish_redaction(self, redaction: dict) -> None:
        """Complete a redaction that a crash interrupted between its record and its rewrite.

        Nothing is appended after a redaction record until its rewrite is done, so an unfinished
        one is always the last record. Its targets' payloads are removed now, as it asked.
        """
        self._write_checkpoint_file()  # a checkpoint covers the redaction before any rewrite
        by_segment: dict[int, dict[int, int]] = {}
        for target in redaction["payload"]["targets"]:
            seq = target["seq"]
            if read_record(self.log_dir, seq, self.seg_bits).has_payload:
                by_segment.setdefault(seq >> self.seg_bits, {})[seq] = redaction["seq"]
        for n, targets in sorted(by_segment.items()):
            self._rewrite_segment(n, targets)

    # ---- appending -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Records durable in the log."""
        return self._durable_size

    @property
    def next_seq(self) -> int:
        """The seq the next submitted record gets (records in flight included)."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(
        self,
        entries: Iterable[Entry | Sequence],
        *,
        expected_size: int | None = None,
        ts: int | None = None,
    ) -> Pending:
        """Assign seqs to the entries and queue them; returns at once, without I/O.

        `expected_size` is compared with the log's size including records in flight: a stale
        one raises StalePosition and nothing is queued. `ts` stamps the records with a time the
        caller read from `now()` before deciding them (a decision that depends on the time, such
        as a dedup window, then agrees with the record); by default the clock is read here.
        """
        batch = [_as_entry(e) for e in entries]
        pending = Pending()
        if not batch:
            pending._complete(None)
            return pending
        with self._assign:
            self._check_open()
            if expected_size is not None and expected_size != self._size:
                raise StalePosition(expected_size, self._size)
            ops = self._assign_entries(batch, self.now() if ts is None else ts, pending)
            self._enqueue(ops)
        return pending

    def append(
        self, tenant: str, session: str, section: str, type_: str, payload: object,
        *, expected_size: int | None = None,
    ) -> Record:  # fmt: skip
        """Append one record; return it once it is durable."""
        entry = Entry(tenant, session, section, type_, payload)
        return self.submit([entry], expected_size=expected_size).wait()[0]

    def append_batch(
        self, entries: Iterable[Entry | Sequence], *, expected_size: int | None = None
    ) -> list[Record]:
        """Append records with consecutive seqs (rotation records aside); return them once durable."""
        return self.submit(entries, expected_size=expected_size).wait()

    async def append_async(
        self, tenant: str, session: str, section: str, type_: str, payload: object,
        *, expected_size: int | None = None,
    ) -> Record:  # fmt: skip
        entry = Entry(tenant, session, section, type_, payload)
        return (await self.submit([entry], expected_size=expected_size).wait_async())[0]

    async def append_batch_async(
        self, entries: Iterable[Entry | Sequence], *, expected_size: int | None = None
    ) -> list[Record]:
        return await self.submit(entries, expected_size=expected_size).wait_async()

    def redact(self, seqs: Iterable[int], reason: str, request: str | None = None) -> Record:
        """Erase the payloads of `seqs` (log-format.md section 9); return the redaction record.

        The redaction record is made durable and a checkpoint covering it is written before the
        segments are rewritten; the writer thread does the rewrite, so no append can land in a
        segment while it is being replaced.
        """
        seqs = sorted(set(seqs))
        payload: dict = {"reason": reason}
        if request is not None:
            payload["request"] = request
        # One redaction at a time, held until its rewrite is done: a second redaction of the
        # same target must find the payload gone, not queue a second redaction record.
        with self._redacting:
            self._check_open()
            for seq in seqs:
                if type(seq) is not int or not 0 <= seq < self._size:
                    raise InvalidInput(
                        f"cannot redact seq {seq!r}: the log holds seqs 0..{self._size - 1}"
                    )
            if not seqs:
                raise InvalidInput("a redaction needs at least one target seq")
            self.wait_for(seqs[-1])
            payload["targets"] = [self._redaction_target(seq) for seq in seqs]
            entry = Entry.control("redaction", payload)
            pending = Pending()
            with self._assign:
                self._check_open()
                ops = self._assign_entries([entry], self.now(), None)
                redaction = ops[-1].records[-1]  # type: ignore[union-attr]
                pending.records = [redaction]
                by_segment: dict[int, dict[int, int]] = {}
                for seq in seqs:
                    by_segment.setdefault(seq >> self.seg_bits, {})[seq] = redaction.seq
                ops.append(_Control("redact", by_segment, pending))
                self._enqueue(ops)
            return pending.wait()[0]

    async def redact_async(
        self, seqs: Iterable[int], reason: str, request: str | None = None
    ) -> Record:
        return await asyncio.to_thread(self.redact, seqs, reason, request)

    def checkpoint(self) -> None:
        """Write a signed checkpoint of everything durable now."""
        pending = Pending()
        with self._assign:
            self._check_open()
            self._enqueue([_Control("checkpoint", None, pending)])
        pending.wait()

    def add_listener(self, listener: Callable[[list[Record]], None]) -> None:
        """Call `listener(records)` on the writer thread after each durable batch. Keep it quick."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[list[Record]], None]) -> None:
        self._listeners.remove(listener)

    def wait_for(self, seq: int, timeout: float | None = None) -> bool:
        """Block until record `seq` is durable (the log holds more than `seq` records); False on
        timeout. Raises WriterClosed when a failed write means it never will be."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._durable_size > seq or self._finished or self._failed is not None,
                timeout,
            )
            if self._durable_size <= seq and self._failed is not None:
                raise WriterClosed(
                    f"record {seq} will never be durable: the writer stopped after a failed "
                    f"write ({self._failed}); reopen the log"
                )
            return done

    def close(self) -> None:
        """Append `log.close`, write the final checkpoint, release the lock."""
        with self._assign:
            already, self._closing = self._closing, True
            if not already:
                ops: list = []
                if self._failed is None:
                    ops = self._assign_entries([Entry.control("log.close", {})], self.now(), None)
                ops.append(_Control("close"))
                self._enqueue(ops)
        self._thread.join()
        if not already:
            self._close_fd()
            self._lock.release()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._failed is not None:
            raise WriterClosed(
                f"the writer stopped after a failed write ({self._failed}); reopen the log"
            )
        if self._closing:
            raise WriterClosed(f"the writer of {self.log_dir} is closed")

    def _enqueue(self, ops: list) -> None:
        with self._cond:
            self._queue.extend(ops)
            self._cond.notify()

    # ---- assigning seqs (callers' threads, under _assign) ----------------------------------

    def now(self) -> int:
        """The writer's clock in microseconds: what `ts` a record submitted now would carry."""
        return self._clock() // 1000

    def _salt(self) -> bytes:
        offset = self._salt_offset
        if offset + 16 > len(self._salts):
            self._salts, offset = os.urandom(16 * 1024), 0  # one syscall for a thousand salts
        self._salt_offset = offset + 16
        return self._salts[offset : offset + 16]

    def _encode(self, entry: Entry, ts: int) -> tuple[bytes, Record, bytes]:
        """The next record's line (with newline), the record and its leaf hash; advances the chain."""
        seq = self._size
        record, line, h = new_record(
            self._prev, seq, ts, entry.tenant, entry.session, entry.section, entry.type,
            self._salt(), entry.payload, entry.jcs,
        )  # fmt: skip
        self._tree.append(h)
        self._seg_tree.append(h)
        self._prev = h
        self._size = seq + 1
        return line, record, h

    def _assign_entries(self, entries: list[Entry], ts: int, pending: Pending | None) -> list:
        """Encode entries into writer ops, sealing and opening segments on the way."""
        ops: list = []
        lines = _Lines()
        for entry in entries:
            if self._size & self._mask == self._mask:
                seal = {
                    "first_seq": self._segment * self._seg_size,
                    "last_seq": self._size,
                    "root": base64.b64encode(self._tree.root()).decode(),
                    "segment": self._segment,
                }
                self._add_line(lines, Entry.control("segment.seal", seal), ts)
                ops.append(lines)
                ops.append(self._next_segment(ts))
                lines = _Lines()
            record = self._add_line(lines, entry, ts)
            if pending is not None:
                pending.records.append(record)
        lines.pending = pending
        ops.append(lines)
        return ops

    def _add_line(self, lines: _Lines, entry: Entry, ts: int) -> Record:
        line, record, leaf = self._encode(entry, ts)
        lines.data.append(line)
        lines.records.append(record)
        lines.leaves.append(leaf)
        return record

    def _next_segment(self, ts: int) -> _Segment:
        sealed_root = self._seg_tree.root()
        self._segment += 1
        self._seg_tree = CompactRange()
        return self._segment_open(ts, sealed_root, create=True)

    def _segment_open(self, ts: int, prev_segment_root: bytes, create: bool) -> _Segment:
        """The segment.open of `self._segment`, embedding the checkpoint of everything before it."""
        checkpoint = sign_checkpoint(self.key, self._size, self._tree.root())
        header = {
            "checkpoint": checkpoint,
            "first_seq": self._size,
            "format": FORMAT_NAME,
            "origin": self.origin,
            "prev_segment_root": base64.b64encode(prev_segment_root).decode(),
            "segment": self._segment,
        }
        line, record, leaf = self._encode(Entry.control("segment.open", header), ts)
        return _Segment(self._segment, line, record, leaf, checkpoint, create)

    # ---- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._finished:
            with self._cond:
                while not self._queue:
                    if not self._cond.wait(self._checkpoint_wait()):
                        break
                ops, self._queue = self._queue, []
            if ops:
                self._process(ops)
            if self._failed is None and not self._finished:
                self._checkpoint_if_due()

    def _process(self, ops: list) -> None:
        published: list[Record] = []
        error: BaseException | None = None
        if self._failed is None:
            try:
                self._execute(ops, published)
            except Exception as exc:  # an I/O error, or a bug: never leave a caller waiting
                self._fail(exc)
        if self._failed is not None:
            error = WriterClosed(
                f"the writer stopped after a failed write ({self._failed}); reopen the log"
            )
            published = []
            if any(type(op) is _Control and op.kind == "close" for op in ops):
                self._finished = True
        with self._cond:
            if self._finished:
                self._closed = True
            self._cond.notify_all()  # wake wait_for() callers
        if published:
            for listener in self._listeners:
                listener(published)
        self._settle(ops, error)

    def _execute(self, ops: list, published: list[Record] | None = None) -> None:
        """Write the ops in order; every line is durable when this returns."""
        data: list[bytes] = []
        leaves: list[bytes] = []
        for op in ops:
            kind = type(op)
            if kind is _Lines:
                data.extend(op.data)
                leaves.extend(op.leaves)
                if published is not None:
                    published.extend(op.records)
                continue
            self._write_durable(data, leaves)
            data, leaves = [], []
            if kind is _Segment:
                self._start_segment(op)
                if published is not None:
                    published.append(op.record)
            elif op.kind == "checkpoint":
                self._write_checkpoint_file()
            elif op.kind == "redact":
                self._write_checkpoint_file()  # it must cover the redaction record
                for n, targets in sorted(op.args.items()):
                    self._rewrite_segment(n, targets)
            elif op.kind == "close":
                self._write_checkpoint_file()
                self._finished = True
        self._write_durable(data, leaves)

    def _settle(self, ops: list, error: BaseException | None) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for op in ops:
            pending = getattr(op, "pending", None)
            if pending is None:
                continue
            waiter = pending._complete(error)
            if waiter is not None:
                by_loop.setdefault(waiter[0], []).append((waiter[1], pending))
        for loop, futures in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
                loop.call_soon_threadsafe(_settle_futures, futures)

    def _fail(self, exc: BaseException) -> None:
        """Stop taking appends after a failed write, cutting the file back to what is durable."""
        self._failed = exc
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._durable_offset)

    # ---- files (the writer thread, or open() before it starts) -----------------------------

    def _write_durable(self, data: list[bytes], leaves: list[bytes]) -> None:
        if not data:
            return
        blob = b"".join(data)
        # One write of whole lines; a short one is a failed write (log-format.md section 7):
        # the caller cuts the file back to the last durable offset and stops taking appends.
        written = os.write(self._fd, blob)
        if written != len(blob):
            raise OSError(errno.EIO, f"short write: {written} of {len(blob)} bytes")
        if self.durability is Durability.FSYNC:
            started = time.perf_counter()
            os.fdatasync(self._fd)
            if self.fsync_observer is not None:
                self.fsync_observer(time.perf_counter() - started, len(data))
        self._durable_offset += len(blob)
        for leaf in leaves:
            self._wtree.append(leaf)
        self._durable_size = self._wtree.size

    def _start_segment(self, op: _Segment) -> None:
        """Open segment `op.number` with its segment.open line, durably (log-format.md §5)."""
        self._open_segment_file(op.number, existing=not op.create)
        self._write_durable([op.line], [op.leaf])
        fsync_dir(self.log_dir)
        if op.checkpoint is not None:
            self._install_checkpoint(op.checkpoint, op.record.seq)

    def _open_segment_file(self, n: int, existing: bool = False) -> None:
        path = self.log_dir / layout.segment_name(n)
        flags = os.O_WRONLY | os.O_APPEND | (0 if existing else os.O_CREAT | os.O_EXCL)
        fd = os.open(path, flags, 0o644)
        self._close_fd()
        self._fd = fd
        self._file_segment = n
        self._durable_offset = os.fstat(fd).st_size

    def _close_fd(self) -> None:
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            self._fd = -1
            os.close(fd)

    # ---- checkpoints -----------------------------------------------------------------------

    def _checkpoint_wait(self) -> float | None:
        if self._durable_size <= self._cp_size or self._failed is not None:
            return None
        return max(0.0, self._cp_time + self.checkpoint_interval - time.monotonic())

    def _checkpoint_if_due(self) -> None:
        if (
            self._durable_size > self._cp_size
            and time.monotonic() - self._cp_time >= self.checkpoint_interval
        ):
            try:
                self._write_checkpoint_file()
            except OSError as exc:
                self._fail(exc)

    def _write_checkpoint_file(self) -> None:
        """Sign everything durable and replace `checkpoint` atomically."""
        size = self._durable_size
        self._install_checkpoint(sign_checkpoint(self.key, size, self._wtree.root()), size)

    def _install_checkpoint(self, text: str, size: int) -> None:
        tmp = self.log_dir / (layout.CHECKPOINT + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
            if self.durability is Durability.FSYNC:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.log_dir / layout.CHECKPOINT)
        if self.durability is Durability.FSYNC:
            fsync_dir(self.log_dir)
        self._cp_size = max(size, self._cp_size)
        self._cp_time = time.monotonic()

    # ---- redaction -------------------------------------------------------------------------

    def _redaction_target(self, seq: int) -> dict:
        record = read_record(self.log_dir, seq, self.seg_bits)
        if record.is_control:
            raise InvalidInput(
                f"seq {seq} is a control record ({record.type}); those cannot be redacted"
            )
        if not record.has_payload:
            raise InvalidInput(f"seq {seq} is already redacted (by seq {record.redacted})")
        return {"pd": record.pd, "seq": seq}

    def _rewrite_segment(self, n: int, targets: dict[int, int]) -> None:
        """Write the redacted segment beside the old one, then rename it over (crash-safe)."""
        path = self.log_dir / layout.segment_name(n)
        tmp = path.with_name(path.name + ".tmp")
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                seq = _seq_of(line)
                if seq in targets:
                    line = Record.from_line(line).redacted_line(targets[seq]) + b"\n"
                dst.write(line)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, path)
        fsync_dir(self.log_dir)
        # Readers notice the new file by its inode and size and rebuild their seek index.
        if n == self._file_segment:
            self._open_segment_file(n, existing=True)  # appends must go to the new file


def _seq_of(line: bytes) -> int:
    start = line.index(b'"seq":') + 6
    return int(line[start : line.index(b",", start)])


def _settle_futures(futures: list[tuple[asyncio.Future, Pending]]) -> None:
    for future, pending in futures:
        if future.done():
            continue
        if pending._error is not None:
            future.set_exception(pending._error)
        else:
            future.set_result(None)


def read_record(log_dir: Path, seq: int, seg_bits: int) -> Record:
    """Read one record by seq from the files (a scan of its segment; the reader has an index)."""
    path = log_dir / layout.segment_name(seq >> seg_bits)
    for _, line in segfile.iter_lines(path):
        if _seq_of(line) == seq:
            return Record.from_line(line)
    raise InvalidInput(f"seq {seq} is not in {path.name}")


def segment_root_from_files(log_dir: Path, n: int, seg_size: int) -> bytes:
    leaves = segfile.leaf_hashes(log_dir / layout.segment_name(n))
    tree = CompactRange()
    for leaf in leaves[:seg_size]:
        tree.append(leaf)
    return tree.root()
