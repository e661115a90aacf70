"""The single-writer LOCK (docs/format.md section 7), held with flock.

flock locks belong to an open file description, so a second writer is refused whether it is in
another process or in this one. The holder writes who it is into the file so that the refusal
can say who holds the lock.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from .errors import LockHeld
from .filemodes import FILE_MODE


class WriterLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockHeld(
                f"{self.path} is held by another writer ({holder}); "
                "only one writer may open a log: stop it, or read the files without writing",
                holder,
            ) from None
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()} since={stamp}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the description drops the flock


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "holder unknown"
