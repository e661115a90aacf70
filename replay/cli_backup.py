"""`ledgermem backup --data DIR OUT`: a consistent copy of a data directory, while the service runs.

The order makes the copy verify. The `checkpoint` file is read first; it only ever covers durable
records, so the segments read afterwards hold at least its size. Copying the segments first
instead can catch a checkpoint newer than the copied segments: the copy then FAILs ("records
behind a checkpoint are missing"). Only complete lines are copied, so a record being appended is
either whole in the copy or absent. A checkpoint that changed during the copy replaces the first
one when the copy holds every record it covers and its root matches them.

Erased content stays erased: a redaction whose segment rewrite the copy missed (it raced the
copy) is applied to the copy, and snapshots older than the copy's last redaction are left out.
The reader's offset indexes (`DATA/index/`) are a cache and are not copied. The copy is private
whatever the source's modes: directories 0700, files 0600 (it holds the signing key).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import orjson

from eventstore import layout, segfile
from eventstore.atomic import fsync_dir, write_atomically
from eventstore.checkpoint import Checkpoint, CheckpointError, VerifierKey, parse_checkpoint
from eventstore.errors import CorruptLog, InvalidInput
from eventstore.filemodes import DIR_MODE, FILE_MODE, make_dir
from eventstore.merkle import CompactRange
from eventstore.store import load_or_create_key
from eventstore.verify import verify_log
from eventstore.wording import count

from .mirror import redact_segments
from .options import REDACTION_MARK, erased_from

EXTEND_TRIES = 20  # re-reads of the last segment while it is short of the checkpoint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, metavar="DIR", help="the data directory to copy")
    parser.add_argument("out", metavar="OUT", help="a new (or empty) directory for the copy")
    parser.add_argument(
        "--verify", action="store_true", help="verify the copy afterwards (exit 1 on FAIL)"
    )


def run(args: argparse.Namespace) -> int:
    summary = backup(Path(args.data), Path(args.out))
    line = (
        f"backup: {count(summary.records, 'record')} in {count(summary.segments, 'segment')}, "
        f"checkpoint {summary.checkpoint_size}, {count(summary.snapshots, 'snapshot')}, "
        f"keys -> {args.out}"
    )
    if summary.redacted:
        caught = count(summary.redacted, "payload")
        line += f" ({caught} redacted that the copy caught before their rewrite)"
    if args.verify:
        report = verify_log(Path(args.out) / "log", vkey=summary.vkey)
        print(f"{line}; verify: {report.verdict}")
        return report.exit_code
    print(line)
    return 0


class Summary:
    def __init__(self, vkey: VerifierKey) -> None:
        self.vkey = vkey
        self.records = 0
        self.segments = 0
        self.checkpoint_size = 0
        self.snapshots = 0
        self.redacted = 0


def backup(data_dir: Path, out: Path) -> Summary:
    source = layout.DataDir(data_dir)
    if not (source.log / layout.segment_name(0)).is_file():
        raise InvalidInput(f"{data_dir} holds no log ({source.log / layout.segment_name(0)})")
    vkey = load_or_create_key(source, create=False).key.vkey
    target = layout.DataDir(out)
    _make_out(source.root, target.root)
    summary = Summary(vkey)

    target.log.mkdir(mode=DIR_MODE)
    copy = SegmentCopy(source.log, target.log)
    checkpoint = _read_checkpoint(source.log, vkey)  # first: it covers only durable records
    copy.extend_to(checkpoint)
    newer = _read_checkpoint(source.log, vkey)  # signed during the copy: one catch-up
    if newer.size > checkpoint.size:
        copy.extend_to(newer)
        checkpoint = newer
    copy.finish()
    write_atomically(target.log / layout.CHECKPOINT, checkpoint.text.encode())
    if copy.redactions:
        summary.redacted = redact_segments(target.log, copy.seg_bits, copy.redactions)
    _copy_tree(source.log / layout.QUARANTINE, target.log / layout.QUARANTINE)
    fsync_dir(target.log)

    _copy_tree(source.keys, target.keys)
    summary.snapshots = _copy_snapshots(
        source.root / "snapshots", target.root / "snapshots", copy.snapshot_floor, copy.records
    )
    fsync_dir(target.root)
    summary.records = copy.records
    summary.segments = len(copy.leaves)
    summary.checkpoint_size = checkpoint.size
    return summary


def _make_out(source: Path, out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidInput(f"{out} exists and is not an empty directory: back up into a new one")
    make_dir(out)
    os.chmod(out, DIR_MODE)  # it holds the signing key: private, whatever the source's modes
    fsync_dir(out.parent)


def _read_checkpoint(log_dir: Path, vkey: VerifierKey) -> Checkpoint:
    path = log_dir / layout.CHECKPOINT
    try:
        return parse_checkpoint(path.read_bytes().decode("utf-8"), vkey)
    except FileNotFoundError:
        raise InvalidInput(
            f"{path} does not exist: no signed checkpoint to anchor a copy"
        ) from None
    except (CheckpointError, UnicodeDecodeError) as exc:
        raise CorruptLog(f"{path} does not verify with {vkey}: {exc}") from None


class SegmentCopy:
    """The complete lines of the segments, copied until they hold a checkpoint's records.

    A segment listed before another is sealed: it is copied once. The last one may still grow,
    so it is copied whole again each time the copy must reach further.
    """

    def __init__(self, source: Path, target: Path) -> None:
        self.source, self.target = source, target
        self.leaves: dict[int, list[bytes]] = {}  # segment -> leaf hashes of its records
        self.sealed: set[int] = set()
        self.redactions: dict[int, int] = {}  # target seq -> redaction seq, of those copied
        # Snapshots before this seq may hold content erased since: the erase record's seq
        # (the state after it holds none of that content), or the seq after a raw redaction.
        self.snapshot_floor = 0
        self.seg_bits = 0

    @property
    def records(self) -> int:
        return sum(len(v) for v in self.leaves.values())

    def extend_to(self, checkpoint: Checkpoint) -> None:
        """Copy until the copy holds the checkpoint's records, and check its root."""
        for _ in range(EXTEND_TRIES):
            self._copy_pass()
            if self.records >= checkpoint.size:
                break
            time.sleep(0.05)  # the checkpoint covers durable records: they are in the files
        else:
            raise CorruptLog(
                f"{self.source}: the segments hold {self.records} complete records, but "
                f"{self.source / layout.CHECKPOINT} covers {checkpoint.size}: records behind "
                "a checkpoint are missing"
            )
        tree = CompactRange()
        for leaf in [leaf for n in sorted(self.leaves) for leaf in self.leaves[n]]:
            if tree.size == checkpoint.size:
                break
            tree.append(leaf)
        if tree.root() != checkpoint.root:
            raise CorruptLog(
                f"{self.source / layout.CHECKPOINT} (size {checkpoint.size}) disagrees with the "
                "Merkle root of the copied records: the log is damaged"
            )

    def _copy_pass(self) -> None:
        segments = layout.list_segments(self.source)
        for k, (n, path) in enumerate(segments):
            if n in self.sealed:
                continue
            data = _complete_lines(path)
            if k < len(segments) - 1:
                self.sealed.add(n)
            elif not data:
                continue  # created by a rotation, its first line not written yet
            _write_file(self.target / path.name, data)
            leaves = self.leaves[n] = []
            for line in data[:-1].split(b"\n") if data else ():
                leaves.append(segfile.leaf_hash_of(line))
                if REDACTION_MARK in line:
                    self._note_redaction(orjson.loads(line))
            if n == 0 and data:
                self.seg_bits = orjson.loads(data[: data.index(b"\n")])["payload"]["seg_bits"]

    def _note_redaction(self, record: dict) -> None:
        for t in record["payload"]["targets"]:
            self.redactions[t["seq"]] = record["seq"]
        self.snapshot_floor = max(self.snapshot_floor, erased_from(record))

    def finish(self) -> None:
        for n in self.leaves:
            _fsync(self.target / layout.segment_name(n))


def _complete_lines(path: Path) -> bytes:
    """The file's complete lines: a line being appended is left out."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a small directory's files."""
    if not source.is_dir():
        return
    make_dir(target)
    for entry in sorted(source.iterdir()):
        if entry.is_file() and not entry.name.endswith(".tmp"):
            _copy_file(entry, target / entry.name)
            _fsync(target / entry.name)
    fsync_dir(target)


def _copy_snapshots(source: Path, target: Path, floor: int, records: int) -> int:
    """Copy the snapshots a restart from the copy can use and that cannot hold erased content:
    taken at or after `floor`, and within the copied records."""
    if not source.is_dir():
        return 0
    copied = 0
    for path in sorted(source.glob("snap-*.json")):
        try:
            seq = int(path.name[len("snap-") : -len(".json")])
        except ValueError:
            continue
        if not floor <= seq < records:
            continue
        make_dir(target)
        try:
            _copy_file(path, target / path.name)
        except FileNotFoundError:
            continue  # replaced by a newer one meanwhile
        _fsync(target / path.name)
        copied += 1
    if copied:
        fsync_dir(target)
    return copied


def _copy_file(source: Path, target: Path) -> None:
    """Copy one file; the copy is 0600 whatever the source's mode (filemodes.py)."""
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with open(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)


def _write_file(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
