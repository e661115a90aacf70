"""Opening an existing log directory (docs/format.md section 8): what survives, and from where
the chain continues.

The decisions about bytes are `recovery.scan_tail`'s; this module does the file work around
them: the header, the roots of the full segments, the checkpoint checks, quarantining and
cutting a crash leftover, and finishing a redaction that a crash interrupted. It returns the
state the sequencer continues from and the payload of the `log.resume` record to append.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from . import layout, redaction, segfile
from .atomic import fsync_dir
from .checkpoint import SigningKey, sign_checkpoint
from .errors import BadKey, CorruptLog
from .file_sink import FileSink
from .filemodes import DIR_MODE, FILE_MODE
from .identifiers import CONTROL_TENANT
from .merkle import CompactRange
from .record import genesis
from .recovery import TailScan, newest_checkpoint, scan_tail
from .sequencer import SequencerState
from .sink import RedactionRewrite, SignedCheckpoint

Segments = list[tuple[int, Path]]


@dataclass
class Recovered:
    state: SequencerState  # what the sequencer continues from: every surviving record
    checkpoint_size: int  # the size the newest checkpoint on disk covers now
    resume: dict  # the payload of the log.resume record to append (as found, before any repair)
    sealed_root: bytes | None  # the last full segment's root, when its successor has no open


def recover(
    log_dir: Path, key: SigningKey, seg_bits: int, create: bool, sink: FileSink
) -> Recovered | None:
    """Recover the log in `log_dir` and open its last segment in `sink`.

    Returns None when there is no log yet (temporaries removed): the caller creates one.
    Raises CorruptLog (or BadKey) and changes no file when the damage is not a crash leftover.
    """
    segments = layout.list_segments(log_dir)
    if not segments:
        if not create:
            raise CorruptLog(f"{log_dir} holds no log (no segment files)")
        remove_temporaries(log_dir)
        return None
    numbers = [n for n, _ in segments]
    if numbers != list(range(len(numbers))):
        raise CorruptLog(f"{log_dir}: segment numbers are not contiguous from 0: {numbers}")
    if numbers == [0] and segfile.first_line(segments[0][1]) is None:
        _discard_unfinished_creation(log_dir, segments[0][1])
        return None
    return _Recovery(log_dir, key, segments, sink).run()


def remove_temporaries(log_dir: Path) -> None:
    # A crash mid-redaction or mid-checkpoint leaves a *.tmp beside the intact original.
    # Only called once the log is found sound: a refused open leaves every file as it was,
    # and a checkpoint.tmp may be evidence of records that have since gone missing.
    for entry in os.scandir(log_dir):
        if entry.name.endswith(".tmp") and entry.is_file():
            os.unlink(entry.path)


def _discard_unfinished_creation(log_dir: Path, path: Path) -> None:
    """Clean up after a crash that left segment 0 without a complete header line.

    The first checkpoint is written only after the header is durable, so a `checkpoint`
    file means the header was complete once: then this is damage, not a crash leftover.
    """
    checkpoint = log_dir / layout.CHECKPOINT
    if checkpoint.exists():
        raise CorruptLog(
            f"{path} has no complete header line, but {checkpoint} exists, so the header "
            "was durable once: records behind a checkpoint are missing"
        )
    remove_temporaries(log_dir)
    fragment = path.read_bytes()
    if fragment:
        quarantine(log_dir, 0, 0, fragment)
    path.unlink()
    fsync_dir(log_dir)


def quarantine(log_dir: Path, segment: int, offset: int, fragment: bytes) -> None:
    """Keep a crash leftover in `quarantine/` (durably) before the segment is cut."""
    qdir = log_dir / layout.QUARANTINE
    if not qdir.is_dir():
        qdir.mkdir(mode=DIR_MODE)
        fsync_dir(log_dir)  # else a power loss can drop the new directory
    name = layout.quarantine_name(segment, offset, set(os.listdir(qdir)))
    fd = os.open(qdir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        view = memoryview(fragment)
        while view:  # the segment is cut right after: every byte must be in the copy
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(qdir)


def segment_root_from_files(log_dir: Path, n: int, seg_size: int) -> bytes:
    leaves = segfile.leaf_hashes(log_dir / layout.segment_name(n))
    tree = CompactRange()
    for leaf in leaves[:seg_size]:
        tree.append(leaf)
    return tree.root()


class _Recovery:
    def __init__(self, log_dir: Path, key: SigningKey, segments: Segments, sink: FileSink):
        self.log_dir, self.key, self.segments, self.sink = log_dir, key, segments, sink

    def run(self) -> Recovered:
        log_dir, segments = self.log_dir, self.segments
        header = self._read_header(segments[0][1])
        seg_bits = self.sink.seg_bits = header["seg_bits"]
        self.seg_size = size_s = 1 << seg_bits
        last_n, last_path = segments[-1]

        # 1. The compact range from the roots of the full segments before the last one.
        self.tree = tree = CompactRange()
        for n in range(last_n):
            tree.append_subtree(size_s, self._segment_root(n))
        prev = genesis(self.key.origin) if last_n == 0 else self._last_hash(segments[last_n - 1][1])

        # 2. Validate the last segment and find its crash leftover.
        data = last_path.read_bytes()
        scan = scan_tail(data, last_n * size_s, prev, seg_bits, last_path.name)
        survivors = last_n * size_s + scan.count

        # 3. Refuse when a checkpoint covers more than survives or disagrees with the records.
        newest = self._check_checkpoints(last_n, scan, survivors)
        remove_temporaries(log_dir)  # from here on the files change

        torn_bytes, fragment_sha = 0, None
        if scan.leftover_offset is not None:
            fragment = data[scan.leftover_offset :]
            torn_bytes, fragment_sha = len(fragment), hashlib.sha256(fragment).hexdigest()
            quarantine(log_dir, last_n, scan.leftover_offset, fragment)
            with open(last_path, "r+b") as f:
                f.truncate(scan.leftover_offset)
                os.fsync(f.fileno())

        seg_tree = CompactRange()
        for leaf in scan.leaves:
            tree.append(leaf)
            seg_tree.append(leaf)
        last = scan.leaves[-1] if scan.leaves else prev
        state = SequencerState(seg_bits, survivors, last, last_n, tree, seg_tree)
        self.sink.open_segment(last_n, existing=True)
        self.sink.continue_chain(survivors, last.hex())

        last_event = self._last_event(scan)
        last_control = None  # the type of the last event when it is a control record
        if last_event is not None and last_event["tenant"] == CONTROL_TENANT:
            last_control = last_event["type"]
        checkpoint_size = newest
        if last_event is not None and last_control == "redaction":
            checkpoint_size = self._finish_redaction(last_event, survivors)
        sealed_root = None
        if scan.count == 0:  # the crash came between the seal and the next segment.open
            sealed_root = segment_root_from_files(log_dir, last_n - 1, size_s)
        resume = {
            "checkpoint_size": newest,
            "clean": last_control == "log.close",
            "fragment_sha256": fragment_sha,
            "torn_bytes": torn_bytes,
        }
        return Recovered(state, checkpoint_size, resume, sealed_root)

    def _read_header(self, path: Path) -> dict:
        line = segfile.first_line(path)
        try:
            header = orjson.loads(line or b"")["payload"]  # no line: a JSONDecodeError
            seg_bits, origin, vkey = header["seg_bits"], header["origin"], header["vkey"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise CorruptLog(f"{path}: the first line is not a segment 0 header") from None
        if origin != self.key.origin or vkey != str(self.key.vkey):
            raise BadKey(
                f"the signing key is for {self.key.vkey}, but {path} was made by {vkey}: "
                "use the key this log was created with"
            )
        if type(seg_bits) is not int or not 2 <= seg_bits <= 40:
            raise CorruptLog(f"{path}: seg_bits {seg_bits!r} is outside 2..40")
        return header

    def _segment_root(self, n: int) -> bytes:
        """Root of full segment n: from the next segment.open, or from the leaves themselves."""
        segments = self.segments
        following = segfile.first_line(segments[n + 1][1])
        if following is not None:
            try:
                return base64.b64decode(orjson.loads(following)["payload"]["prev_segment_root"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                pass
        leaves = segfile.leaf_hashes(segments[n][1])
        if len(leaves) != self.seg_size:
            raise CorruptLog(f"{segments[n][1]} holds {len(leaves)} records, not {self.seg_size}")
        tree = CompactRange()
        for leaf in leaves:
            tree.append(leaf)
        return tree.root()

    def _last_hash(self, path: Path) -> bytes:
        lines = segfile.last_lines(path, 1)
        if not lines:
            raise CorruptLog(f"{path} is empty, but a later segment exists")
        obj = orjson.loads(lines[0])
        if obj.get("type") != "segment.seal":
            raise CorruptLog(f"{path} is followed by another segment but is not sealed")
        return bytes.fromhex(obj["h"])

    def _check_checkpoints(self, last_n: int, scan: TailScan, survivors: int) -> int:
        texts = []
        path = self.log_dir / layout.CHECKPOINT
        if path.exists():
            texts.append((path.name, path.read_text("utf-8")))
        if last_n > 0 and scan.first is not None:
            texts.append((f"segment.open@{scan.first['seq']}", scan.first["payload"]["checkpoint"]))
        return newest_checkpoint(
            texts,
            self.key.vkey,
            survivors,
            f"only {survivors} survive in {layout.segment_name(last_n)}",
            lambda size: self._root_at(size, last_n, scan),
        )

    def _root_at(self, size: int, last_n: int, scan: TailScan) -> bytes:
        first_of_last = last_n * self.seg_size
        if size >= first_of_last:
            tree = self.tree.copy()
            for leaf in scan.leaves[: size - first_of_last]:
                tree.append(leaf)
            return tree.root()
        # An older checkpoint: rebuild from the segment roots and the leaves of one segment.
        tree = CompactRange()
        whole, rest = divmod(size, self.seg_size)
        for n in range(whole):
            tree.append_subtree(self.seg_size, self._segment_root(n))
        for leaf in segfile.leaf_hashes(self.segments[whole][1])[:rest]:
            tree.append(leaf)
        return tree.root()

    def _last_event(self, scan: TailScan) -> dict | None:
        """The last record that is not segment.seal/open, parsed."""
        last_event = scan.last_event
        if last_event is None and len(self.segments) > 1:
            lines = segfile.last_lines(self.segments[-2][1], 2)
            last_event = orjson.loads(lines[0]) if len(lines) == 2 else None
        return last_event

    def _finish_redaction(self, record: dict, size: int) -> int:
        """Complete a redaction that a crash interrupted between its record and its rewrite;
        returns the size of the checkpoint it installs.

        Nothing is appended after a redaction record until its rewrite is done, so an unfinished
        one is always the last record. Its targets' payloads are removed now, as it asked.
        """
        text = sign_checkpoint(self.key, size, self.tree.root())
        self.sink.install_checkpoint(SignedCheckpoint(text, size))  # it covers the redaction
        unfinished = [
            target["seq"]
            for target in record["payload"]["targets"]
            if self.sink.read_record(target["seq"]).has_payload
        ]
        targets = redaction.targets_by_segment(unfinished, record["seq"], self.sink.seg_bits)
        self.sink.rewrite_redacted(RedactionRewrite(targets))
        return size
