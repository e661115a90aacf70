"""Tiles and entry bundles read from a log directory (the I/O half of `tiles.py`).

A level-0 tile is 256 lines' `h`; a hash at level L >= 1 is the root of a full tile one level
down, so each level is built from the one below and full tiles, which never change, are kept in
a bounded cache: following a growing log costs reading each new line once, not once per tile
above it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from . import segfile
from .errors import InvalidInput
from .merkle import root
from .reader import LogReader
from .tiles import WIDTH, TileId, available, bundle, entry_of_line

HASH = 32
CACHED_TILES = 2048  # full tiles of 8 KiB: 16 MiB at most


class TileNotFound(InvalidInput):
    """The tree of the given size has no such tile (yet): answered 404."""


class TileSource:
    def __init__(self, reader: LogReader, cached: int = CACHED_TILES) -> None:
        self.reader = reader
        self._cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._cached = cached
        self._lock = threading.Lock()

    def read(self, tile: TileId, size: int) -> bytes:
        """The tile's (or entry bundle's) bytes, for a tree of `size` leaves that has it."""
        if not available(tile, size):
            raise TileNotFound(f"{tile.path()} is not in the tree of size {size}")
        if tile.level is None:  # an entry bundle
            lo, hi = tile.span()
            return bundle([entry_of_line(line) for _, line in self._lines(lo, hi)])
        return self._hashes(tile.level, tile.index, tile.width)

    def _lines(self, lo: int, hi: int) -> list[tuple[int, bytes]]:
        lines = list(self.reader.lines(lo - 1, hi))
        if len(lines) != hi - lo:  # the files lost records the checkpoint covers
            raise InvalidInput(f"the log holds fewer than {hi} records")
        return lines

    def _hashes(self, level: int, index: int, width: int) -> bytes:
        key = (level, index)
        with self._lock:
            full = self._cache.get(key)
            if full is not None:
                self._cache.move_to_end(key)
                return full[: width * HASH]
        if level == 0:
            lo = index * WIDTH
            data = b"".join(segfile.leaf_hash_of(line) for _, line in self._lines(lo, lo + width))
        else:
            below = index * WIDTH
            data = b"".join(self._tile_root(level - 1, below + i) for i in range(width))
        if width == WIDTH:
            with self._lock:
                self._cache[key] = data
                while len(self._cache) > self._cached:
                    self._cache.popitem(last=False)
        return data

    def _tile_root(self, level: int, index: int) -> bytes:
        """The Merkle root of a full tile: the tree hash of the 256**(level+1) leaves it spans."""
        data = self._hashes(level, index, WIDTH)
        return root([data[i : i + HASH] for i in range(0, len(data), HASH)])
