"""`export-log`: one partition's records written out as a spec log directory, for auditors.

Engine-neutral: the reads come from a `PartitionReader` (eventstore/pg/export.py and
eventstore/redis/export.py open one). The export copies what the store holds, byte for byte,
and judges nothing: the unchanged offline verifier (`ledgermem verify OUT --vkey ...`) is the
judge. That is why this is not a `Mirror`: the mirror refuses a line that does not continue its
chain (it is a cache that must stay sound), so a record altered or deleted in the store would
stop it before the verifier could name the place. Here a record goes into the segment its seq names (`seq >> seg_bits`), in seq
order, as it is; an altered record then fails verification at its own file, line and seq, and a
deleted one as the line where the next seq sits instead.

Incremental by construction: a second export into the same directory continues after the last
seq it holds (a torn tail from an interrupted export is cut first). The targets of a redaction
record copied now are copied again from the store, so an export taken before an erasure loses
the erased payloads on the next run. Everything written is fsynced before the checkpoint file
(the newest one the rows cover) is replaced, so the directory on disk always verifies as far as
its checkpoint says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from .. import layout, redaction, segfile
from ..atomic import atomic_file, fsync_dir, write_atomically
from ..errors import InvalidInput
from ..filemodes import FILE_MODE, make_dir
from ..partitions import partition_origin
from ..record import REDACTION, Record
from . import StoreError, StoreInfo
from .reader import PartitionReader

PAGE_ROWS = 1000


@dataclass(frozen=True)
class Exported:
    partition: int
    first: int  # the first seq this run copied
    size: int  # the seq after the last row the directory holds
    checkpoint_size: int | None  # what the installed checkpoint covers (None: no checkpoint yet)
    redactions: int  # redaction records copied this run


def export_partition(
    reader: PartitionReader, info: StoreInfo, partition: int, out: str | os.PathLike[str]
) -> Exported:
    """Copy partition `partition`'s records after what `out` holds into `out`."""
    check_partition(info, partition)
    return _Export(reader, info, partition, Path(out)).run()


def check_partition(info: StoreInfo, partition: int) -> None:
    if not 0 <= partition < info.partitions:
        raise InvalidInput(
            f"partition {partition} does not exist: the store has partitions "
            f"0..{info.partitions - 1}"
        )


class _Export:
    def __init__(self, reader: PartitionReader, info: StoreInfo, partition: int, out: Path) -> None:
        self.reader, self.info, self.partition = reader, info, partition
        self.out = make_dir(out)
        self.seg_bits = info.seg_bits
        self.origin = partition_origin(info.origin, partition)
        self._fd, self._segment = -1, -1
        self._touched: set[int] = set()  # segment files to fsync

    def run(self) -> Exported:
        start = self._resume_point()
        redactions = 0
        seq = start
        try:
            while True:
                rows = self.reader.rows(self.partition, seq, PAGE_ROWS)
                for row_seq, line in rows:
                    self._append(row_seq, line)
                    if _is_redaction(line):
                        redactions += 1
                        self._recopy_targets(line, start)
                if rows:
                    seq = rows[-1][0] + 1
                if len(rows) < PAGE_ROWS:
                    break
        finally:
            self._close()
        self._sync()
        checkpoint = self._install_checkpoint(seq)
        return Exported(self.partition, start, seq, checkpoint, redactions)

    def _resume_point(self) -> int:
        """The seq after the last complete line `out` holds; a torn tail is cut first."""
        segments = layout.list_segments(self.out)
        if not segments:
            return 0
        self._check_origin(segments[0][1])
        for n, path in reversed(segments):
            data = path.read_bytes()
            cut = data.rfind(b"\n") + 1
            if cut < len(data):
                with open(path, "r+b") as f:
                    f.truncate(cut)  # an export interrupted mid-line
            lines = segfile.last_lines(path, 1)
            if lines:
                try:
                    return redaction.seq_of(lines[0]) + 1
                except ValueError:
                    # A line the table holds damaged: continue after it by position.
                    return (n << self.seg_bits) + sum(1 for _ in segfile.iter_lines(path))
            path.unlink()
        return 0

    def _check_origin(self, first_segment: Path) -> None:
        line = segfile.first_line(first_segment)
        try:
            origin = orjson.loads(line)["payload"]["origin"] if line else None
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return  # a damaged header row: the verifier will name it
        if origin is not None and origin != self.origin:
            raise StoreError(
                f"{self.out} holds the log of {origin!r}, not partition {self.partition} "
                f"({self.origin!r}): export into an empty directory"
            )

    def _append(self, seq: int, line: bytes) -> None:
        n = seq >> self.seg_bits
        if n != self._segment:
            self._close()
            path = self.out / layout.segment_name(n)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            self._segment = n
            self._touched.add(n)
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]

    def _recopy_targets(self, line: bytes, start: int) -> None:
        """Copy again, from the table, the targets of a redaction that this run did not copy
        itself (they may have lost their payloads since an earlier export)."""
        payload = Record.from_line(line).payload
        assert isinstance(payload, dict)  # a redaction payload is an object (format section 5)
        targets = [t.get("seq") for t in payload.get("targets", [])]
        earlier = sorted(s for s in targets if type(s) is int and 0 <= s < start)
        if not earlier:
            return
        rows = self.reader.lines_at(self.partition, earlier)
        by_segment: dict[int, dict[int, bytes]] = {}
        for seq, row_line in sorted(rows.items()):
            by_segment.setdefault(seq >> self.seg_bits, {})[seq] = row_line
        self._close()  # the open segment may be one of them
        for n, lines in sorted(by_segment.items()):
            path = self.out / layout.segment_name(n)
            with open(path, "rb") as src, atomic_file(path) as dst:
                for old in src:
                    try:
                        seq = redaction.seq_of(old)
                    except ValueError:
                        seq = -1
                    dst.write(lines.get(seq, old))

    def _close(self) -> None:
        fd, self._fd, self._segment = self._fd, -1, -1
        if fd >= 0:
            os.close(fd)

    def _sync(self) -> None:
        for n in sorted(self._touched):
            fd = os.open(self.out / layout.segment_name(n), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.out)

    def _install_checkpoint(self, size: int) -> int | None:
        row = self.reader.checkpoint(self.partition, size)
        if row is None:
            return None
        write_atomically(self.out / layout.CHECKPOINT, row[1].encode())
        return row[0]


def _is_redaction(line: bytes) -> bool:
    if b'"type":"' + REDACTION.encode() + b'"' not in line:
        return False
    try:
        record = Record.from_line(line)
    except (orjson.JSONDecodeError, KeyError):
        return False
    return record.is_control and record.type == REDACTION and isinstance(record.payload, dict)
