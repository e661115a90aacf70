"""Replacing a file all or nothing: write `<name>.tmp`, fsync it, rename it over, fsync the directory.

Every file the project writes whole (checkpoints, snapshots, seek indexes, keys' origin, bundles,
backups, redacted segments) goes through here, so none can be left half-written by a crash and
none skips one of the three steps; each is created with mode 0600 (filemodes.py). `durable=False` skips both fsyncs; only the writer's
`Durability.UNSAFE_NO_FSYNC` mode (tests and benchmarks) asks for it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .filemodes import FILE_MODE

# What link() answers on file systems that have no hard links (FAT, some FUSE mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV})


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new entry in `path` durable: without it a power loss can undo it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temporary_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike[str], *, mode: int = FILE_MODE, durable: bool = True
) -> Iterator[BinaryIO]:
    """A file object to write the new contents of `path` into; they replace `path` on a clean
    exit, and an exception leaves `path` as it was (the `.tmp` is removed)."""
    path = Path(path)
    tmp = temporary_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with open(fd, "wb", closefd=True) as f:
            if os.fstat(fd).st_mode & 0o777 & ~mode:  # a leftover .tmp keeps the mode it had
                os.fchmod(fd, mode)
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_atomically(
    path: str | os.PathLike[str], data: bytes, *, mode: int = FILE_MODE, durable: bool = True
) -> None:
    """Replace `path` with `data`, all or nothing."""
    with atomic_file(path, mode=mode, durable=durable) as f:
        f.write(data)


def create_atomically(path: str | os.PathLike[str], data: bytes, *, mode: int = FILE_MODE) -> None:
    """Create `path` holding `data`, all or nothing and durably; FileExistsError if it exists.

    For a file that must never be replaced (the signing key): the contents are made durable
    under the `.tmp` name and then hard-linked into place, which fails rather than replace.
    """
    path = Path(path)
    tmp = temporary_path(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a crash leftover: never a file anyone relies on
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            if path.exists():  # a file system without hard links: check, then rename
                raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
            os.rename(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)
