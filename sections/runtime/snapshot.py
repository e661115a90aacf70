"""Snapshots of the projections, tagged with the (seq, h) of the last record they include.

    DATA/snapshots/snap-<seq, 16 digits>.json

    DATA/snapshots/snap-<seq, 16 digits>.<name>    attachments (the search index's database)

A snapshot is a cache: start-up loads the newest one that is valid for this log (right format,
same origin, and the log's record at its seq has its h) and replays the tail. A broken or foreign
snapshot is ignored with a warning. `projections` holds one entry per projection in the JSON;
a projection that is not JSON (the search index) goes in an attachment, a file of its own named
in the snapshot with its sha256 and written before it, so a snapshot never names a missing or
partial attachment.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from eventstore.atomic import fsync_dir, write_atomically
from eventstore.filemodes import make_dir
from eventstore.reader import LogReader
from sections.model.state import MemoryState
from sections.retrieval.documents import ContentOf
from sections.retrieval.search import SearchIndex

FORMAT = "ledgermem.snapshot/5"  # 2: items carry `ts`; 3: sessions carry their times; 4: roles
# counted per session; 5: the state keeps retention erasures still to append (`pending_retention`)
KEEP = 2
SEARCH_ATTACHMENT = "search.db"  # the search index's database, beside each snapshot
log = logging.getLogger("ledgermem.snapshot")


@dataclass(frozen=True)
class Snapshot:
    seq: int
    h: str
    projections: dict
    attachments: dict = field(default_factory=dict)  # name -> sha256 hex


def snapshot_paths(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(directory.glob("snap-*.json"), reverse=True)


def write_snapshot(
    directory: Path, origin: str, snapshot: Snapshot, attachments: dict[str, bytes] | None = None
) -> Path:
    make_dir(directory)
    stem = f"snap-{snapshot.seq:016d}"
    digests = {}
    for name, data in (attachments or {}).items():
        write_atomically(directory / f"{stem}.{name}", data)
        digests[name] = hashlib.sha256(data).hexdigest()
    body = orjson.dumps(
        {
            "format": FORMAT,
            "origin": origin,
            "seq": snapshot.seq,
            "h": snapshot.h,
            "projections": snapshot.projections,
            "attachments": digests,
        }
    )
    digest = hashlib.sha256(body).hexdigest().encode()
    path = directory / f"{stem}.json"
    write_atomically(path, digest + b"\n" + body)
    fsync_dir(directory)
    for old in snapshot_paths(directory)[KEEP:]:
        for file in directory.glob(old.stem + ".*"):
            file.unlink(missing_ok=True)
    return path


def read_attachment(directory: Path, snapshot: Snapshot, name: str) -> bytes | None:
    """A snapshot's attachment, if it is there and intact (else None, with a warning)."""
    expected = snapshot.attachments.get(name)
    if expected is None:
        return None
    path = directory / f"snap-{snapshot.seq:016d}.{name}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        log.warning("ignoring snapshot attachment %s: %s", path, exc)
        return None
    if hashlib.sha256(data).hexdigest() != expected:
        log.warning("ignoring snapshot attachment %s: its checksum does not match", path)
        return None
    return data


def read_snapshot(
    path: Path, origin: str, reader: LogReader, at_most: int | None = None
) -> Snapshot | None:
    """The snapshot in `path` if it is valid for this log, else None (with a warning)."""
    try:
        digest, _, body = path.read_bytes().partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != digest:
            raise ValueError("its checksum does not match: the file is damaged")
        data = orjson.loads(body)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r} is not {FORMAT}")
        if data["origin"] != origin:
            raise ValueError(f"it belongs to log {data['origin']!r}, not {origin!r}")
        seq, h = data["seq"], data["h"]
        if at_most is not None and seq > at_most:
            return None
        if reader.get(seq).h != h:
            raise ValueError(f"the log's record {seq} has another hash")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring snapshot %s: %s", path, exc)
        return None
    return Snapshot(seq, h, data["projections"], data.get("attachments", {}))


def newest_snapshot(
    directory: Path, origin: str, reader: LogReader, at_most: int | None = None
) -> Snapshot | None:
    for path in snapshot_paths(directory):
        snapshot = read_snapshot(path, origin, reader, at_most)
        if snapshot is not None:
            return snapshot
    return None


def purge_snapshots(directory: Path) -> None:
    """Delete every snapshot and attachment (erasure: they may hold erased content)."""
    if directory.is_dir():
        for path in [*directory.glob("snap-*"), *directory.glob("*.tmp")]:
            path.unlink(missing_ok=True)


def open_search_index(
    directory: Path,
    snapshot: Snapshot | None,
    state: MemoryState,
    touched: set[tuple[str, str]],
    content_of: ContentOf,
) -> tuple[SearchIndex, str]:
    """The search index as `snapshot` saved it, brought up to date for the sessions the log's
    tail `touched` (source "snapshot"); or, without a usable one, built from the state
    ("built")."""
    image = read_attachment(directory, snapshot, SEARCH_ATTACHMENT) if snapshot else None
    if image is not None:
        try:
            index = SearchIndex(image)
        except sqlite3.DatabaseError as exc:
            log.warning("ignoring the snapshot's search index: %s", exc)
        else:
            index.resync(state, touched, content_of)
            return index, "snapshot"
    index = SearchIndex()
    index.build(state, content_of)
    return index, "built"
