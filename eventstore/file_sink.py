"""The file sink: a log directory's segment files made durable with write + fdatasync.

Each commit is one `write` of whole lines to the current segment file and one `fdatasync` (the
group commit: the writer hands over everything queued at once). A segment starts with a new file
opened O_EXCL, its segment.open line made durable, the directory fsynced so the new name
survives a power loss, and the embedded checkpoint installed as the `checkpoint` file. A failed
or short write raises; the writer then calls `abandon()`, which cuts the file back to the last
durable offset (docs/format.md section 7).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from . import layout, redaction
from .atomic import fsync_dir, write_atomically
from .filemodes import FILE_MODE
from .record import Record
from .sequencer import StartSegment
from .sink import (
    COMMITTED,
    Batch,
    ChainHead,
    CommitResult,
    RedactionRewrite,
    SignedCheckpoint,
)


class Durability(Enum):
    FSYNC = "fsync"
    # Acknowledges before the bytes reach stable storage. Tests and benchmarks only: a crash
    # loses acknowledged records. The name is long so that nobody picks it by accident.
    UNSAFE_NO_FSYNC = "unsafe-no-fsync"


class FileSink:
    """The DurabilitySink of a log directory. The caller holds the directory's LOCK."""

    def __init__(self, log_dir: Path, seg_bits: int, durability: Durability) -> None:
        self.log_dir = log_dir
        self.seg_bits = seg_bits
        self.durability = durability
        self.fsync_observer: Callable[[float, int], None] | None = None
        self._sync = durability is Durability.FSYNC
        self._fd = -1
        self._segment: int | None = None  # the segment file open for appending
        self._durable_offset = 0
        # The LOCK keeps other writers out; the head keeps out a batch of a writer whose own
        # state went wrong, which would otherwise break the chain in the files.
        self._head = ChainHead()

    def continue_chain(self, size: int, last_h: str) -> None:
        """The directory holds `size` records, the last with hex `h` `last_h` (recovery)."""
        self._head = ChainHead(size, last_h)

    def commit(self, batch: Batch) -> CommitResult:
        self._head.check(batch.records[0])
        self._write_durable(b"".join(batch.lines), len(batch.lines))
        self._head.advance(batch.records[-1])
        return COMMITTED

    def start_segment(self, start: StartSegment) -> CommitResult:
        self._head.check(start.record)
        # Recovery may have opened the file already: a crash came between the seal and the open.
        if start.number != self._segment:
            self.open_segment(start.number, existing=False)
        self._write_durable(start.line, 1)
        self._head.advance(start.record)
        fsync_dir(self.log_dir)
        if start.checkpoint is not None:
            self.install_checkpoint(SignedCheckpoint(start.checkpoint, start.record.seq))
        return COMMITTED

    def install_checkpoint(self, checkpoint: SignedCheckpoint) -> None:
        path = self.log_dir / layout.CHECKPOINT
        write_atomically(path, checkpoint.text.encode(), durable=self._sync)

    def read_record(self, seq: int) -> Record:
        return redaction.read_record(self.log_dir, seq, self.seg_bits)

    def rewrite_redacted(self, rewrite: RedactionRewrite) -> None:
        for n, targets in sorted(rewrite.targets.items()):
            redaction.rewrite_segment(self.log_dir, n, targets)
            # Readers notice the new file by its inode and size and rebuild their seek index.
            if n == self._segment:
                self.open_segment(n, existing=True)  # appends must go to the new file

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._durable_offset)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def open_segment(self, n: int, existing: bool) -> None:
        """Append to segment file `n` from now on; a new one must not exist yet."""
        path = self.log_dir / layout.segment_name(n)
        flags = os.O_WRONLY | os.O_APPEND | (0 if existing else os.O_CREAT | os.O_EXCL)
        fd = os.open(path, flags, FILE_MODE)
        self.close()
        self._fd = fd
        self._segment = n
        self._durable_offset = os.fstat(fd).st_size

    def _write_durable(self, blob: bytes, lines: int) -> None:
        # One write of whole lines; a short one is a failed write (docs/format.md section 7).
        written = os.write(self._fd, blob)
        if written != len(blob):
            raise _short_write_error(self._fd, written, len(blob))
        if self._sync:
            started = time.perf_counter()
            os.fdatasync(self._fd)
            if self.fsync_observer is not None:
                self.fsync_observer(time.perf_counter() - started, lines)
        self._durable_offset += len(blob)


def _short_write_error(fd: int, written: int, wanted: int) -> OSError:
    """The error a short write stands for. The rest of the line is not retried (whole lines in
    one write, docs/format.md section 7), so the cause is read from the file system and the
    process's limits instead: a full disk must be reported as one, not as a bare short write."""
    what = f"short write: {written} of {wanted} bytes"
    with contextlib.suppress(OSError):
        fs = os.fstatvfs(fd)
        if fs.f_bavail * fs.f_frsize < wanted - written:
            return OSError(errno.ENOSPC, f"{what}: no space left on the device")
    with contextlib.suppress(OSError, ValueError):
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and os.fstat(fd).st_size + wanted - written > limit:
            return OSError(errno.EFBIG, f"{what}: the file size limit (RLIMIT_FSIZE) is reached")
    return OSError(errno.EIO, what)
