"""The memory a LangGraph saver or store runs on: the caller's, one in a data directory, or an
in-process one (docs/adapters/langgraph.md, "Durable form").

LangGraph's `InMemorySaver` and `InMemoryStore` take no argument and keep nothing after the
process. Their counterparts here do the same on a scratch data directory without fsync (a
`Memory` reads its log from segment files, so there must be files), removed on `close()` or
when the adapter is garbage-collected.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

from eventstore.writer import Durability
from sections.errors import ConfigError
from sections.runtime.memory import Memory


class Held:
    """A memory and what closing the adapter does to it."""

    def __init__(self, memory: Memory | None, data_dir: str | os.PathLike[str] | None,
                 prefix: str) -> None:  # fmt: skip
        if memory is not None and data_dir is not None:
            raise ConfigError("give memory= or data_dir=, not both")
        self.owned = memory is None
        self.root: str | None = None
        if memory is not None:
            self.memory = memory
        elif data_dir is not None:
            self.memory = Memory.open(data_dir)
        else:
            self.root = tempfile.mkdtemp(prefix=prefix)
            try:
                self.memory = Memory.open(self.root, durability=Durability.UNSAFE_NO_FSYNC)
            except BaseException:
                shutil.rmtree(self.root, ignore_errors=True)
                raise
        self._finalizer = weakref.finalize(self, _discard, self.memory if self.owned else None,
                                           self.root)  # fmt: skip

    def close(self) -> None:
        """Close the memory if the adapter opened it (an in-process one is removed too)."""
        self._finalizer()


def _discard(memory: Memory | None, root: str | None) -> None:
    try:
        if memory is not None and not memory.writer.closed:
            memory.close()
    finally:
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
