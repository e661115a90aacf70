"""Reading a log directory: from any seq, filtered, across segments, and tailing a live writer.

The reader needs no lock and works on a copy of the files. It only ever returns complete lines,
so a directory that another process is appending to never yields a partial record.

Seeking: segment n holds seqs n*S .. (n+1)*S-1, so the segment of a seq is a shift. Inside a
segment a sparse index holds the byte offset of every 256th line. It is kept in memory, grows
with the file, is rebuilt when the file is replaced (a redaction rewrites it), and, when the
reader is given an index directory, is saved there for full segments so a restart need not
rescan them. A saved index is checked against the line it points at before it is trusted.

Offsets belong to one file, not to a name: a redaction renames a new file over the segment, and
the lines after its first target move. So a read opens the segment once, and both the index
check and the bytes come from that open file (never a second open of the name, which may be
another file by then). An index holds its own file open: the inode it was built from cannot be
freed and given to a later file of the same name, so "same inode" means "same file". Only the
most recently used few hold one (descriptors are budgeted: `fd_reserve`); an index that let its
file go is trusted again only after every slot is checked against the lines, as a saved one is.
"""

from __future__ import annotations

import os
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from . import layout, segfile
from .atomic import write_atomically
from .errors import CorruptLog, InvalidInput
from .filemodes import make_dir
from .filters import MATCH_ALL, RecordFilter
from .merkle import CompactRange, consistency_proof, inclusion_proof, root
from .record import Record

INDEX_STRIDE = 256


HELD_INDEXES = 8  # segment indexes per reader that hold their file open (the rest are checked)


class _SegmentIndex:
    __slots__ = ("held", "ident", "size", "lines", "offsets")

    def __init__(self, f: BinaryIO, st: os.stat_result) -> None:
        # Its own descriptor of the file the offsets are of: while it is open, no other file
        # can get this inode number, so `ident` cannot match a later file of the same name.
        self.held: BinaryIO | None = None
        self.hold(f)
        self.ident = (st.st_dev, st.st_ino)
        self.size = 0  # bytes covered: the end of the last complete line indexed
        self.lines = 0  # complete lines covered
        self.offsets = array("Q")  # offset of line k*STRIDE

    def hold(self, f: BinaryIO) -> None:
        self.held = os.fdopen(os.dup(f.fileno()), "rb", buffering=0)

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
            self.held = None


class LogReader:
    def __init__(self, log_dir: str | os.PathLike[str], index_dir: Path | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.index_dir = index_dir
        first = self.log_dir / layout.segment_name(0)
        if not first.exists():
            raise CorruptLog(f"{self.log_dir} holds no log: no {first.name}; {layout.WHAT_TO_PASS}")
        line = segfile.first_line(first)
        if line is None:
            raise CorruptLog(f"{self.log_dir} holds no log: {first.name} has no header line")
        header = orjson.loads(line)["payload"]
        self.origin: str = header["origin"]
        self.seg_bits: int = header["seg_bits"]
        self.vkey: str = header["vkey"]
        self._seg_size = 1 << self.seg_bits
        self._indexes: dict[int, _SegmentIndex] = {}
        self._index_lock = threading.Lock()

    # ---- reading ---------------------------------------------------------------------------

    def lines(self, after: int = -1, until: int | None = None) -> Iterator[tuple[int, bytes]]:
        """(seq, line) for every complete record with after < seq < until, in order."""
        seq = after + 1
        mask = self._seg_size - 1
        while until is None or seq < until:
            n = seq >> self.seg_bits
            path = self.log_dir / layout.segment_name(n)
            try:
                f = open(path, "rb")  # noqa: SIM115  # why: closed below, after the generator's use
            except FileNotFoundError:
                return
            with f:
                # The offset is of this open file, and its bytes are read from it: a rewrite
                # renamed over the segment meanwhile is another file, read on the next call.
                position = self._locate(n, f, seq)
                if position is None:
                    return  # seq is beyond what is written
                offset, at = position
                # Skip from the indexed line to seq, then yield without per-line bookkeeping:
                # this loop runs once per record of every replay.
                found = segfile.iter_open_lines(f, offset)
                if at < seq:
                    for _ in found:
                        at += 1
                        if at == seq:
                            break
                    else:
                        return  # the segment ends before seq
                if until is None:
                    for _, line in found:
                        yield at, line
                        at += 1
                else:
                    for _, line in found:
                        if at >= until:
                            return
                        yield at, line
                        at += 1
            if at <= seq or at & mask:
                return  # nothing at seq yet, or the segment is still being written
            seq = at

    def records(
        self, after: int = -1, until: int | None = None, where: RecordFilter = MATCH_ALL
    ) -> Iterator[Record]:
        from_line = Record.from_line
        if where is MATCH_ALL:
            for _, line in self.lines(after, until):
                yield from_line(line)
            return
        for _, line in self.lines(after, until):
            record = from_line(line)
            if where.matches(record):
                yield record

    def get(self, seq: int) -> Record:
        for _, line in self.lines(seq - 1, seq + 1):
            return Record.from_line(line)
        raise InvalidInput(f"seq {seq} is not in the log at {self.log_dir}")

    def head(self) -> int:
        """The seq of the last complete record (-1 for none)."""
        segments = layout.list_segments(self.log_dir)
        for n, path in reversed(segments):
            lines = segfile.last_lines(path, 1)
            if lines:
                return orjson.loads(lines[0])["seq"]
            del n
        return -1

    def follow(
        self,
        after: int = -1,
        where: RecordFilter = MATCH_ALL,
        poll: float = 0.05,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Record]:
        """Every record after `after`, then wait for more: tails a directory another process writes.

        Once `stop()` says so, it reads once more and returns: every record durable by then is
        yielded, including one appended between the last read and the stop."""
        last = after
        while True:
            # Asked before the read, not after: a record made durable just before the stop is in
            # the files when this read starts.
            stopping = stop is not None and stop()
            for _, line in self.lines(last):
                record = Record.from_line(line)
                last = record.seq
                if where is MATCH_ALL or where.matches(record):
                    yield record
            if stopping:
                return
            time.sleep(poll)

    # ---- the sparse index ------------------------------------------------------------------

    def _locate(self, n: int, f: BinaryIO, seq: int) -> tuple[int, int] | None:
        """(byte offset in `f`, seq there) of an indexed line at or before `seq` in segment n,
        `f` being segment n's file as the caller opened it."""
        k = seq - (n << self.seg_bits)
        if k == 0:  # from the segment's start: no index needed (and none built for a full read)
            return 0, seq
        with self._index_lock:  # one reader may serve many threads (the service does)
            index = self._index(n, f)
            if k > index.lines:
                return None
            slot = min(k // INDEX_STRIDE, len(index.offsets) - 1)
            if slot < 0:
                return 0, n << self.seg_bits
            return index.offsets[slot], (n << self.seg_bits) + slot * INDEX_STRIDE

    def _index(self, n: int, f: BinaryIO) -> _SegmentIndex:
        st = os.fstat(f.fileno())
        index = self._indexes.pop(n, None)
        if index is not None and (
            index.ident != (st.st_dev, st.st_ino)
            or index.size > st.st_size
            or not self._continues(n, f, index, st)
            # Let go of its file: the inode number may be another file's since.
            or (index.held is None and not self._index_points_at_lines(f, n, index))
        ):
            index.close()  # another file (a rewrite), or this one was cut back and rewritten
            index = None
        if index is None:
            index = self._load_index(n, f, st) or _SegmentIndex(f, st)
        elif index.held is None:
            index.hold(f)
            if index.offsets:  # the slots are checked; the lines after the last are read again
                index.size = index.offsets.pop()
                index.lines = len(index.offsets) * INDEX_STRIDE
        self._indexes[n] = index  # the most recently used last
        held = [i for i in self._indexes.values() if i.held is not None]
        for old in held[: len(held) - HELD_INDEXES]:
            old.close()  # kept, to be checked before it is used again
        if index.size < st.st_size:
            self._extend(index, f)
            if index.lines == self._seg_size:
                self._save_index(n, index)
        return index

    def _continues(self, n: int, f: BinaryIO, index: _SegmentIndex, st: os.stat_result) -> bool:
        """Whether the bytes after the indexed ones start the next line: false if the file was
        cut back (a failed write abandoned) and written again since the index was built."""
        if index.size == 0 or index.size >= st.st_size:
            return True
        prefix = b'{"v":1,"seq":%d,' % ((n << self.seg_bits) + index.lines)
        f.seek(index.size)
        got = f.read(len(prefix))
        return len(got) < len(prefix) or got == prefix

    def _extend(self, index: _SegmentIndex, f: BinaryIO) -> None:
        for offset, line in segfile.iter_open_lines(f, index.size):
            if index.lines % INDEX_STRIDE == 0:
                index.offsets.append(offset)
            index.lines += 1
            index.size = offset + len(line) + 1

    def _index_path(self, n: int) -> Path | None:
        if self.index_dir is None:
            return None
        return self.index_dir / (layout.segment_name(n) + ".idx")

    def _load_index(self, n: int, f: BinaryIO, st: os.stat_result) -> _SegmentIndex | None:
        index_path = self._index_path(n)
        if index_path is None:
            return None
        try:
            raw = array("Q")
            raw.frombytes(index_path.read_bytes())
        except (OSError, ValueError):
            return None
        slots = -(-self._seg_size // INDEX_STRIDE)
        if len(raw) != 2 + slots or raw[0] != st.st_size or raw[1] != INDEX_STRIDE:
            return None
        index = _SegmentIndex(f, st)
        index.size, index.lines, index.offsets = st.st_size, self._seg_size, raw[2:]
        if not self._index_points_at_lines(f, n, index):
            index.close()
            return None
        return index

    def _index_points_at_lines(self, f: BinaryIO, n: int, index: _SegmentIndex) -> bool:
        """Trust a saved index only if every slot points at the start of the line it claims."""
        offsets = index.offsets
        if not offsets:
            return True
        if offsets[0] != 0 or any(a >= b for a, b in zip(offsets, offsets[1:], strict=False)):
            return False
        if offsets[-1] >= index.size:
            return False
        for slot, offset in enumerate(offsets):
            f.seek(offset)
            expected = (n << self.seg_bits) + slot * INDEX_STRIDE
            if not f.readline().startswith(b'{"v":1,"seq":%d,' % expected):
                return False
        return True

    def _save_index(self, n: int, index: _SegmentIndex) -> None:
        index_path = self._index_path(n)
        if index_path is None:
            return
        try:
            make_dir(index_path.parent)
            # A cache, checked against the lines it points at when loaded: no fsync needed.
            write_atomically(
                index_path,
                array("Q", [index.size, INDEX_STRIDE]).tobytes() + index.offsets.tobytes(),
                durable=False,
            )
        except OSError:
            pass  # the index is a cache: without it, seeks scan one segment

    # ---- Merkle proofs ---------------------------------------------------------------------

    def leaf_hashes(self, lo: int, hi: int) -> list[bytes]:
        hashes = [segfile.leaf_hash_of(line) for _, line in self.lines(lo - 1, hi)]
        if len(hashes) != hi - lo:
            raise InvalidInput(f"the log holds fewer than {hi} records")
        return hashes

    def subtree_root(self, lo: int, hi: int) -> bytes:
        """Root of the leaves [lo, hi); whole segments come from their seal/open records."""
        size = self._seg_size
        if hi - lo >= size and lo % size == 0:
            tree = CompactRange()
            n = lo >> self.seg_bits
            while (n + 1) * size <= hi:
                tree.append_subtree(size, self._segment_root(n))
                n += 1
            for leaf in self.leaf_hashes(n * size, hi):
                tree.append(leaf)
            return tree.root()
        return root(self.leaf_hashes(lo, hi))

    def _segment_root(self, n: int) -> bytes:
        return root(self.leaf_hashes(n << self.seg_bits, (n + 1) << self.seg_bits))

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        return inclusion_proof(seq, size, self.subtree_root)

    def consistency_proof(self, first: int, second: int) -> list[bytes]:
        return consistency_proof(first, second, self.subtree_root)

    def root(self, size: int) -> bytes:
        return self.subtree_root(0, size) if size else root([])
