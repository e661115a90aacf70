"""The memory sink keeps the DurabilitySink contract (it is the protocol's smallest example)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from eventstore.checkpoint import SigningKey
from eventstore.memory_sink import MemorySink
from tests.helpers.sink_contract import DurabilitySinkContract, Storage


class TestMemorySink(DurabilitySinkContract):
    @contextlib.contextmanager
    def open_storage(self, tmp_path: Path) -> Iterator[Storage]:
        sink = MemorySink()
        yield Storage(
            sink=sink,
            key=SigningKey.generate("test.local/sink-contract"),
            stored_lines=lambda: list(sink.lines),
            newest_checkpoint=lambda: sink.checkpoints[-1].text if sink.checkpoints else None,
        )
