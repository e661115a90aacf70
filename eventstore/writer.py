"""The single writer of a log directory: recovery on open, group commit, rotation, checkpoints.

All file work happens on one thread that the writer owns. Callers hand it requests and wait:
threads on a lock, asyncio tasks on a future, so the event loop never blocks on disk. The
thread drains every request that arrived while it was busy, writes their lines, and makes them
durable with one fdatasync (group commit) before it acknowledges any of them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path

import orjson

from . import layout, segfile
from .checkpoint import CheckpointError, SigningKey, parse_checkpoint, sign_checkpoint
from .errors import BadKey, CorruptLog, InvalidInput, StalePosition, WriterClosed
from .identifiers import CONTROL_TENANT, check_event_identifiers
from .jcs import canonical
from .lockfile import WriterLock
from .merkle import CompactRange
from .record import FORMAT_NAME, PAY_TAG, REC_TAG, Record, encode_line, genesis
from .recovery import scan_tail

_sha256 = hashlib.sha256
_u64_i64 = struct.Struct(">Qq").pack
DEFAULT_SEG_BITS = 16


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

    @classmethod
    def control(cls, type_: str, payload: dict) -> Entry:
        entry = cls.__new__(cls)
        entry.tenant = entry.session = entry.section = CONTROL_TENANT
        entry.type, entry.payload, entry.jcs = type_, payload, canonical(payload)
        return entry


def _as_entry(item: Entry | Sequence) -> Entry:
    return item if isinstance(item, Entry) else Entry(*item)


class _Request:
    __slots__ = (
        "kind",
        "entries",
        "expected_size",
        "args",
        "result",
        "error",
        "waiter",
        "loop",
        "future",
    )

    def __init__(
        self, kind: str, entries: list[Entry], expected_size: int | None = None, args=None
    ):
        self.kind = kind
        self.args = args
        self.entries = entries
        self.expected_size = expected_size
        self.result: object = None
        self.error: BaseException | None = None
        self.waiter = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future | None = None


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
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[_Request] = []
        self._closing = False
        self._closed = False
        self._failed: BaseException | None = None
        self._salts = b""
        self._unpublished: list[Record] = []  # durable soon; handed to listeners after the fsync
        self.last_resume: dict | None = None
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
        self._fd = -1
        self._open_segment_file(0)
        header = {
            "first_seq": 0,
            "format": FORMAT_NAME,
            "origin": self.origin,
            "seg_bits": seg_bits,
            "segment": 0,
            "vkey": str(self.key.vkey),
        }
        self._write_durable([self._encode(Entry.control("segment.open", header), self._now())[0]])
        layout.fsync_dir(self.log_dir)
        self._cp_size = 0
        self._cp_time = 0.0
        self._write_checkpoint_file()
        self._durable_size = self._size
        self._unpublished.clear()  # durable before anyone could listen: readers find them in the files

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
        layout.fsync_dir(self.log_dir)
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

        # The state the next append continues from.
        self._seg_tree = CompactRange()
        for leaf in scan.leaves:
            self._tree.append(leaf)
            self._seg_tree.append(leaf)
        self._size = survivors
        self._prev = scan.leaves[-1] if scan.leaves else prev
        self._segment = last_n
        self._fd = -1
        self._open_segment_file(last_n, existing=True)
        self._cp_size = newest
        self._cp_time = time.monotonic()

        clean = self._was_clean(scan, segments)
        ts = self._now()
        if scan.count == 0:  # the crash came between the seal and the next segment.open
            self._write_open_record(ts, segment_root_from_files(self.log_dir, last_n - 1, size_s))
        elif self._size & self._mask == 0:
            self._rotate_after_seal(ts)  # the last segment is full and sealed
        resume = {
            "checkpoint_size": newest,
            "clean": clean,
            "fragment_sha256": fragment_sha,
            "torn_bytes": torn_bytes,
        }
        lines = self._encode_entries([Entry.control("log.resume", resume)], ts, [])
        self._write_durable(lines)
        self.last_resume = resume
        self._write_checkpoint_file()
        self._durable_size = self._size
        self._unpublished.clear()  # durable before anyone could listen: readers find them in the files

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
            layout.fsync_dir(self.log_dir)  # else a power loss can drop the new directory
        name = layout.quarantine_name(segment, offset, set(os.listdir(qdir)))
        fd = os.open(qdir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(fragment)
            while view:  # the segment is cut right after: every byte must be in the copy
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        layout.fsync_dir(qdir)

    def _was_clean(self, scan, segments: list[tuple[int, Path]]) -> bool:
        last_event = scan.last_event
        if last_event is None and len(segments) > 1:
            lines = segfile.last_lines(segments[-2][1], 2)
            last_event = orjson.loads(lines[0]) if len(lines) == 2 else None
        return (
            bool(last_event)
            and last_event["tenant"] == CONTROL_TENANT
            and last_event["type"] == "log.close"
        )

    # ---- appending -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Records durable in the log: the next record's seq."""
        return self._durable_size

    @property
    def closed(self) -> bool:
        return self._closed

    def append(
        self, tenant: str, session: str, section: str, type_: str, payload: object,
        *, expected_size: int | None = None,
    ) -> Record:  # fmt: skip
        """Append one record; return it once it is durable."""
        entry = Entry(tenant, session, section, type_, payload)
        return self._submit(_Request("append", [entry], expected_size))[0]  # type: ignore[index]

    def append_batch(
        self, entries: Iterable[Entry | Sequence], *, expected_size: int | None = None
    ) -> list[Record]:
        """Append records in order, with consecutive seqs; return them once all are durable."""
        batch = [_as_entry(e) for e in entries]
        if not batch:
            return []
        return self._submit(_Request("append", batch, expected_size))  # type: ignore[return-value]

    async def append_async(
        self, tenant: str, session: str, section: str, type_: str, payload: object,
        *, expected_size: int | None = None,
    ) -> Record:  # fmt: skip
        entry = Entry(tenant, session, section, type_, payload)
        records = await self._submit_async(_Request("append", [entry], expected_size))
        return records[0]

    async def append_batch_async(
        self, entries: Iterable[Entry | Sequence], *, expected_size: int | None = None
    ) -> list[Record]:
        batch = [_as_entry(e) for e in entries]
        if not batch:
            return []
        return await self._submit_async(_Request("append", batch, expected_size))

    def redact(self, seqs: Iterable[int], reason: str, request: str | None = None) -> Record:
        """Erase the payloads of `seqs` (log-format.md section 9); return the redaction record."""
        payload: dict = {"reason": reason}
        if request is not None:
            payload["request"] = request
        return self._submit(_Request("redact", [], None, (sorted(set(seqs)), payload)))  # type: ignore[return-value]

    async def redact_async(
        self, seqs: Iterable[int], reason: str, request: str | None = None
    ) -> Record:
        payload: dict = {"reason": reason}
        if request is not None:
            payload["request"] = request
        return await self._submit_async(_Request("redact", [], None, (sorted(set(seqs)), payload)))

    def checkpoint(self) -> None:
        """Write a signed checkpoint of everything durable now."""
        self._submit(_Request("checkpoint", []))

    def add_listener(self, listener: Callable[[list[Record]], None]) -> None:
        """Call `listener(records)` on the writer thread after each durable batch. Keep it quick."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[list[Record]], None]) -> None:
        self._listeners.remove(listener)

    def wait_for(self, size: int, timeout: float | None = None) -> bool:
        """Block until the log holds more than `size` records; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._durable_size > size or self._closed, timeout)

    def close(self) -> None:
        """Append `log.close`, write the final checkpoint, release the lock."""
        with self._cond:
            if self._closing:
                already = True
            else:
                already, self._closing = False, True
            self._cond.notify_all()
        if already:
            self._thread.join()
            return
        self._thread.join()
        self._close_fd()
        self._lock.release()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, req: _Request) -> object:
        waiter = threading.Lock()
        waiter.acquire()
        req.waiter = waiter
        self._enqueue(req)
        waiter.acquire()
        if req.error is not None:
            raise req.error
        return req.result

    async def _submit_async(self, req: _Request):
        loop = asyncio.get_running_loop()
        req.loop, req.future = loop, loop.create_future()
        self._enqueue(req)
        return await req.future

    def _enqueue(self, req: _Request) -> None:
        with self._cond:
            if self._closing or self._failed is not None:
                raise self._refusal()
            self._pending.append(req)
            self._cond.notify()

    def _refusal(self) -> WriterClosed:
        if self._failed is not None:
            return WriterClosed(
                f"the writer stopped after a failed write ({self._failed}); reopen the log"
            )
        return WriterClosed(f"the writer of {self.log_dir} is closed")

    # ---- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    if not self._cond.wait(self._checkpoint_wait()):
                        break
                batch, self._pending = self._pending, []
                closing = self._closing
            if batch:
                self._process(batch)
            if self._failed is None:
                self._checkpoint_if_due()
            if closing:
                with self._cond:
                    leftover, self._pending = self._pending, []
                if leftover:
                    self._process(leftover)
                self._finish()
                return

    def _process(self, batch: list[_Request]) -> None:
        if self._failed is not None:
            for req in batch:
                req.error = self._refusal()
            self._settle(batch)
            return
        ts = self._now()
        lines: list[bytes] = []
        records: list[Record] = []
        done: list[_Request] = []
        try:
            for req in batch:
                if req.kind == "append":
                    if req.expected_size is not None and req.expected_size != self._size:
                        req.error = StalePosition(req.expected_size, self._size)
                        continue
                    first = len(records)
                    lines = self._encode_entries(req.entries, ts, lines, records)
                    req.result = records[first:]
                elif req.kind == "redact":
                    self._write_durable(lines)
                    lines = []
                    self._redact(req, ts, records)
                elif req.kind == "checkpoint":
                    self._write_durable(lines)
                    lines = []
                    self._write_checkpoint_file()
                done.append(req)
            self._write_durable(lines)
        except Exception as exc:  # an I/O error, or a bug: never leave a caller waiting
            self._fail(exc)
            for req in batch:
                req.error = self._refusal()
            self._settle(batch)
            return
        self._publish()
        self._settle(batch)

    def _publish(self) -> None:
        """Tell waiters and listeners about every record made durable since the last call."""
        with self._cond:
            self._durable_size = self._size
            self._cond.notify_all()  # wake wait_for() callers
        records, self._unpublished = self._unpublished, []
        if records:
            for listener in self._listeners:
                listener(records)

    def _settle(self, batch: list[_Request]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Request]] = {}
        for req in batch:
            if req.loop is None:
                req.waiter.release()  # type: ignore[union-attr]
            else:
                by_loop.setdefault(req.loop, []).append(req)
        for loop, reqs in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
                loop.call_soon_threadsafe(_settle_futures, reqs)

    def _fail(self, exc: BaseException) -> None:
        """Stop taking appends after a failed write, cutting the file back to what is durable."""
        self._failed = exc
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._durable_offset)

    def _finish(self) -> None:
        try:
            if self._failed is None:
                ts = self._now()
                lines = self._encode_entries([Entry.control("log.close", {})], ts, [])
                self._write_durable(lines)
                self._write_checkpoint_file()
                self._publish()
        except OSError as exc:
            self._fail(exc)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    # ---- encoding and files ----------------------------------------------------------------

    def _now(self) -> int:
        return self._clock() // 1000

    def _salt(self) -> bytes:
        if len(self._salts) < 16:
            self._salts = os.urandom(16 * 1024)  # one syscall for a thousand salts
        salt, self._salts = self._salts[:16], self._salts[16:]
        return salt

    def _encode(self, entry: Entry, ts: int) -> tuple[bytes, Record]:
        """The next record's line (with newline); advances seq, prev and the Merkle trees."""
        seq = self._size
        salt = self._salt()
        pd = _sha256(PAY_TAG + salt + entry.jcs).digest()
        t, s, c, y = (x.encode() for x in (entry.tenant, entry.session, entry.section, entry.type))
        h = _sha256(
            b"\x00" + REC_TAG + self._prev + _u64_i64(seq, ts)
            + len(t).to_bytes(2, "big") + t + len(s).to_bytes(2, "big") + s
            + len(c).to_bytes(2, "big") + c + len(y).to_bytes(2, "big") + y + pd
        ).digest()  # fmt: skip
        prev_hex, h_hex, pd_hex, salt_hex = self._prev.hex(), h.hex(), pd.hex(), salt.hex()
        line = encode_line(
            seq, ts, entry.tenant, entry.session, entry.section, entry.type,
            prev_hex, h_hex, pd_hex, salt_hex, entry.jcs,
        )  # fmt: skip
        record = Record(
            seq, ts, entry.tenant, entry.session, entry.section, entry.type,
            prev_hex, h_hex, pd_hex, salt_hex, entry.payload, None, line,
        )  # fmt: skip
        self._tree.append(h)
        self._seg_tree.append(h)
        self._prev = h
        self._size = seq + 1
        self._unpublished.append(record)
        return line + b"\n", record

    def _encode_entries(
        self, entries: list[Entry], ts: int, lines: list[bytes], records: list[Record] | None = None
    ) -> list[bytes]:
        """Encode entries after `lines`, rotating segments on the way; returns the unwritten lines."""
        for entry in entries:
            if self._size & self._mask == self._mask:
                self._write_durable(lines)
                lines = []
                self._rotate(ts)
            line, record = self._encode(entry, ts)
            lines.append(line)
            if records is not None:
                records.append(record)
        return lines

    def _write_durable(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = b"".join(lines)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if self.durability is Durability.FSYNC:
            os.fdatasync(self._fd)
        self._durable_offset += len(data)

    def _rotate(self, ts: int) -> None:
        """Seal the full segment, then open the next one (log-format.md section 5)."""
        n = self._segment
        seal = {
            "first_seq": n * self._seg_size,
            "last_seq": self._size,
            "root": base64.b64encode(self._tree.root()).decode(),
            "segment": n,
        }
        line, _ = self._encode(Entry.control("segment.seal", seal), ts)
        self._write_durable([line])
        self._rotate_after_seal(ts)

    def _rotate_after_seal(self, ts: int) -> None:
        sealed_root = self._seg_tree.root()
        self._segment += 1
        self._seg_tree = CompactRange()
        self._open_segment_file(self._segment)
        self._write_open_record(ts, sealed_root)

    def _write_open_record(self, ts: int, prev_segment_root: bytes) -> None:
        n = self._segment
        checkpoint = sign_checkpoint(self.key, self._size, self._tree.root())
        header = {
            "checkpoint": checkpoint,
            "first_seq": self._size,
            "format": FORMAT_NAME,
            "origin": self.origin,
            "prev_segment_root": base64.b64encode(prev_segment_root).decode(),
            "segment": n,
        }
        line, _ = self._encode(Entry.control("segment.open", header), ts)
        self._write_durable([line])
        layout.fsync_dir(self.log_dir)
        self._install_checkpoint(checkpoint, self._size - 1)

    def _open_segment_file(self, n: int, existing: bool = False) -> None:
        path = self.log_dir / layout.segment_name(n)
        flags = os.O_WRONLY | os.O_APPEND | (0 if existing else os.O_CREAT | os.O_EXCL)
        fd = os.open(path, flags, 0o644)
        self._close_fd()
        self._fd = fd
        self._durable_offset = os.fstat(fd).st_size

    def _close_fd(self) -> None:
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            self._fd = -1
            os.close(fd)

    # ---- checkpoints -----------------------------------------------------------------------

    def _checkpoint_wait(self) -> float | None:
        if self._size <= self._cp_size or self._failed is not None:
            return None
        return max(0.0, self._cp_time + self.checkpoint_interval - time.monotonic())

    def _checkpoint_if_due(self) -> None:
        if (
            self._size > self._cp_size
            and time.monotonic() - self._cp_time >= self.checkpoint_interval
        ):
            try:
                self._write_checkpoint_file()
            except OSError as exc:
                self._fail(exc)

    def _write_checkpoint_file(self) -> None:
        """Sign everything durable and replace `checkpoint` atomically."""
        self._install_checkpoint(
            sign_checkpoint(self.key, self._size, self._tree.root()), self._size
        )

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
            layout.fsync_dir(self.log_dir)
        self._cp_size = max(size, getattr(self, "_cp_size", 0))
        self._cp_time = time.monotonic()

    # ---- redaction -------------------------------------------------------------------------

    def _redact(self, req: _Request, ts: int, records: list[Record]) -> None:
        seqs, payload = req.args
        try:
            targets = [self._redaction_target(seq) for seq in seqs]
            if not targets:
                raise InvalidInput("a redaction needs at least one target seq")
            payload["targets"] = targets
            entry = Entry.control("redaction", payload)
        except InvalidInput as exc:
            req.error = exc
            return
        lines = self._encode_entries([entry], ts, [], records)
        self._write_durable(lines)
        redaction = records[-1]
        self._write_checkpoint_file()  # the checkpoint must cover the redaction record
        by_segment: dict[int, dict[int, int]] = {}
        for target in targets:
            by_segment.setdefault(target["seq"] >> self.seg_bits, {})[target["seq"]] = redaction.seq
        for n, segment_targets in sorted(by_segment.items()):
            self._rewrite_segment(n, segment_targets)
        req.result = redaction

    def _redaction_target(self, seq: int) -> dict:
        if type(seq) is not int or not 0 <= seq < self._size:
            raise InvalidInput(f"cannot redact seq {seq!r}: the log holds seqs 0..{self._size - 1}")
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
        layout.fsync_dir(self.log_dir)
        index_path = self.log_dir / "index" / (layout.segment_name(n) + ".idx")
        index_path.unlink(missing_ok=True)
        if n == self._segment:
            self._open_segment_file(n, existing=True)  # appends must go to the new file


def _seq_of(line: bytes) -> int:
    start = line.index(b'"seq":') + 6
    return int(line[start : line.index(b",", start)])


def _settle_futures(reqs: list[_Request]) -> None:
    for req in reqs:
        future = req.future
        if future is None or future.done():
            continue
        if req.error is not None:
            future.set_exception(req.error)
        else:
            future.set_result(req.result)


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
