"""The file sink keeps the DurabilitySink contract: real segment files, real fdatasync."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from eventstore import layout
from eventstore.checkpoint import SigningKey
from eventstore.file_sink import Durability, FileSink
from eventstore.filemodes import make_dir
from eventstore.lockfile import WriterLock
from tests.helpers.sink_contract import SEG_BITS, DurabilitySinkContract, Storage


class TestFileSink(DurabilitySinkContract):
    @contextlib.contextmanager
    def open_storage(self, tmp_path: Path) -> Iterator[Storage]:
        log_dir = tmp_path / "log"
        make_dir(log_dir)
        lock = WriterLock(log_dir / layout.LOCK)  # the sink's caller holds the LOCK
        lock.acquire()
        try:
            yield Storage(
                sink=FileSink(log_dir, SEG_BITS, Durability.FSYNC),
                key=SigningKey.generate("test.local/sink-contract"),
                stored_lines=lambda: _segment_lines(log_dir),
                newest_checkpoint=lambda: _checkpoint_text(log_dir),
            )
        finally:
            lock.release()


def _segment_lines(log_dir: Path) -> list[bytes]:
    data = b"".join(path.read_bytes() for _, path in layout.list_segments(log_dir))
    return data.splitlines(keepends=True)


def _checkpoint_text(log_dir: Path) -> str | None:
    path = log_dir / layout.CHECKPOINT
    return path.read_text("utf-8") if path.exists() else None
