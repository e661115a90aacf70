"""Small readers over one segment file: its first line, its last lines, its leaf hashes.

Only complete lines (ending in a newline) are ever returned, so a file that another process is
appending to never yields a partial record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

_CHUNK = 1 << 16
_H_KEY = b'"h":"'


def first_line(path: Path) -> bytes | None:
    with open(path, "rb") as f:
        line = f.readline()
    return line[:-1] if line.endswith(b"\n") else None


def last_lines(path: Path, count: int) -> list[bytes]:
    """The last `count` complete lines of a file, oldest first (fewer if the file has fewer)."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        data = b""
        pos = end
        while pos > 0:
            step = min(_CHUNK, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
            if data.count(b"\n") > count:
                break
    cut = data.rfind(b"\n") + 1  # drop an unterminated tail
    lines = data[:cut].split(b"\n")[:-1]
    if pos > 0:
        lines = lines[1:]  # the first piece may be the end of a longer line
    return lines[-count:]


def iter_lines(path: Path, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(offset, line without newline) for every complete line from byte `start`."""
    with open(path, "rb") as f:
        yield from iter_open_lines(f, start)


def iter_open_lines(f: BinaryIO, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """As `iter_lines`, in a file already open: offsets that were taken from this open file
    stay right whatever has been renamed over its name since."""
    f.seek(start)
    offset = start
    for line in f:
        if not line.endswith(b"\n"):
            return
        yield offset, line[:-1]
        offset += len(line)


def leaf_hash_of(line: bytes) -> bytes:
    """The `h` of a line this project wrote, without parsing the whole line."""
    at = line.find(_H_KEY)
    if at < 0:
        return bytes.fromhex(orjson.loads(line)["h"])
    return bytes.fromhex(line[at + 5 : at + 69].decode())


def leaf_hashes(path: Path) -> list[bytes]:
    return [leaf_hash_of(line) for _, line in iter_lines(path)]
