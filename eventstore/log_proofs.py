"""Proofs and signed checkpoints from a log directory's files: the newest checkpoint (the file,
or the one a `segment.open` embeds), the checkpoint of a given size, and memoized subtree roots
for many proofs against one size. Used by the offline tools (`ledgermem proof`, `export`) and by
the service's proof and tile routes alike.
"""

from __future__ import annotations

import orjson

from . import layout
from .checkpoint import VerifierKey
from .errors import BadKey, CorruptLog, InvalidInput
from .merkle import node_hash, root, split_point
from .reader import LogReader
from .segfile import first_line

_CHUNK = 256  # subtrees of at most this many leaves are hashed from the leaves directly


class SubtreeRoots:
    """Memoized RFC 6962 subtree roots over a log's leaves, for many proofs against one size.

    A node's root comes from its children's, so computing a root reads each leaf at most once,
    and the large subtrees that every proof shares are hashed once.
    """

    def __init__(self, reader: LogReader) -> None:
        self.reader = reader
        self._cache: dict[tuple[int, int], bytes] = {}

    def __call__(self, lo: int, hi: int) -> bytes:
        key = (lo, hi)
        found = self._cache.get(key)
        if found is None:
            if hi - lo <= _CHUNK:
                found = root(self.reader.leaf_hashes(lo, hi))
            else:
                k = split_point(hi - lo)
                found = node_hash(self(lo, lo + k), self(lo + k, hi))
            self._cache[key] = found
        return found


def header_key(reader: LogReader) -> VerifierKey:
    try:
        return VerifierKey.parse(reader.vkey)
    except BadKey as exc:
        raise CorruptLog(f"segment 0's header names no usable vkey: {exc}") from None


def newest_checkpoint(reader: LogReader) -> tuple[str, str]:
    """(note text, where it came from): the `checkpoint` file, or, when it is missing, the one
    embedded in the newest `segment.open`."""
    path = reader.log_dir / layout.CHECKPOINT
    try:
        return path.read_bytes().decode("utf-8"), layout.CHECKPOINT
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptLog(f"cannot read {path}: {exc}") from None
    for number, segment in reversed(layout.list_segments(reader.log_dir)):
        text = _embedded(reader, number)
        if text is not None:
            return text, f"segment.open of {segment.name}"
    raise InvalidInput(
        f"{reader.log_dir} holds no signed checkpoint: no checkpoint file, and no segment.open "
        "after segment 0 (it embeds none)"
    )


def checkpoint_of_size(reader: LogReader, size: int) -> tuple[str, str]:
    """The signed note of exactly `size` records: the file's, or one a segment.open embeds."""
    text, source = newest_checkpoint(reader)
    if _note_size(text) == size:
        return text, source
    seg_size = 1 << reader.seg_bits
    if size > 0 and size % seg_size == 0:
        embedded = _embedded(reader, size // seg_size)
        if embedded is not None and _note_size(embedded) == size:
            return embedded, f"segment.open of {layout.segment_name(size // seg_size)}"
    sizes = [
        n * seg_size
        for n, _ in layout.list_segments(reader.log_dir)
        if n > 0 and n * seg_size <= (_note_size(text) or 0)
    ]
    shown = ", ".join(map(str, sizes[-5:])) or "none"
    raise InvalidInput(
        f"no signed checkpoint of size {size} in {reader.log_dir}: the newest ({source}) has "
        f"size {_note_size(text)}; segment.open records embed sizes that are multiples of "
        f"{seg_size} (latest: {shown})"
    )


def _embedded(reader: LogReader, number: int) -> str | None:
    if number < 1:
        return None
    path = reader.log_dir / layout.segment_name(number)
    try:
        first = first_line(path)
    except FileNotFoundError:
        return None
    if first is None:
        return None
    try:
        payload = orjson.loads(first).get("payload")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    text = payload.get("checkpoint") if type(payload) is dict else None
    return text if type(text) is str else None


def _note_size(text: str) -> int | None:
    lines = text.split("\n", 2)
    if len(lines) < 3 or not lines[1].isdigit():
        return None
    return int(lines[1])
