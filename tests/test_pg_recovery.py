"""Takeover recovery of a partition (eventstore/pg/recovery.py).

The state rebuilt from segment roots and the last segment's rows must equal what file recovery
rebuilds from the same log as files, and a writer resumed on each must go on writing the same
bytes. A checkpoint or a segment root that disagrees with the rows, or an altered row, makes the
takeover refuse with CorruptLog; a redaction a crash left unfinished is finished.
"""

from __future__ import annotations

import pytest

from eventstore import file_recovery, layout
from eventstore.checkpoint import sign_checkpoint
from eventstore.entry import Entry
from eventstore.errors import CorruptLog
from eventstore.file_sink import FileSink
from eventstore.pg import lease as leases
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.recovery import recover_partition
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
        Entry("acme", "s-1", "messages", "item.added", {"n": n})
        for n in range(start, start + count)
    ]


def _both(url, tmp_path, count: int):
    """`count` entries one by one through a file log and partition 0; returns (info, pkey)."""
    info, key = make_store(url, tmp_path / "data", seg_bits=SEG_BITS)
    pkey = partition_key(info, key, 0)
    options = {"clock": lambda: FIXED_NS, "salts": CountingSalts()}
    file_writer = LogWriter.open(
        tmp_path / "filelog", pkey, seg_bits=SEG_BITS,
        durability=Durability.UNSAFE_NO_FSYNC, **options,
    )  # fmt: skip
    lease = take(url, 0, "replica-a")
    pg_writer = LogWriter.create_on(
        PgSink(url, info, lease), pkey, seg_bits=SEG_BITS,
        clock=lambda: FIXED_NS, salts=CountingSalts(),
    )  # fmt: skip
    for writer in (file_writer, pg_writer):
        for n in range(count):
            writer.append_batch(_entries(n, 1))
        writer.close()
    with connect(url) as conn:
        leases.release(conn, lease)
    return info, key, pkey


@pytest.mark.parametrize("count", range(1, 9))
def test_the_rebuilt_state_equals_file_recoverys_and_resumed_writers_agree(
    pg_url,  # noqa: F811
    tmp_path,
    count,
):
    info, key, pkey = _both(pg_url, tmp_path, count)
    sink = FileSink(tmp_path / "filelog", SEG_BITS, Durability.UNSAFE_NO_FSYNC)
    from_files = file_recovery.recover(tmp_path / "filelog", pkey, SEG_BITS, False, sink)
    sink.close()
    with connect(pg_url) as conn:
        from_table = recover_partition(conn, info, key, 0)
    a, b = from_files.state, from_table.state
    assert (a.size, a.prev, a.segment) == (b.size, b.prev, b.segment)
    assert a.tree.root() == b.tree.root() and a.segment_tree.root() == b.segment_tree.root()
    assert from_files.resume == from_table.resume
    assert from_table.resume["clean"] is True
    assert from_files.checkpoint_size == from_table.checkpoint_size

    # Both resume (log.resume, maybe a segment.open, a checkpoint) and write the same bytes.
    options = {"clock": lambda: FIXED_NS, "salts": CountingSalts()}
    file_writer = LogWriter.open(
        tmp_path / "filelog", pkey, seg_bits=SEG_BITS,
        durability=Durability.UNSAFE_NO_FSYNC, **options,
    )  # fmt: skip
    lease = take(pg_url, 0, "replica-b")
    pg_writer = open_partition_writer(
        pg_url, info, key, 0, lease, clock=lambda: FIXED_NS, salts=CountingSalts()
    )
    assert pg_writer.last_resume == file_writer.last_resume
    for writer in (file_writer, pg_writer):
        writer.append_batch(_entries(100, 6))
        writer.close()
    table = rows(pg_url)
    for number, path in layout.list_segments(tmp_path / "filelog"):
        lines = [line for seq, _, line in table if seq >> SEG_BITS == number]
        assert b"".join(lines) == path.read_bytes(), f"segment {number} differs"
    objs = assert_chain(pg_url, info)
    assert [o["type"] for o in objs].count("log.resume") == 1


def test_an_empty_partition_recovers_as_none(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    with connect(pg_url) as conn:
        assert recover_partition(conn, info, key, 0) is None


def _tamper(url, sql: str, params=()) -> None:
    with connect(url) as conn:
        assert conn.execute(sql, params).rowcount >= 1


def test_a_newest_checkpoint_over_another_root_is_refused(pg_url, tmp_path):  # noqa: F811
    info, key, pkey = _both(pg_url, tmp_path, 13)
    size = len(rows(pg_url))
    forged = sign_checkpoint(pkey, size, b"\x00" * 32)  # signed by the right key, wrong root
    _tamper(pg_url, "UPDATE lm_checkpoint SET text = %s WHERE size = %s", (forged, size))
    with connect(pg_url) as conn, pytest.raises(CorruptLog, match="Merkle root"):
        recover_partition(conn, info, key, 0)
    lease = take(pg_url, 0, "replica-b")
    with pytest.raises(CorruptLog):
        open_partition_writer(pg_url, info, key, 0, lease)
    assert len(rows(pg_url)) == size  # nothing appended by the refused takeover


def test_a_checkpoint_that_does_not_verify_is_refused(pg_url, tmp_path):  # noqa: F811
    info, key, _ = _both(pg_url, tmp_path, 5)
    _tamper(
        pg_url,
        "UPDATE lm_checkpoint SET text = replace(text, '—', '-') || 'x' "
        "WHERE size = (SELECT max(size) FROM lm_checkpoint)",
    )
    with connect(pg_url) as conn, pytest.raises(CorruptLog, match="does not verify"):
        recover_partition(conn, info, key, 0)


def test_a_segment_root_that_disagrees_is_refused(pg_url, tmp_path):  # noqa: F811
    info, key, _ = _both(pg_url, tmp_path, 20)
    _tamper(pg_url, "UPDATE lm_segment_root SET root = %s WHERE segment = 1", (b"\x01" * 32,))
    with connect(pg_url) as conn, pytest.raises(CorruptLog, match="segment 1"):
        recover_partition(conn, info, key, 0)


def test_an_altered_row_in_the_last_segment_is_refused(pg_url, tmp_path):  # noqa: F811
    info, key, _ = _both(pg_url, tmp_path, 20)
    last = max(seq for seq, _, line in rows(pg_url) if b'"n":' in line)
    _tamper(
        pg_url,
        "UPDATE lm_record SET line = convert_to(replace(convert_from(line, 'UTF8'), "
        "'\"n\":', '\"m\":'), 'UTF8') WHERE seq = %s",
        (last,),
    )
    with connect(pg_url) as conn, pytest.raises(CorruptLog, match=f"seq {last}"):
        recover_partition(conn, info, key, 0)


def test_a_missing_row_is_refused(pg_url, tmp_path):  # noqa: F811
    info, key, _ = _both(pg_url, tmp_path, 20)
    last = rows(pg_url)[-1][0]
    _tamper(pg_url, "DELETE FROM lm_record WHERE seq = %s", (last - 2,))
    with connect(pg_url) as conn, pytest.raises(CorruptLog, match="missing|holds"):
        recover_partition(conn, info, key, 0)


def test_an_unfinished_redaction_is_finished_by_the_takeover(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    lease = take(pg_url, 0, "replica-a")
    writer = open_partition_writer(pg_url, info, key, 0, lease)
    records = writer.append_batch(_entries(0, 10))
    targets = [records[2].seq, records[8].seq]
    before = {seq: line for seq, _, line in rows(pg_url)}
    writer.redact(targets, "user asked")
    # The state a crash between the redaction's commit and its rewrite leaves: the payloads back.
    for seq in targets:
        _tamper(pg_url, "UPDATE lm_record SET line = %s WHERE seq = %s", (before[seq], seq))
    writer._sink.lease.lose()  # the old leader stops here, as if it had died
    writer.close()
    with connect(pg_url) as conn:
        leases.release(conn, lease)

    successor = open_partition_writer(pg_url, info, key, 0, take(pg_url, 0, "replica-b"))
    assert successor.last_resume["clean"] is False
    objs = assert_chain(pg_url, info)
    by_seq = {o["seq"]: o for o in objs}
    redaction_seq = next(o["seq"] for o in objs if o["type"] == "redaction")
    for seq in targets:
        assert "payload" not in by_seq[seq] and by_seq[seq]["redacted"] == redaction_seq
    assert objs[-1]["type"] == "log.resume"
    successor.close()
