"""C2SP tlog-tiles, pure: tile coordinates and paths, what a tile covers, entry bundles.

A tiled log serves its Merkle tree as static resources (https://c2sp.org/tlog-tiles), so a
monitor or witness can follow and audit it with standard tools instead of our proof API:

- `tile/<L>/<N>[.p/<W>]`: the W (256 when full) consecutive hashes at height 8*L starting at
  hash N*256 of that height. Level 0 holds leaf hashes (our records' `h`); a hash at level L >= 1
  is the Merkle root of one full tile of level L-1.
- `tile/entries/<N>[.p/<W>]`: the leaves themselves, each as a big-endian u16 length and the
  bytes that hash to the leaf. Ours are the records' preimages (docs/format.md, section 3), so
  SHA-256(0x00 || entry) is the record's `h`.

This module decides nothing about where hashes come from: `eventstore/tile_source.py` reads them
from a log directory.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from .errors import InvalidInput
from .record import preimage

HEIGHT = 8
WIDTH = 1 << HEIGHT  # hashes in a full tile, entries in a full bundle
MAX_LEVEL = 63
ENTRY_MAX = 0xFFFF  # a u16 length prefix


class BadTilePath(InvalidInput):
    """A path that names no tile: answered 404 by the service (a client asked for nothing)."""


@dataclass(frozen=True)
class TileId:
    """One tile (`level` >= 0) or one entry bundle (`level` is None)."""

    level: int | None
    index: int
    width: int = WIDTH

    @property
    def is_entries(self) -> bool:
        return self.level is None

    def span(self) -> tuple[int, int]:
        """The leaves [lo, hi) this tile's hashes (or this bundle's entries) cover."""
        per_hash = WIDTH ** (self.level or 0)
        lo = self.index * WIDTH * per_hash
        return lo, lo + self.width * per_hash

    def path(self) -> str:
        kind = "entries" if self.level is None else str(self.level)
        tail = f".p/{self.width}" if self.width < WIDTH else ""
        return f"tile/{kind}/{encode_index(self.index)}{tail}"


def encode_index(n: int) -> str:
    """1234067 -> `x001/x234/067`: 3-digit elements, all but the last prefixed with `x`."""
    groups = [f"{n % 1000:03d}"]
    n //= 1000
    while n:
        groups.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(groups))


def _plain_int(text: str, low: int, high: int, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0"):
        raise BadTilePath(f"{what} {text!r} is not a decimal number without leading zeros")
    value = int(text)
    if not low <= value <= high:
        raise BadTilePath(f"{what} {value} is not in {low}..{high}")
    return value


def parse_tile_path(path: str) -> TileId:
    """`<L or entries>/<N elements>[.p/<W>]` (the part after `tile/`), strictly as the spec
    writes it: one spelling per tile, so caches never hold two copies of one resource."""
    parts = path.split("/")
    if len(parts) < 2:
        raise BadTilePath(f"tile path {path!r} has no index")
    level = None if parts[0] == "entries" else _plain_int(parts[0], 0, MAX_LEVEL, "tile level")
    rest = parts[1:]
    width = WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        width = _plain_int(rest[-1], 1, WIDTH - 1, "partial tile width")
        rest = [*rest[:-2], rest[-2][:-2]]
    index = 0
    for position, element in enumerate(rest):
        last = position == len(rest) - 1
        digits = element if last else element[1:]
        if (not last and element[:1] != "x") or len(digits) != 3 or not digits.isdigit():
            raise BadTilePath(f"tile index element {element!r} is not x<3 digits> / <3 digits>")
        index = index * 1000 + int(digits)
    if len(rest) > 1 and rest[0] == "x000":
        raise BadTilePath("a tile index has no leading x000 element")
    return TileId(level, index, width)


def available(tile: TileId, size: int) -> bool:
    """Whether a tree of `size` leaves has this tile: every hash in it is of a complete subtree
    of the tree (a full tile at the level below, or a leaf), so partial tiles of every width up
    to the tree's are served, and nothing past it."""
    _, hi = tile.span()
    return hi <= size


def entry(line_fields: dict) -> bytes:
    """A record's leaf preimage, from its parsed line: SHA-256(0x00 || entry) is its `h`."""
    return preimage(
        bytes.fromhex(line_fields["prev"]),
        line_fields["seq"],
        line_fields["ts"],
        line_fields["tenant"],
        line_fields["session"],
        line_fields["section"],
        line_fields["type"],
        bytes.fromhex(line_fields["pd"]),
    )


def entry_of_line(line: bytes) -> bytes:
    return entry(orjson.loads(line))


def bundle(entries: list[bytes]) -> bytes:
    """Entries as a C2SP entry bundle: each a big-endian u16 length, then its bytes."""
    out = bytearray()
    for data in entries:
        if len(data) > ENTRY_MAX:  # identifiers are at most 128 bytes: never for our records
            raise ValueError(f"an entry of {len(data)} bytes does not fit a u16 length")
        out += len(data).to_bytes(2, "big")
        out += data
    return bytes(out)


def split_bundle(data: bytes) -> list[bytes]:
    """The entries of a bundle (the client's half, for tests and `ledgermem` tools)."""
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise InvalidInput("entry bundle ends inside a length prefix")
        n = int.from_bytes(data[at : at + 2], "big")
        if at + 2 + n > len(data):
            raise InvalidInput("entry bundle ends inside an entry")
        entries.append(data[at + 2 : at + 2 + n])
        at += 2 + n
    return entries
