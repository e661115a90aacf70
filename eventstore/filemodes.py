"""Who may read what ledgermem writes: its owner only.

Segments, checkpoints, snapshots and their attachments, seek indexes, quarantined crash
leftovers, the key and its origin, mirrors and backups hold memory contents or the signing key,
so every file is created with `FILE_MODE` (0600) and every directory with `DIR_MODE` (0700); a
umask can only narrow them. Files and directories that already exist keep their modes: a data
directory written by an earlier version (0644 files in 0755 directories) opens as before and
only what is created or replaced from then on is private (docs/service.md, "Files and modes").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_dir(path: str | os.PathLike[str]) -> Path:
    """Create directory `path` with `DIR_MODE` unless it exists; missing parents are created
    the same way. An existing directory is left as it is."""
    path = Path(path)
    if path.is_dir():
        return path
    if not path.parent.is_dir():
        make_dir(path.parent)
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if not path.is_dir():  # a file of that name
            raise
    return path  # another process may have made it meanwhile


def others_can_enter(path: str | os.PathLike[str]) -> bool:
    """Whether users other than the owner have any access to `path` (an older data directory)."""
    return bool(stat.S_IMODE(os.stat(path).st_mode) & 0o077)
