"""Golden bytes: the PostgreSQL sink stores exactly the bytes the file sink stores.

The same entries, with a fixed clock and fixed salts, go through LogWriter.open on a directory
and LogWriter.create_on(PgSink) on partition 0 (the file log signed with the partition's key, so
the origin, and so every byte, is the same), with seg_bits small enough to rotate several
segments and a redaction and a checkpoint in the middle. The table's lines, concatenated per
segment, must equal the segment files, and every checkpoint in lm_checkpoint must verify
against the partition's key and the records' Merkle root.
"""

from __future__ import annotations

from eventstore import layout
from eventstore.checkpoint import parse_checkpoint
from eventstore.entry import Entry
from eventstore.merkle import CompactRange
from eventstore.pg.schema import connect
from eventstore.pg.sink import PgSink
from eventstore.writer import Durability, LogWriter
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pglog import (
    assert_chain,
    make_store,
    partition_key,
    rows,
    take,
)
from tests.helpers.reproducible import FIXED_NS, CountingSalts

SEG_BITS = 3


def _entries(start: int, count: int) -> list[Entry]:
    return [
        Entry("acme", f"s-{n % 3}", "messages", "item.added", {"n": n, "text": f"note {n}"})
        for n in range(start, start + count)
    ]


def _drive(writer: LogWriter) -> None:
    """The same calls on either writer: batches across segment ends, a checkpoint, a redaction."""
    writer.append_batch(_entries(0, 5))
    for n in range(5, 12):
        writer.append_batch(_entries(n, 1))
    writer.checkpoint()
    writer.redact([3, 9], "user asked", request="req-1")
    writer.append_batch(_entries(12, 9))
    writer.checkpoint()
    writer.close()


def test_the_table_holds_the_file_logs_bytes_and_its_checkpoints_verify(
    pg_url,  # noqa: F811
    tmp_path,
):
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    pkey = partition_key(info, key, 0)

    file_writer = LogWriter.open(
        tmp_path / "filelog",
        pkey,
        seg_bits=SEG_BITS,
        durability=Durability.UNSAFE_NO_FSYNC,
        clock=lambda: FIXED_NS,
        salts=CountingSalts(),
    )
    _drive(file_writer)

    sink = PgSink(pg_url, info, take(pg_url, 0, "replica-a"))
    pg_writer = LogWriter.create_on(
        sink, pkey, seg_bits=SEG_BITS, clock=lambda: FIXED_NS, salts=CountingSalts()
    )
    _drive(pg_writer)

    segments = layout.list_segments(tmp_path / "filelog")
    assert len(segments) >= 4  # several rotations happened
    table = rows(pg_url)
    for number, path in segments:
        lines = [line for seq, _, line in table if seq >> SEG_BITS == number]
        assert b"".join(lines) == path.read_bytes(), f"segment {number} differs"
    assert sum(1 for _ in table) == sum(p.read_bytes().count(b"\n") for _, p in segments)

    objs = assert_chain(pg_url, info)
    redacted = {o["seq"]: o.get("redacted") for o in objs if "redacted" in o}
    assert set(redacted) == {3, 9}

    tree_at = {0: CompactRange().root()}
    tree = CompactRange()
    for seq, h, _ in table:
        tree.append(h)
        tree_at[seq + 1] = tree.root()
    with connect(pg_url) as conn:
        checkpoints = conn.execute(
            "SELECT size, text FROM lm_checkpoint WHERE partition = 0 ORDER BY size"
        ).fetchall()
        segment_roots = conn.execute(
            "SELECT segment, root FROM lm_segment_root WHERE partition = 0 ORDER BY segment"
        ).fetchall()
    assert len(checkpoints) >= 4
    for size, text in checkpoints:
        checkpoint = parse_checkpoint(text, pkey.vkey)
        assert checkpoint.size == size
        assert checkpoint.root == tree_at[size]
    assert checkpoints[-1][0] == len(table)  # close() signs everything
    assert (tmp_path / "filelog" / "checkpoint").read_text() == checkpoints[-1][1]
    assert [n for n, _ in segment_roots] == list(range(len(segments) - 1))
    for number, root in segment_roots:
        leaves = CompactRange()
        for _seq, h, _ in table[number << SEG_BITS : (number + 1) << SEG_BITS]:
            leaves.append(h)
        assert bytes(root) == leaves.root()
