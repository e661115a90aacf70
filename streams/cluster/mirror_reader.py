"""A LogReader over a mirror directory that may not hold a log yet.

`LogReader` reads the header of segment 0 when it is made, and a partition nobody has written
to has no segment at all on any replica's mirror. The hub of such a partition still serves
subscribers (they wait for the first record), so its reader is made on first use, once the
mirror holds the header; until then there is nothing to read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from eventstore.reader import LogReader

if TYPE_CHECKING:
    from eventstore.mirror import Mirror


class MirrorReader:
    def __init__(self, mirror: Mirror, index_dir: Path) -> None:
        self.mirror = mirror
        self.index_dir = index_dir
        self._reader: LogReader | None = None
        self._lock = threading.Lock()

    def _get(self) -> LogReader | None:
        if self._reader is None and self.mirror.size > 0:
            with self._lock:
                if self._reader is None:
                    self._reader = LogReader(self.mirror.log_dir, index_dir=self.index_dir)
        return self._reader

    def lines(self, after: int = -1, until: int | None = None) -> Iterator[tuple[int, bytes]]:
        reader = self._get()
        if reader is None:
            return iter(())
        return reader.lines(after, until)
