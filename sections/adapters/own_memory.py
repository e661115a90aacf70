"""The memory an adapter opens for itself when it is given none (docs/adapters/openai-agents.md,
docs/adapters/adk.md): in a data directory (durable), or in a new temporary directory without
fsync, removed when the adapter is closed or collected (in-process, as the frameworks' own
in-memory backends are: a `Memory` reads its log from segment files, so even the in-process
one has files)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from eventstore.file_sink import Durability
from sections.errors import ConfigError
from sections.runtime.memory import Memory


def open_scratch(prefix: str, **options: Any) -> tuple[Memory, str]:
    """A new memory in a new temporary directory, without fsync (nothing in it is to outlive
    the process), and that directory; `options` go to `Memory.open`. Every adapter constructed
    without a memory, as its framework's in-memory backend is, stands on one of these."""
    temp_dir = tempfile.mkdtemp(prefix=prefix)
    try:
        return Memory.open(temp_dir, durability=Durability.UNSAFE_NO_FSYNC, **options), temp_dir
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise


def release(memory: Memory, temp_dir: str | None) -> None:
    """Close a memory an adapter opened, unless closed already (and remove its directory when it
    was a scratch one): what `close()`, the garbage collector or the process's exit runs."""
    try:
        if not memory.writer.closed:
            memory.close()
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


_SHARED: dict[Path, tuple[Memory, int]] = {}  # data dir -> its memory, how many adapters use it
_SHARED_LOCK = threading.Lock()
# Shares given back and not yet applied: a collected adapter's finalizer runs inside the garbage
# collector, possibly in this very thread while it holds the lock, so it only appends here.
_RELEASED: list[Path] = []


def _apply_released() -> list[tuple[Path, Memory]]:
    """Under the lock: the shares given back applied; the memories no adapter uses any more,
    by directory (to be closed, outside the lock unless the directory is being reopened)."""
    unused = []
    while _RELEASED:
        key = _RELEASED.pop()
        memory, users = _SHARED[key]
        if users > 1:
            _SHARED[key] = (memory, users - 1)
        else:
            del _SHARED[key]
            unused.append((key, memory))
    return unused


def _close_unused() -> None:
    with _SHARED_LOCK:
        unused = _apply_released()
    for _key, memory in unused:
        memory.close()


def _open_shared(data_dir: str | os.PathLike[str]) -> tuple[Memory, Path]:
    """The memory of a data directory, opened once per process and shared by every adapter
    given that directory (a log has one writer), as the frameworks' SQLite sessions share
    their file."""
    key = Path(data_dir).expanduser().resolve()
    with _SHARED_LOCK:
        unused = _apply_released()
        for released, gone in unused:
            if released == key:  # closed before the directory is opened again
                gone.close()
        shared = _SHARED.get(key)
        memory, users = shared if shared is not None else (Memory.open(key), 0)
        _SHARED[key] = (memory, users + 1)
    for released, other in unused:
        if released != key:
            other.close()
    return memory, key


class Owned:
    """The memory an adapter stands on: `memory` (the caller's, which the caller closes), or
    the one of `data_dir` (shared by the adapters of this process given that directory, closed
    when the last is), or a scratch one of its own; `close()` releases only what this opened,
    also when the adapter is collected without it."""

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
        self._shared = False
        if memory is None and data_dir is not None:
            memory, key = _open_shared(data_dir)
            self._finalizer = weakref.finalize(owner, _RELEASED.append, key)
            self._shared = True
        elif memory is None:
            memory, temp_dir = open_scratch(prefix, tenant=tenant or "default")
            self._finalizer = weakref.finalize(owner, release, memory, temp_dir)
        self.memory = memory
        self.tenant = tenant or ("default" if self._finalizer else memory.tenant)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        if self._shared:
            _close_unused()
