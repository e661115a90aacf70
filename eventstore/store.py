"""A data directory: the log plus its signing key, which never lives inside the log directory.

DATA/log/              segments, checkpoint, quarantine/, LOCK
DATA/keys/signing.key  Ed25519 private key, PEM PKCS#8, mode 0600
DATA/keys/origin       the log's origin, so the key can be used before the log exists
DATA/index/            the reader's sparse offset indexes (a cache, rebuilt if lost)

Every directory is created 0700 and every file 0600 (filemodes.py); the key and its origin are
written all or nothing and durably, the origin first: the key's presence says both are complete.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .atomic import fsync_dir, write_atomically
from .checkpoint import SigningKey, check_origin
from .errors import BadKey
from .filemodes import DIR_MODE, make_dir, others_can_enter
from .layout import DataDir
from .writer import DEFAULT_SEG_BITS, Durability, LogWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyInfo:
    key: SigningKey
    path: Path
    created: bool


def load_or_create_key(data: DataDir, origin: str | None = None, create: bool = True) -> KeyInfo:
    origin_file = data.keys / "origin"
    if data.signing_key.exists():
        if not origin_file.exists():
            raise BadKey(f"{data.signing_key} has no {origin_file.name} file beside it")
        stored = origin_file.read_text("utf-8").strip()
        if origin is not None and origin != stored:
            raise BadKey(f"the data directory's origin is {stored!r}, not {origin!r}")
        return KeyInfo(SigningKey.load(data.signing_key, stored), data.signing_key, False)
    if not create:
        raise BadKey(f"no signing key at {data.signing_key}")
    origin = check_origin(origin or f"ledgermem.local/{secrets.token_hex(4)}")
    key = SigningKey.generate(origin)
    make_dir(data.keys)
    os.chmod(data.keys, DIR_MODE)
    # The new directories' own entries, so that a power loss cannot drop the key with them.
    fsync_dir(data.root.parent)
    fsync_dir(data.root)
    write_atomically(origin_file, (origin + "\n").encode())
    key.save(data.signing_key)
    return KeyInfo(key, data.signing_key, True)


def open_log(
    data_dir: str | os.PathLike[str],
    *,
    create: bool = True,
    origin: str | None = None,
    seg_bits: int = DEFAULT_SEG_BITS,
    durability: Durability = Durability.FSYNC,
    checkpoint_interval: float = 1.0,
    clock: Callable[[], int] = time.time_ns,
) -> tuple[LogWriter, KeyInfo]:
    """Open the data directory's log for writing, creating the directory, key and log if asked."""
    data = DataDir(data_dir)
    info = load_or_create_key(data, origin, create)
    if create:
        make_dir(data.log)
    if data.root.is_dir() and others_can_enter(data.root):
        # Left as it is (an operator may have opened it on purpose); new files are 0600 anyway.
        log.warning(
            "%s can be entered by other users: what earlier versions wrote there may be readable "
            "by them; `chmod -R go= %s` makes it private",
            data.root,
            data.root,
        )
    writer = LogWriter.open(
        data.log,
        info.key,
        seg_bits=seg_bits,
        durability=durability,
        checkpoint_interval=checkpoint_interval,
        create=create,
        clock=clock,
    )
    return writer, info
