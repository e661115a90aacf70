"""Replacing a file all or nothing: write `<name>.tmp`, fsync it, rename it over, fsync the directory.

Every file the project writes whole (checkpoints, snapshots, seek indexes, keys' origin, bundles,
backups, redacted segments) goes through here, so none can be left half-written by a crash and
none skips one of the three steps. `durable=False` skips both fsyncs; only the writer's
`Durability.UNSAFE_NO_FSYNC` mode (tests and benchmarks) asks for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


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
    path: str | os.PathLike[str], *, mode: int = 0o644, durable: bool = True
) -> Iterator[BinaryIO]:
    """A file object to write the new contents of `path` into; they replace `path` on a clean
    exit, and an exception leaves `path` as it was (the `.tmp` is removed)."""
    path = Path(path)
    tmp = temporary_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with open(fd, "wb", closefd=True) as f:
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
    path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644, durable: bool = True
) -> None:
    """Replace `path` with `data`, all or nothing."""
    with atomic_file(path, mode=mode, durable=durable) as f:
        f.write(data)
