"""The memory an adapter opens for itself when it is given none (docs/adapters/openai-agents.md,
docs/adapters/adk.md): in a data directory (durable), or in a new temporary directory without
fsync, removed when the adapter is closed or collected (in-process, as the frameworks' own
in-memory backends are: a `Memory` reads its log from segment files, so even the in-process
one has files)."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

from eventstore.file_sink import Durability
from sections.errors import ConfigError
from sections.runtime.memory import Memory


def release(memory: Memory, temp_dir: str | None) -> None:
    """Close a memory an adapter opened (and remove its directory when it was a scratch one)."""
    try:
        memory.close()
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


class Owned:
    """The memory an adapter stands on: `memory` (the caller's, which the caller closes), or
    one opened in `data_dir`, or a scratch one; `close()` closes (and removes) only what this
    opened, also when the adapter is collected without it."""

    def __init__(
        self,
        owner: object,
        memory: Memory | None,
        data_dir: str | os.PathLike[str] | None,
        tenant: str | None,
        prefix: str,
    ) -> None:
        if memory is not None and data_dir is not None:
            raise ConfigError("give memory= or data_dir=, not both")
        self._finalizer: weakref.finalize | None = None
        if memory is None:
            options: dict[str, Any] = {"tenant": tenant or "default"}
            temp_dir = None
            if data_dir is None:
                temp_dir = tempfile.mkdtemp(prefix=prefix)
                options["durability"] = Durability.UNSAFE_NO_FSYNC
            try:
                memory = Memory.open(temp_dir or data_dir, **options)  # type: ignore[arg-type]
            except BaseException:
                if temp_dir is not None:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                raise
            self._finalizer = weakref.finalize(owner, release, memory, temp_dir)
        self.memory = memory
        self.tenant = tenant or memory.tenant

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
