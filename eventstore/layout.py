"""Names and places of the files in a log directory and a data directory (docs/format.md section 1).

A data directory holds the log and, beside it, what must not be inside it:

    DATA/log/        the segment files, `checkpoint`, `quarantine/`, `LOCK`
    DATA/keys/       `signing.key` (mode 0600); never inside the log directory
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".jsonl"
CHECKPOINT = "checkpoint"
QUARANTINE = "quarantine"
LOCK = "LOCK"
# The hint of every "no log here" error of the offline commands.
WHAT_TO_PASS = "pass a log directory (the one holding seg-*.jsonl) or a data directory (DATA/log)"
_SEGMENT_NAME = re.compile(r"seg-(\d{12,})\.jsonl")


def segment_name(number: int) -> str:
    return f"{SEGMENT_PREFIX}{number:012d}{SEGMENT_SUFFIX}"


def segment_number(name: str) -> int | None:
    """The segment number of a well-formed segment file name, else None."""
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None:
        return None
    digits = match.group(1)
    if len(digits) > 12 and digits[0] == "0":
        return None  # padding beyond 12 digits only once the number needs it
    return int(digits)


def list_segments(log_dir: Path) -> list[tuple[int, Path]]:
    """The segment files present, in segment order (gaps are the caller's to judge)."""
    found = []
    for entry in os.scandir(log_dir):
        number = segment_number(entry.name)
        if number is not None and entry.is_file():
            found.append((number, Path(entry.path)))
    found.sort()
    return found


def quarantine_name(segment: int, offset: int, existing: set[str]) -> str:
    base = f"seg-{segment:012d}.{offset}.torn"
    name, n = base, 0
    while name in existing:
        n += 1
        name = f"{base}.{n}"
    return name


class DataDir:
    """The places inside a data directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.log = self.root / "log"
        self.keys = self.root / "keys"
        self.signing_key = self.keys / "signing.key"


def resolve_log_dir(path: str | os.PathLike[str]) -> Path:
    """The log directory meant by `path`: itself, or the `log/` of the data directory it names.

    Users hand offline commands the directory they know, which is usually the data directory
    `ledgermem serve --data` made. A directory holding no segment file but a `log/` is read as
    that; anything else is returned unchanged, for the caller's own error."""
    given = Path(path)
    inner = DataDir(given).log
    if given.is_dir() and inner.is_dir() and not list_segments(given):
        return inner
    return given
