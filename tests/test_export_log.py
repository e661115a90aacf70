"""export-log: a store partition as a log directory the unchanged verifier accepts, or fails at
the right place (issue 14, tests 1 (part), 8 and 9).

Everything runs through the real commands (`ledgermem init-store`, `export-log`, `vkey
--store`, `verify`) as subprocesses, and the rows come from a real leader: a LogWriter on a
PgSink under a lease, feeding its own Mirror as the cluster runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

from eventstore import layout
from eventstore.entry import Entry
from eventstore.layout import DataDir
from eventstore.mirror import Mirror
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect, read_store
from eventstore.store import load_or_create_key
from eventstore.writer import Durability, LogWriter
from tests.helpers.cli import ledgermem
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pglog import take
from tests.helpers.reproducible import FIXED_NS, CountingSalts

SEG_BITS = 3
ORIGIN = "test.local/export"
SECRET_TEXT = "the-erased-secret-4c1d"


def init(url: str, data) -> None:
    done = ledgermem(
        "init-store", url, "--partitions", 2, "--data", data, "--seg-bits", SEG_BITS,
        "--origin", ORIGIN, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def leader(url: str, data, mirror_dir, partition: int = 0) -> tuple[LogWriter, Mirror]:
    """The partition's writer as a leader replica opens it, with its mirror."""
    with connect(url) as conn:
        info = read_store(conn)
    key = load_or_create_key(DataDir(data), create=False).key
    mirror = Mirror.open(mirror_dir, f"{info.origin}/p{partition}", info.seg_bits)
    writer = open_partition_writer(
        url, info, key, partition, take(url, partition, "replica-a"), mirror,
        clock=lambda: FIXED_NS, salts=CountingSalts(),
    )  # fmt: skip
    return writer, mirror


def entries(start: int, count: int) -> list[Entry]:
    return [
        Entry("acme", f"s-{n % 3}", "messages", "item.added", {"n": n, "text": f"note {n}"})
        for n in range(start, start + count)
    ]


def drive(writer: LogWriter) -> None:
    """Batches across segment ends, a checkpoint, a redaction, more batches."""
    writer.append_batch(entries(0, 5))
    for n in range(5, 12):
        writer.append_batch(entries(n, 1))
    writer.checkpoint()
    writer.append_batch([Entry("acme", "s-9", "messages", "item.added", {"t": SECRET_TEXT})])
    writer.redact([3, 9, writer.size - 1], "user asked", request="req-1")
    writer.append_batch(entries(12, 9))
    writer.checkpoint()


def export(url: str, out, partition: int = 0) -> None:
    done = ledgermem("export-log", "--store", url, "--partition", partition, out, text=True)
    assert done.returncode == 0, done.stderr


def vkey(url: str, partition: int = 0) -> str:
    done = ledgermem("vkey", "--store", url, "--partition", partition, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def verify(log_dir, key: str) -> dict:
    done = ledgermem("verify", log_dir, "--vkey", key, "--json", text=True)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def files_bytes(log_dir) -> bytes:
    return b"".join(path.read_bytes() for _, path in layout.list_segments(log_dir))


def table_lines(url: str, partition: int = 0) -> list[bytes]:
    with connect(url) as conn:
        found = conn.execute(
            "SELECT line FROM lm_record WHERE partition = %s ORDER BY seq", (partition,)
        ).fetchall()
    return [bytes(line) for (line,) in found]


def heap_bytes(url: str) -> bytes | None:
    """lm_record's heap and TOAST files after a CHECKPOINT, or None when they are not readable
    here (another machine's server, or another OS user's files)."""
    with connect(url) as conn:
        conn.execute("CHECKPOINT")
        data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])
        paths = conn.execute(
            "SELECT pg_relation_filepath(oid), pg_relation_filepath(NULLIF(reltoastrelid, 0)) "
            "FROM pg_class WHERE relname = 'lm_record'"
        ).fetchone()
    try:
        return b"".join(
            part.read_bytes()
            for rel in paths
            if rel is not None
            for part in sorted((data_dir / rel).parent.glob(Path(rel).name + "*"))
        )
    except OSError:
        return None


def test_an_export_equals_the_file_log_and_verifies_with_the_stores_vkey(pg_url, tmp_path):  # noqa: F811
    init(pg_url, tmp_path / "data")
    writer, mirror = leader(pg_url, tmp_path / "data", tmp_path / "replica/p0/log")
    drive(writer)
    writer.close()
    # The same calls through the file sink, signed with the partition's key: the same bytes.
    key = load_or_create_key(DataDir(tmp_path / "data"), create=False).key
    with connect(pg_url) as conn:
        pkey = read_store(conn).key_for(key, 0)
    file_writer = LogWriter.open(
        tmp_path / "filelog", pkey, seg_bits=SEG_BITS, durability=Durability.UNSAFE_NO_FSYNC,
        clock=lambda: FIXED_NS, salts=CountingSalts(),
    )  # fmt: skip
    drive(file_writer)
    file_writer.close()

    out = tmp_path / "export"
    export(pg_url, out)
    assert vkey(pg_url) == str(pkey.vkey)
    for name, _ in layout.list_segments(tmp_path / "filelog"):
        assert (out / layout.segment_name(name)).read_bytes() == (
            tmp_path / "filelog" / layout.segment_name(name)
        ).read_bytes()
    assert files_bytes(out) == files_bytes(tmp_path / "filelog")
    assert files_bytes(mirror.log_dir) == files_bytes(out)  # the leader's mirror, too
    for log_dir in (out, tmp_path / "filelog", mirror.log_dir):
        report = verify(log_dir, vkey(pg_url))
        assert report["verdict"] == "VALID-LOCAL", (log_dir, report)
    assert verify(out, vkey(pg_url))["anchor"]["size"] == len(table_lines(pg_url))


def test_erase_through_the_sink_the_export_verifies_and_the_bytes_leave_the_table(
    pg_url,  # noqa: F811
    tmp_path,
):
    init(pg_url, tmp_path / "data")
    writer, mirror = leader(pg_url, tmp_path / "data", tmp_path / "replica/p0/log")
    writer.append_batch(entries(0, 6))
    out = tmp_path / "export"
    export(pg_url, out)  # taken before the erasure: it holds the payload
    assert SECRET_TEXT.encode() not in files_bytes(out)
    writer.append_batch([Entry("acme", "s-9", "messages", "item.added", {"t": SECRET_TEXT})])
    target = writer.size - 1
    export(pg_url, out)
    assert SECRET_TEXT.encode() in files_bytes(out)
    erasure = writer.redact([target, 2], "user asked", request="req-7")
    writer.append_batch(entries(6, 4))
    writer.checkpoint()
    writer.close()

    # The sink rewrote the rows and vacuumed: the rows no longer hold the bytes, and neither do
    # the table's pages on disk, when this process may read them (the server's files).
    assert not any(SECRET_TEXT.encode() in line for line in table_lines(pg_url))
    pages = heap_bytes(pg_url)
    if pages is not None:
        assert b'"text":"note 5"' in pages  # the files were read: live rows are in them
        assert SECRET_TEXT.encode() not in pages
    export(pg_url, out)  # incremental: re-copies the redaction's targets from the table
    fresh = tmp_path / "fresh"
    export(pg_url, fresh)
    for log_dir in (out, fresh, mirror.log_dir):
        assert SECRET_TEXT.encode() not in files_bytes(log_dir), log_dir
        assert files_bytes(log_dir) == b"".join(table_lines(pg_url)), log_dir
        report = verify(log_dir, vkey(pg_url))
        assert report["verdict"] == "VALID-LOCAL", (log_dir, report)
        assert [r["seq"] for r in report["redactions"]] == [erasure.seq]


def test_incremental_exports_continue_where_the_last_stopped(pg_url, tmp_path):  # noqa: F811
    init(pg_url, tmp_path / "data")
    writer, _ = leader(pg_url, tmp_path / "data", tmp_path / "replica/p1/log", partition=1)
    out = tmp_path / "export"
    sizes = []
    for round_ in range(4):
        writer.append_batch(entries(round_ * 7, 7))
        writer.checkpoint()
        export(pg_url, out, partition=1)
        report = verify(out, vkey(pg_url, 1))
        assert report["verdict"] == "VALID-LOCAL", report
        sizes.append(report["records"])
    # An interrupted export leaves a torn line; the next one cuts it and goes on.
    last = layout.list_segments(out)[-1][1]
    with open(last, "ab") as f:
        f.write(b'{"v":1,"seq":')
    writer.append_batch(entries(100, 3))
    writer.close()
    export(pg_url, out, partition=1)
    assert files_bytes(out) == b"".join(table_lines(pg_url, 1))
    assert verify(out, vkey(pg_url, 1))["verdict"] == "VALID-LOCAL"
    assert sizes == sorted(sizes) and len(set(sizes)) == 4


def test_rows_altered_or_deleted_in_the_table_fail_verification_at_their_place(
    pg_url,  # noqa: F811
    tmp_path,
):
    init(pg_url, tmp_path / "data")
    writer, _ = leader(pg_url, tmp_path / "data", tmp_path / "replica/p0/log")
    writer.append_batch(entries(0, 20))
    writer.checkpoint()
    writer.close()
    size = len(table_lines(pg_url))
    with connect(pg_url) as conn:
        # Seq 10 sits at line 3 of segment 1 (seqs 8..15): a payload changed, bytes otherwise
        # intact, so only its pd gives it away.
        line = bytes(
            conn.execute("SELECT line FROM lm_record WHERE partition = 0 AND seq = 10").fetchone()[
                0
            ]
        )
        altered = line.replace(b'"note ', b'"NOTE ')
        assert altered != line
        conn.execute("UPDATE lm_record SET line = %s WHERE partition = 0 AND seq = 10", (altered,))
    out = tmp_path / "altered"
    export(pg_url, out)
    report = verify(out, vkey(pg_url))
    assert report["verdict"] == "FAIL"
    error = report["error"]
    assert (error["file"], error["line"], error["seq"]) == (layout.segment_name(1), 3, 10)
    assert error["check"] == "record.pd"
    assert (out / layout.segment_name(1)).read_bytes().count(altered) == 1  # copied, not fixed

    with connect(pg_url) as conn:
        conn.execute("UPDATE lm_record SET line = %s WHERE partition = 0 AND seq = 10", (line,))
        conn.execute("DELETE FROM lm_record WHERE partition = 0 AND seq = 17")
    out = tmp_path / "deleted"
    export(pg_url, out)
    report = verify(out, vkey(pg_url))
    assert report["verdict"] == "FAIL"
    error = report["error"]
    # Seq 17 is line 2 of segment 2: the line there holds seq 18 instead.
    assert (error["file"], error["line"], error["seq"]) == (layout.segment_name(2), 2, 17)
    assert error["check"] == "record.seq" and "holds seq 18" in error["message"]
    assert len(table_lines(pg_url)) == size - 1
