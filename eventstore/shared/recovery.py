"""Taking over a partition: where its log stands in the store, checked before anyone appends.

The store is the truth, so there is no torn tail to cut (an append is one transaction or one
script); what a takeover must still establish is that the log it continues is the one the
checkpoints signed. The Merkle state is rebuilt from the roots of the full segments (stored with
each segment.open) and the leaves (h) of the last segment's lines; every line of the last
segment goes through the same `check_line` as recovery from files and the verifier; each full
segment's root is held against the `prev_segment_root` its successor's segment.open carries; the
newest checkpoint in the store and the one embedded in the last segment.open must verify under
the partition's key and agree with the rebuilt tree. Any disagreement raises CorruptLog and the
partition is not served. A redaction interrupted before its rewrite (the last record is a
redaction whose targets still carry payloads) is finished through the sink, as file recovery
does, before `log.resume` is appended. The engine only supplies the reads (`PartitionReader`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson

from .. import redaction
from ..checkpoint import SigningKey, sign_checkpoint
from ..errors import CorruptLog
from ..file_recovery import Recovered
from ..identifiers import CONTROL_TENANT
from ..linecheck import LineError, check_line
from ..merkle import CompactRange
from ..partitions import partition_origin
from ..record import SEGMENT_OPEN, SEGMENT_SEAL, genesis
from ..recovery import newest_checkpoint
from ..sequencer import SequencerState
from ..sink import DurabilitySink, RedactionRewrite, SignedCheckpoint
from ..writer import LogWriter
from . import StoreError, StoreInfo
from .reader import PartitionReader, lines_between


def partition_key(info: StoreInfo, key: SigningKey, partition: int) -> SigningKey:
    """The key partition N signs with: `key` under the partition's origin, checked against
    the store (a key already under that origin is checked and returned as it is)."""
    if not 0 <= partition < info.partitions:
        raise StoreError(f"the store has partitions 0..{info.partitions - 1}, not {partition}")
    if key.origin == partition_origin(info.origin, partition):
        key = key.with_origin(info.origin)
    return info.key_for(key, partition)


def recover_partition(
    reader: PartitionReader,
    info: StoreInfo,
    key: SigningKey,
    partition: int,
    *,
    sink: DurabilitySink | None = None,
) -> Recovered | None:
    """Where partition `partition`'s log stands, checked; None when it is empty.

    `sink` (holding the partition's lease) is needed only to finish an interrupted redaction;
    without one such a partition raises StoreError."""
    return _PartitionRecovery(
        reader, info, partition_key(info, key, partition), partition, sink
    ).run()


def open_writer_on(
    sink: DurabilitySink,
    key: SigningKey,
    seg_bits: int,
    recover: Callable[[], Recovered | None],
    **writer_options: Any,
) -> LogWriter:
    """The writer on an engine's fenced `sink` (eventstore/pg/leadership.py,
    eventstore/redis/leadership.py): `recover()` (the engine's recover_partition over its own
    connection, handed `sink`) and then `LogWriter.create_on` for an empty partition (None),
    `resume_on` otherwise. The sink is closed when any of it raises (CorruptLog, CommitRefused,
    a store error): no writer owns it then."""
    try:
        recovered = recover()
        if recovered is None:
            return LogWriter.create_on(sink, key, seg_bits=seg_bits, **writer_options)
        return LogWriter.resume_on(sink, key, recovered, **writer_options)
    except BaseException:
        sink.close()
        raise


def _h_of(line: bytes) -> bytes:
    return bytes.fromhex(orjson.loads(line)["h"])


class _PartitionRecovery:
    def __init__(
        self,
        reader: PartitionReader,
        info: StoreInfo,
        key: SigningKey,
        partition: int,
        sink: DurabilitySink | None,
    ) -> None:
        self.reader, self.info, self.key, self.partition = reader, info, key, partition
        self.sink = sink
        self.seg_bits = info.seg_bits
        self.seg_size = 1 << info.seg_bits
        self.where = f"partition {partition}"

    def run(self) -> Recovered | None:
        last_seq, last_h = self.reader.head(self.partition)
        if last_seq < 0:
            return None
        size = last_seq + 1
        last_n = last_seq >> self.seg_bits  # the segment holding the last record
        first_of_last = last_n << self.seg_bits

        # 1. The compact range from the roots of the full segments.
        self.roots = self._segment_roots(last_n)
        tree = CompactRange()
        for n in range(last_n):
            tree.append_subtree(self.seg_size, self.roots[n])

        # 2. The last segment, line by line, chained from the seal before it.
        prev = genesis(self.key.origin) if last_n == 0 else self._h_at(first_of_last - 1)
        rows = self._lines(first_of_last, last_seq)
        if len(rows) != size - first_of_last:
            raise CorruptLog(
                f"{self.where}: the head says seq {last_seq}, but segment {last_n} holds "
                f"{len(rows)} records from seq {first_of_last}"
            )
        leaves, objs = [], []
        for seq, line in rows:
            try:
                checked = check_line(line[:-1], seq=seq, prev=prev, seg_bits=self.seg_bits)
            except LineError as exc:
                raise CorruptLog(f"{self.where}, seq {seq}: [{exc.check}] {exc}") from None
            leaves.append(checked.h)
            objs.append(checked.obj)
            prev = checked.h
        if prev != bytes(last_h):
            raise CorruptLog(f"{self.where}: the head's last_h is not the h of seq {last_seq}")
        seg_tree = CompactRange()
        for leaf in leaves:
            tree.append(leaf)
            seg_tree.append(leaf)
        self.tree, self.leaves, self.first_of_last = tree, leaves, first_of_last

        # 3. The checkpoints: the newest in the store, and the one the last segment.open embeds.
        newest = self._check_checkpoints(objs[0] if last_n > 0 else None, size)

        state = SequencerState(self.seg_bits, size, prev, last_n, tree, seg_tree)
        last_event = self._last_event(objs, first_of_last)
        last_control = None  # the type of the last event when it is a control record
        if last_event is not None and last_event["tenant"] == CONTROL_TENANT:
            last_control = last_event["type"]
        checkpoint_size = newest
        if last_event is not None and last_control == "redaction":
            checkpoint_size = self._finish_redaction(last_event, size, newest)
        resume = {
            "checkpoint_size": newest,
            "clean": last_control == "log.close",
            "fragment_sha256": None,
            "torn_bytes": 0,
        }
        return Recovered(state, checkpoint_size, resume, None)

    # ---- reads -------------------------------------------------------------------------------

    def _segment_roots(self, count: int) -> list[bytes]:
        rows = self.reader.segment_roots(self.partition, count)
        roots = [bytes(root) for _, root in rows]
        if [n for n, _ in rows] != list(range(count)):
            raise CorruptLog(f"{self.where}: segment roots missing: have {[n for n, _ in rows]}")
        # Each root must be the one its successor's segment.open carries (and signed over).
        opens = self.reader.lines_at(
            self.partition, [(n + 1) << self.seg_bits for n in range(count)]
        )
        for n in range(count):
            line = opens.get((n + 1) << self.seg_bits)
            try:
                carried = orjson.loads(line or b"")["payload"]["prev_segment_root"]
            except (TypeError, KeyError, orjson.JSONDecodeError):
                raise CorruptLog(f"{self.where}: segment {n + 1} has no segment.open") from None
            if base64.b64decode(carried) != roots[n]:
                raise CorruptLog(
                    f"{self.where}: the stored root of segment {n} disagrees with the "
                    f"prev_segment_root of segment {n + 1}'s segment.open"
                )
        return roots

    def _lines(self, first: int, last: int) -> list[tuple[int, bytes]]:
        rows = lines_between(self.reader, self.partition, first, last)
        for expected, (seq, _) in enumerate(rows, first):
            if seq != expected:
                raise CorruptLog(f"{self.where}: seq {expected} is missing from the store")
        return rows

    def _h_at(self, seq: int) -> bytes:
        line = self.reader.lines_at(self.partition, [seq]).get(seq)
        if line is None:
            raise CorruptLog(f"{self.where}: seq {seq} is missing from the store")
        obj = orjson.loads(line)
        if obj.get("type") != SEGMENT_SEAL:
            raise CorruptLog(f"{self.where}: seq {seq} should be the seal of its segment")
        return bytes.fromhex(obj["h"])

    # ---- checks ------------------------------------------------------------------------------

    def _check_checkpoints(self, segment_open: dict | None, size: int) -> int:
        texts = []
        found = self.reader.checkpoint(self.partition)
        if found is not None:
            texts.append((f"stored checkpoint size {found[0]}", found[1]))
        if segment_open is not None:
            texts.append(
                (f"segment.open@{segment_open['seq']}", segment_open["payload"]["checkpoint"])
            )
        where = self.where
        return newest_checkpoint(
            [(f"{where}: {source}", text) for source, text in texts],
            self.key.vkey,
            size,
            f"the store holds {size}",
            self._root_at,
        )

    def _root_at(self, size: int) -> bytes:
        if size >= self.first_of_last:
            tree = CompactRange()
            for n in range(self.first_of_last >> self.seg_bits):
                tree.append_subtree(self.seg_size, self.roots[n])
            for leaf in self.leaves[: size - self.first_of_last]:
                tree.append(leaf)
            return tree.root()
        whole, rest = divmod(size, self.seg_size)
        tree = CompactRange()
        for n in range(whole):
            tree.append_subtree(self.seg_size, self.roots[n])
        if rest:
            first = whole << self.seg_bits
            for _, line in lines_between(self.reader, self.partition, first, first + rest - 1):
                tree.append(_h_of(line))
        return tree.root()

    def _last_event(self, objs: list[dict], first_of_last: int) -> dict | None:
        """The last record that is not segment.seal/open."""
        for obj in reversed(objs):
            if not (
                obj["tenant"] == CONTROL_TENANT and obj["type"] in (SEGMENT_OPEN, SEGMENT_SEAL)
            ):
                return obj
        if first_of_last >= 2:  # the segment holds only its open: look before the seal
            line = self.reader.lines_at(self.partition, [first_of_last - 2]).get(first_of_last - 2)
            return orjson.loads(line) if line is not None else None
        return None

    def _finish_redaction(self, record: dict, size: int, newest: int) -> int:
        """Complete a redaction interrupted between its record and its rewrite (it is always
        the last record: nothing is appended after one until its rewrite is done)."""
        seqs = [target["seq"] for target in record["payload"]["targets"]]
        held = self.reader.lines_at(self.partition, seqs)
        unfinished = [seq for seq in seqs if orjson.loads(held[seq]).get("salt") is not None]
        if not unfinished:
            return newest
        if self.sink is None:
            raise StoreError(
                f"{self.where}: a redaction (seq {record['seq']}) is unfinished; recovering it "
                "needs the partition's sink"
            )
        text = sign_checkpoint(self.key, size, self.tree.root())
        self.sink.install_checkpoint(SignedCheckpoint(text, size))  # it covers the redaction
        targets = redaction.targets_by_segment(unfinished, record["seq"], self.seg_bits)
        self.sink.rewrite_redacted(RedactionRewrite(targets))
        return size
