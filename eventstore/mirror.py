"""A replica's copy of one partition's log, as spec segment files (docs/scale-out.md).

With a shared store the truth is the table; every replica still keeps each partition's log as
ordinary segment files in its own data directory, so everything that reads a log directory
(`LogReader`, history, the hub's catch-up, the background verifier, `ledgermem verify`) works on
it unchanged. The mirror is written only from committed lines: the leader's sink hands it each
batch right after the database commit, and the store tail (eventstore/pg/tail.py) feeds it what
other replicas committed. Both may deliver the same lines, so `extend` skips what it already
holds after checking the `h` is the same.

It is a cache: it never fsyncs its appends (`flush` does, for an export). After a crash `open`
cuts whatever is not a sound continuation of the chain at the end of the last segment, and the
missing lines come back from the table. A line that does not continue the chain (a fork, a gap,
a damaged row) raises `MirrorDiverged` and changes nothing, so a mirror never holds a line that
the chain does not vouch for.

The mirror also stands in for a `LogWriter` in front of the fan-out hub: `size`,
`add_listener`, `remove_listener` and `wait_for` mean what they mean there, and listeners get
the new records in seq order after the bytes are in the files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from . import layout, redaction, segfile
from .atomic import fsync_dir, write_atomically
from .errors import CorruptLog, InvalidInput, LockHeld
from .filemodes import FILE_MODE, make_dir
from .linecheck import LineError, check_line
from .lockfile import WriterLock
from .record import REDACTION, Record, genesis

log = logging.getLogger("ledgermem.mirror")
Listener = Callable[[list[Record]], None]
RECENT_HASHES = 1 << 12  # h of the newest records kept in memory, for duplicate checks


class MirrorDiverged(CorruptLog):
    """Lines that do not continue the mirror's chain: a gap, a fork, or a damaged line."""


class Mirror:
    """One partition's log as spec segment files, written from committed lines (a cache)."""

    _file_lock: WriterLock  # `log_dir/LOCK`, held from open to close

    def __init__(self) -> None:
        raise TypeError("use Mirror.open()")

    # ---- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, log_dir: str | os.PathLike[str], origin: str, seg_bits: int) -> Mirror:
        """Open (creating) the mirror in `log_dir`, cutting an unsound tail of the last segment.

        The mirror holds `log_dir/LOCK` (flock, as a log's writer does) until `close`: a second
        mirror on the same directory, in this process or another (two replicas given one data
        directory), gets `LockHeld` before it reads or cuts anything."""
        self = object.__new__(cls)  # __init__ refuses: open() is the way in
        path = make_dir(Path(log_dir))
        lock = WriterLock(path / layout.LOCK)
        try:
            lock.acquire()
        except LockHeld as held:
            raise LockHeld(
                f"{path} is already written by another mirror ({held.holder}): a mirror has one "
                "writer; give each replica (and each StoreMemory) its own data directory",
                held.holder,
            ) from None
        try:
            self._setup(path, origin, seg_bits)
            self._file_lock = lock
            self._recover()
            self._check_checkpoint()
        except BaseException:
            with contextlib.suppress(OSError):
                self._close_fd()
            lock.release()
            raise
        return self

    def _setup(self, log_dir: Path, origin: str, seg_bits: int) -> None:
        self.log_dir = log_dir
        self.origin, self.seg_bits = origin, seg_bits
        self._seg_size = 1 << seg_bits
        self._lock = threading.RLock()  # the files and the counters
        self._delivering = threading.RLock()  # listeners see batches in the order written
        self._grown = threading.Condition(threading.Lock())
        self._listeners: list[Listener] = []
        self._recent: deque[bytes] = deque(maxlen=RECENT_HASHES)  # h of seqs size-len .. size-1
        self._fd = -1
        self._segment: int | None = None  # the segment file open for appending
        self.closed = False
        self.size = 0
        self.last_h = genesis(origin)
        self.checkpoint_size = -1  # the size the `checkpoint` file covers; -1 for none

    def _check_checkpoint(self) -> None:
        """Keep the checkpoint file only if it covers no more than the files hold: after a cut
        tail it may not, and the directory would not verify until the tail refilled it."""
        path = self.log_dir / layout.CHECKPOINT
        try:
            size = _checkpoint_size(path.read_text("utf-8"))
        except FileNotFoundError:
            return
        except (ValueError, UnicodeDecodeError):
            size = self.size + 1
        if size > self.size:
            path.unlink()
        else:
            self.checkpoint_size = size

    def _recover(self) -> None:
        segments = layout.list_segments(self.log_dir)
        if not segments:
            return
        numbers = [n for n, _ in segments]
        if numbers != list(range(len(numbers))):
            raise CorruptLog(f"{self.log_dir}: segment numbers are not contiguous: {numbers}")
        self._check_header(segments[0][1])
        last_n, last_path = segments[-1]
        prev = genesis(self.origin)
        if last_n > 0:
            prev = self._last_h_of_full(last_n - 1, segments[last_n - 1][1])
        base = last_n << self.seg_bits
        data = last_path.read_bytes()
        good, offset, held, last = 0, 0, [], None
        while True:
            end = data.find(b"\n", offset)
            if end < 0:
                break  # a torn tail: bytes after the last newline
            try:
                checked = check_line(
                    data[offset:end], seq=base + good, prev=prev, seg_bits=self.seg_bits
                )
            except LineError:
                break  # not a sound continuation: cut from here, the table has it
            prev = checked.h
            held.append(prev)
            last = checked
            good += 1
            offset = end + 1
        if offset < len(data):
            with open(last_path, "r+b") as f:
                f.truncate(offset)
        if good == 0:
            last_path.unlink()  # an empty segment file is not a segment
            if last_n == 0:
                return
            self.size = base
            self.last_h = prev
            return
        self.size, self.last_h = base + good, prev
        self._recent.extend(held)
        if good < self._seg_size:
            self._open_segment(last_n)
        if last is not None and last.obj["type"] == REDACTION and last.obj["tenant"] == "_log":
            self._rewrite_targets(last.record)  # a crash may have come before its rewrite

    def _check_header(self, path: Path) -> None:
        line = segfile.first_line(path)
        if line is None:
            return  # cut by recovery below
        try:
            header = orjson.loads(line).get("payload") or {}
        except orjson.JSONDecodeError:
            return
        if header.get("origin") != self.origin or header.get("seg_bits") != self.seg_bits:
            raise MirrorDiverged(
                f"{self.log_dir} holds the log of origin {header.get('origin')!r} with seg_bits "
                f"{header.get('seg_bits')!r}, not {self.origin!r} with {self.seg_bits}"
            )

    def _last_h_of_full(self, n: int, path: Path) -> bytes:
        lines = segfile.last_lines(path, 1)
        want = ((n + 1) << self.seg_bits) - 1
        if not lines or redaction.seq_of(lines[0]) != want:
            raise CorruptLog(f"{path} is not a full segment ending at seq {want}")
        return segfile.leaf_hash_of(lines[0])

    # ---- extending ---------------------------------------------------------------------------

    def extend(self, lines: list[bytes], records: list[Record] | None = None) -> list[Record]:
        """Append the committed `lines` (consecutive, each with or without its newline) that the
        mirror does not hold yet; return the new records. Thread-safe.

        `records`: the sequencer's own Records of these lines, from a caller that built them
        (the leader's sink). Their lines are then trusted to be well formed, and only their
        seqs, their chain and their bytes are compared: the full `check_line` is for lines read
        back from the table, and costs the leader's writer thread about 20 us a record."""
        if not lines:
            return []
        with self._lock:
            new = self._check(lines) if records is None else self._check_own(lines, records)
            if new:
                self._write(new)
                with self._grown:
                    self._grown.notify_all()
            # Take the delivery lock before letting the next writer in, so listeners get
            # batches in the order they were written; they run without the files' lock.
            self._delivering.acquire()
        try:
            if new:
                for listener in list(self._listeners):
                    try:
                        listener(new)
                    except Exception:  # the bytes are in: the others still get them
                        log.exception("a mirror listener failed on seqs %d..", new[0].seq)
        finally:
            self._delivering.release()
        return new

    def _check(self, lines: list[bytes]) -> list[Record]:
        """The records of the lines beyond `size`, each checked against the chain; raises
        MirrorDiverged (nothing written) when a line does not fit."""
        first = _seq_of(lines[0])
        if first > self.size:
            raise MirrorDiverged(
                f"{self.log_dir}: lines start at seq {first}, but the mirror holds {self.size} "
                "records (a gap)"
            )
        new: list[Record] = []
        prev = self.last_h
        for i, raw in enumerate(lines):
            seq = first + i
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if seq < self.size:
                self._check_held(seq, line)
                continue
            try:
                checked = check_line(line, seq=seq, prev=prev, seg_bits=self.seg_bits)
            except LineError as exc:
                raise MirrorDiverged(
                    f"{self.log_dir}: seq {seq} does not continue the mirror's chain "
                    f"({exc.check}: {exc.message})"
                ) from None
            prev = checked.h
            new.append(checked.record)
        return new

    def _check_own(self, lines: list[bytes], records: list[Record]) -> list[Record]:
        """`_check` for lines whose Records the caller's sequencer built."""
        first = records[0].seq if records else -1
        for i, (raw, record) in enumerate(zip(lines, records, strict=False)):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if record.seq != first + i or record.line != line:
                raise InvalidInput(f"extend: record {i} is not seq {first + i} of these lines")
        if len(records) != len(lines):
            raise InvalidInput("extend: one record per line")
        if first > self.size:
            raise MirrorDiverged(
                f"{self.log_dir}: lines start at seq {first}, but the mirror holds {self.size} "
                "records (a gap)"
            )
        prev = self.last_h.hex()
        new: list[Record] = []
        for i, (raw, record) in enumerate(zip(lines, records, strict=True)):
            seq = first + i
            if seq < self.size:
                line = raw[:-1] if raw.endswith(b"\n") else raw
                self._check_held(seq, line)
                continue
            if record.prev != prev:
                raise MirrorDiverged(
                    f"{self.log_dir}: seq {seq} does not continue the mirror's chain "
                    "(record.prev: prev is not the h the mirror holds)"
                )
            prev = record.h
            new.append(record)
        return new

    def _check_held(self, seq: int, line: bytes) -> None:
        """A duplicate of a held line must be the same record: same seq, same h."""
        try:
            same_seq = _seq_of(line) == seq
            h = segfile.leaf_hash_of(line)
        except (ValueError, KeyError, orjson.JSONDecodeError):
            same_seq, h = False, b""
        if not same_seq or h != self._held_h(seq):
            raise MirrorDiverged(
                f"{self.log_dir}: seq {seq} differs from the record the mirror holds (a fork)"
            )

    def _held_h(self, seq: int) -> bytes:
        back = self.size - seq
        if back <= len(self._recent):
            return self._recent[-back]
        path = self.log_dir / layout.segment_name(seq >> self.seg_bits)
        for _, line in segfile.iter_lines(path):
            if redaction.seq_of(line) == seq:
                return segfile.leaf_hash_of(line)
        raise CorruptLog(f"{path} does not hold seq {seq}")

    def _write(self, records: list[Record]) -> None:
        """Write the checked records: one write per segment, a new file where a segment starts,
        and a redaction's rewrite right after the redaction line (so after a crash it is the
        last line and `open` finishes it)."""
        mask = self._seg_size - 1
        blob: list[bytes] = []
        for record in records:
            if record.seq & mask == 0:
                self._append(blob)
                self._open_segment(record.seq >> self.seg_bits, new=True)
            blob.append(record.line + b"\n")
            self.size = record.seq + 1
            self.last_h = bytes.fromhex(record.h)
            self._recent.append(self.last_h)
            if record.type == REDACTION and record.is_control:
                self._append(blob)
                self._rewrite_targets(record)
        self._append(blob)

    def _append(self, blob: list[bytes]) -> None:
        if not blob:
            return
        data = b"".join(blob)
        blob.clear()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _open_segment(self, n: int, new: bool = False) -> None:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_TRUNC if new else 0)
        fd = os.open(self.log_dir / layout.segment_name(n), flags, FILE_MODE)
        self._close_fd()
        self._fd, self._segment = fd, n

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _rewrite_targets(self, record: Record) -> None:
        """Remove the payloads the redaction record names (docs/format.md section 9)."""
        payload = record.payload
        assert isinstance(payload, dict)  # a redaction payload is an object (format section 5)
        seqs = [t["seq"] for t in payload["targets"]]
        for n, targets in sorted(
            redaction.targets_by_segment(seqs, record.seq, self.seg_bits).items()
        ):
            path = self.log_dir / layout.segment_name(n)
            if not any(self._holds_payload(path, targets)):
                continue  # the table's rows came already rewritten
            redaction.rewrite_segment(self.log_dir, n, targets)
            if n == self._segment:
                self._open_segment(n)  # appends must go to the new file

    @staticmethod
    def _holds_payload(path: Path, targets: dict[int, int]) -> Iterator[bool]:
        for _, line in segfile.iter_lines(path):
            if redaction.seq_of(line) in targets:
                yield b'"payload":' in line and b'"redacted":' not in line

    # ---- checkpoints, waiting, listeners -----------------------------------------------------

    def install_checkpoint(self, text: str) -> None:
        """Make `text` the mirror's `checkpoint` file, atomically (not durably: a cache), unless
        the mirror holds a newer one already (the sink and the tail both install them)."""
        size = _checkpoint_size(text)
        with self._lock:
            if size <= self.checkpoint_size:
                return
            write_atomically(self.log_dir / layout.CHECKPOINT, text.encode(), durable=False)
            self.checkpoint_size = size

    def add_listener(self, fn: Listener) -> None:
        """Call `fn(records)` after each extend that added records, in seq order. Keep it quick."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        self._listeners.remove(fn)  # ValueError when absent, as LogWriter's

    def wait_for(self, seq: int, timeout: float | None = None) -> bool:
        """Block until the mirror holds record `seq`; False on timeout."""
        with self._grown:
            return self._grown.wait_for(lambda: self.size > seq, timeout)

    def flush(self) -> None:
        """Make the files durable (an export's last step; the mirror itself need not)."""
        with self._lock:
            for _, path in layout.list_segments(self.log_dir):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            checkpoint = self.log_dir / layout.CHECKPOINT
            if checkpoint.exists():
                fd = os.open(checkpoint, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_dir(self.log_dir)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            try:
                self._close_fd()
            finally:
                self._file_lock.release()  # idempotent

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.close()


def _checkpoint_size(text: str) -> int:
    """The tree size a checkpoint note names (its second line); ValueError when it has none."""
    lines = text.split("\n", 2)
    if len(lines) < 3 or not lines[1].isdigit():
        raise ValueError("not a checkpoint note")
    return int(lines[1])


def _seq_of(line: bytes) -> int:
    """The seq a line claims (MirrorDiverged when it claims none)."""
    try:
        seq = orjson.loads(line)["seq"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise MirrorDiverged("a line that is not a record (no seq)") from None
    if type(seq) is not int:
        raise MirrorDiverged(f"a line whose seq is {seq!r}")
    return seq
