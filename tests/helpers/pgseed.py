"""TEST-ONLY loader: puts a partition's log into the store's tables without PgSink.

The mirror, the store tail and export-log only read the tables, so their tests need rows that
a real writer produced, not a real leader. `SeededPartition` runs a `LogWriter` on a
`MemorySink` with the partition's key (`info.key_for(key, n)`) and copies what the sink holds
into lm_record / lm_checkpoint / lm_segment_root and lm_head, from any connection. Redactions
done through the writer reach the table as UPDATEs of the rewritten lines, as PgSink does them.

Never use this outside tests: it bypasses the fenced append statement on purpose.
"""

from __future__ import annotations

from pathlib import Path

from eventstore.layout import DataDir
from eventstore.memory_sink import MemorySink
from eventstore.merkle import CompactRange
from eventstore.pg.schema import NOTIFY_CHANNEL, StoreInfo, connect, init_store
from eventstore.record import SEGMENT_SEAL, Record
from eventstore.store import load_or_create_key
from eventstore.writer import LogWriter

from .reproducible import FIXED_NS, CountingSalts


class SeededPartition:
    """A writer over memory whose lines `publish()` copies into one partition's rows."""

    def __init__(self, url: str, info: StoreInfo, data_dir: Path, partition: int = 0) -> None:
        self.url, self.info, self.partition = url, info, partition
        key = load_or_create_key(DataDir(data_dir), info.origin, create=False).key
        self.key = info.key_for(key, partition)
        self.sink = MemorySink()
        self.writer = LogWriter.create_on(
            self.sink,
            self.key,
            seg_bits=info.seg_bits,
            checkpoint_interval=3600.0,
            clock=lambda: FIXED_NS,
            salts=CountingSalts(),
        )
        self.published: list[bytes] = []

    def append(self, count: int, tenant: str = "t1", session: str = "s1") -> list[Record]:
        entries = [(tenant, session, "notes", "note", {"n": i}) for i in range(count)]
        return self.writer.append_batch(entries)

    @property
    def lines(self) -> list[bytes]:
        return list(self.sink.lines)

    def publish(self, notify: bool = True) -> int:
        """Copy every new or rewritten line, the checkpoints, the full segments' roots and the
        head into the tables; return the partition's size."""
        self.writer.checkpoint()
        lines = self.lines
        conn = connect(self.url)
        try:
            with conn.transaction():
                p = self.partition
                for seq, line in enumerate(lines):
                    if seq < len(self.published):
                        if self.published[seq] != line:
                            conn.execute(
                                "UPDATE lm_record SET line = %s WHERE partition = %s AND seq = %s",
                                (line, p, seq),
                            )
                        continue
                    record = Record.from_line(line)
                    conn.execute(
                        "INSERT INTO lm_record (partition, seq, h, line) VALUES (%s, %s, %s, %s)",
                        (p, seq, bytes.fromhex(record.h), line),
                    )
                    if record.type == SEGMENT_SEAL and record.is_control:
                        conn.execute(
                            "INSERT INTO lm_segment_root (partition, segment, root) "
                            "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                            (p, seq >> self.info.seg_bits, self._segment_root(lines, seq)),
                        )
                for checkpoint in self.sink.checkpoints:
                    conn.execute(
                        "INSERT INTO lm_checkpoint (partition, size, text, epoch) "
                        "VALUES (%s, %s, %s, 0) ON CONFLICT DO NOTHING",
                        (p, checkpoint.size, checkpoint.text),
                    )
                last = Record.from_line(lines[-1])
                conn.execute(
                    "UPDATE lm_head SET last_seq = %s, last_h = %s WHERE partition = %s",
                    (last.seq, bytes.fromhex(last.h), p),
                )
                if notify and len(lines) > len(self.published):
                    wake = f"{p}:{len(self.published)}:{last.seq}"
                    conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, wake))
        finally:
            conn.close()
        self.published = lines
        return len(lines)

    def _segment_root(self, lines: list[bytes], seal_seq: int) -> bytes:
        size = 1 << self.info.seg_bits
        tree = CompactRange()
        for line in lines[seal_seq + 1 - size : seal_seq + 1]:
            tree.append(bytes.fromhex(Record.from_line(line).h))
        return tree.root()

    def close(self) -> None:
        self.writer.close()


def seeded_store(
    url: str, data_dir: Path, *, partitions: int = 1, seg_bits: int = 4
) -> tuple[StoreInfo, list[SeededPartition]]:
    """A new store (init_store) with one test-only seeded writer per partition."""
    info = init_store(url, partitions, data_dir, seg_bits=seg_bits, origin="test.example/store")
    return info, [SeededPartition(url, info, data_dir, n) for n in range(partitions)]
