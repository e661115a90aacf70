"""Writing a log directory from outside the writer: a mirror fed by a record stream, and the
segment rewrites that `tail --apply-redactions` and `backup` share.

A mirror is a LOGDIR laid out exactly as the server's (docs/format.md section 1): segment n holds
seqs n*S .. (n+1)*S-1, with S taken from seg_bits in the header record (seq 0). Lines are appended
only in seq order and only if they chain (`prev` is the previous record's `h`), so a mirror never
holds a gap or a duplicate; a signed checkpoint is installed only once the mirror holds every
record it covers, so `ledgermem verify MIRROR --vkey V` can say VALID-LOCAL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from eventstore import layout, segfile
from eventstore.atomic import fsync_dir, write_atomically
from eventstore.checkpoint import CheckpointError, VerifierKey, parse_checkpoint
from eventstore.errors import LedgerError
from eventstore.filemodes import FILE_MODE, make_dir
from eventstore.lockfile import WriterLock
from eventstore.record import Record, genesis


class MirrorError(LedgerError):
    """A mirror that cannot take the records it is given: they do not continue it."""


class Mirror:
    """A local copy of a log, appended to in seq order. Use `Mirror.open(path)`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seg_bits: int | None = None  # known once the header (seq 0) is in
        self.vkey: VerifierKey | None = None
        self.origin: str | None = None
        self.last_seq = -1
        self.last_h: bytes | None = None
        self.checkpoint_size = 0  # the installed checkpoint's tree size
        self._fd = -1
        self._segment = -1
        self._dirty = False  # bytes written since the last fsync
        self._new_files = False  # files created since the last directory fsync
        self._lock: WriterLock | None = None

    @property
    def size(self) -> int:
        """Records in the mirror."""
        return self.last_seq + 1

    @property
    def _bits(self) -> int:
        """seg_bits, for placing a line: every line is placed after the header (seq 0) is in."""
        assert self.seg_bits is not None, "the header (seq 0) is not in the mirror yet"
        return self.seg_bits

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Mirror:
        """Open a mirror directory: new (missing or empty) or one this command wrote before."""
        self = cls(Path(path))
        make_dir(self.path)
        segments = layout.list_segments(self.path)
        if not segments:
            others = [n for n in os.listdir(self.path) if n != layout.LOCK]
            if any(not n.endswith(".tmp") for n in others):
                raise MirrorError(
                    f"{self.path} is not empty and holds no segment files: give a new or empty "
                    "directory, or a mirror written before"
                )
        # One writer, as for a log: a second tail on this mirror, or a mirror pointed at a live
        # server's own log directory, is refused instead of interleaving lines.
        self._lock = WriterLock(self.path / layout.LOCK)
        self._lock.acquire()
        if not segments:
            return self
        numbers = [n for n, _ in segments]
        if numbers != list(range(len(numbers))):
            raise MirrorError(f"{self.path}: segment numbers are not contiguous from 0: {numbers}")
        for name in os.listdir(self.path):
            if name.endswith(".tmp"):  # a rewrite or checkpoint that a stop cut short
                os.unlink(self.path / name)
        try:
            self._continue(segments)
        except BaseException:
            self._lock.release()
            raise
        return self

    def _continue(self, segments: list[tuple[int, Path]]) -> None:
        header_line = segfile.first_line(segments[0][1])
        if header_line is None:
            if len(segments) > 1:
                raise MirrorError(f"{segments[0][1]} has no complete header line")
            segments[0][1].unlink()  # stopped while writing the very first line
            return
        self._take_header(Record.from_line(header_line), segments[0][1])
        for n, seg_path in reversed(segments):
            _drop_partial_line(seg_path)
            tail = segfile.last_lines(seg_path, 1)
            if not tail:
                if n == 0:
                    raise MirrorError(f"{seg_path} is empty")
                seg_path.unlink()  # created, then stopped before its first line was written
                fsync_dir(self.path)
                continue
            record = Record.from_line(tail[0])
            if record.seq >> self._bits != n:
                raise MirrorError(
                    f"{seg_path}: its last line has seq {record.seq}, which belongs in "
                    f"{layout.segment_name(record.seq >> self._bits)}"
                )
            self.last_seq, self.last_h = record.seq, bytes.fromhex(record.h)
            break
        checkpoint = self.path / layout.CHECKPOINT
        if checkpoint.exists():
            assert self.vkey is not None  # the header is in: _take_header set it
            try:
                cp = parse_checkpoint(checkpoint.read_text("utf-8"), self.vkey)
            except CheckpointError as exc:
                raise MirrorError(f"{checkpoint}: {exc}") from None
            self.checkpoint_size = cp.size

    def _take_header(self, record: Record, where: Path | str) -> None:
        payload = record.payload if isinstance(record.payload, dict) else {}
        if record.seq != 0 or record.type != "segment.open" or "seg_bits" not in payload:
            raise MirrorError(f"{where}: seq {record.seq} is not a segment 0 header")
        try:
            self.vkey = VerifierKey.parse(payload["vkey"])
        except (LedgerError, KeyError, TypeError, ValueError) as exc:
            raise MirrorError(f"{where}: seq 0 names no usable vkey: {exc}") from None
        self.seg_bits, self.origin = payload["seg_bits"], payload["origin"]

    # ---- appending -------------------------------------------------------------------------

    def append(self, lines: Iterable[bytes]) -> list[Record]:
        """Append record lines (without newlines) that continue the mirror; returns the
        redaction records among them. Call `sync()` to make them durable."""
        redactions: list[Record] = []
        for line in lines:
            record = Record.from_line(line)
            self._check_continues(record)
            segment = record.seq >> self._bits
            if segment != self._segment:
                self._open_segment(segment)
            data = memoryview(line + b"\n")
            while data:
                data = data[os.write(self._fd, data) :]
            self._dirty = True
            self.last_seq, self.last_h = record.seq, bytes.fromhex(record.h)
            if record.is_control and record.type == "redaction" and record.has_payload:
                redactions.append(record)
        return redactions

    def _check_continues(self, record: Record) -> None:
        where = layout.segment_name(record.seq >> self.seg_bits) if self.seg_bits else "seq 0"
        if record.seq != self.last_seq + 1:
            raise MirrorError(
                f"{self.path / where}: got seq {record.seq} after seq {self.last_seq}: the stream "
                "skipped or repeated records, so nothing more was written"
            )
        expected: bytes | None
        if record.seq == 0:
            self._take_header(record, self.path / layout.segment_name(0))
            assert self.origin is not None  # _take_header set it
            expected = genesis(self.origin)
        else:
            expected = self.last_h
        if bytes.fromhex(record.prev) != expected:
            raise MirrorError(
                f"{self.path / layout.segment_name(record.seq >> self._bits)}: seq "
                f"{record.seq} does not chain to the mirror's seq {self.last_seq} (prev "
                f"{record.prev[:16]}...): the server's log is not the one this mirror copies"
            )

    def _open_segment(self, n: int) -> None:
        self._sync_file()
        self._close_fd()
        path = self.path / layout.segment_name(n)
        exists = path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        self._segment = n
        self._new_files |= not exists

    def sync(self) -> None:
        """Make everything appended durable: the segment, and the directory for new files."""
        self._sync_file()
        if self._new_files:
            fsync_dir(self.path)
            self._new_files = False

    def _sync_file(self) -> None:
        if self._dirty and self._fd >= 0:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        try:
            self.sync()
        finally:
            self._close_fd()
            if self._lock is not None:
                self._lock.release()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ---- checkpoints and redactions --------------------------------------------------------

    def checkpoint_size_of(self, text: str) -> int:
        """The tree size of a checkpoint signed by the key in the mirror's header."""
        if self.vkey is None:
            raise MirrorError("the mirror has no header yet: no key to check a checkpoint with")
        try:
            return parse_checkpoint(text, self.vkey).size
        except CheckpointError as exc:
            raise MirrorError(f"the server's checkpoint does not verify: {exc}") from None

    def install_checkpoint(self, text: str) -> bool:
        """Install a signed checkpoint if the mirror holds (durably) every record it covers and
        it is newer than the one installed. Returns whether it was installed."""
        size = self.checkpoint_size_of(text)
        if size > self.size or size <= self.checkpoint_size:
            return False
        self.sync()
        write_atomically(self.path / layout.CHECKPOINT, text.encode())
        self.checkpoint_size = size
        return True

    def apply_redaction(self, redaction: Record) -> int:
        """Remove the payloads a redaction record names, as the server's writer did. Returns
        how many payloads this mirror still held."""
        payload = redaction.payload
        assert isinstance(payload, dict)  # a redaction payload is an object (format section 5)
        targets = {t["seq"]: redaction.seq for t in payload["targets"]}
        self.sync()
        removed = redact_segments(self.path, self._bits, targets)
        if removed and self._segment >= 0:
            segment = self._segment
            self._close_fd()
            self._open_segment(segment)  # appends go to the rewritten file
        return removed


# ---- files ---------------------------------------------------------------------------------


def redact_segments(log_dir: Path, seg_bits: int, targets: dict[int, int]) -> int:
    """Rewrite the segments holding `targets` (seq -> redaction seq) without their payloads,
    crash-safely (tmp, fsync, rename, fsync the directory). Returns the payloads removed."""
    by_segment: dict[int, dict[int, int]] = {}
    for seq, redaction_seq in targets.items():
        by_segment.setdefault(seq >> seg_bits, {})[seq] = redaction_seq
    removed = 0
    for n, wanted in sorted(by_segment.items()):
        path = log_dir / layout.segment_name(n)
        if not path.exists():
            continue
        lines = path.read_bytes().split(b"\n")
        changed = 0
        for k, line in enumerate(lines):
            if line and _seq_of(line) in wanted:
                record = Record.from_line(line)
                if record.has_payload:
                    lines[k] = record.redacted_line(wanted[record.seq])
                    changed += 1
        if changed:
            write_atomically(path, b"\n".join(lines))
            removed += changed
    return removed


def _seq_of(line: bytes) -> int:
    start = line.index(b'"seq":') + 6
    return int(line[start : line.index(b",", start)])


def _drop_partial_line(path: Path) -> None:
    """Cut an unterminated last line: what a stop in the middle of a write left."""
    with open(path, "r+b") as f:
        size = end = f.seek(0, os.SEEK_END)
        while end > 0:
            step = min(1 << 16, end)
            f.seek(end - step)
            chunk = f.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                end = end - step + newline + 1
                break
            end -= step
        if end != size:
            f.truncate(end)
            os.fsync(f.fileno())


__all__ = ["Mirror", "MirrorError", "redact_segments"]
