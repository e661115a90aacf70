"""`ledgermem backup --data DIR OUT` copies a running server's data directory consistently: the
checkpoint first, then the segments' complete lines, so the copy verifies under concurrent
writes, even when the checkpoint changes during the copy. A naive copy (segments first) can FAIL.
"""

from __future__ import annotations

import shutil
import stat
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest
from helpers.cli import ledgermem
from server import Server

from eventstore import layout
from eventstore.checkpoint import VerifierKey
from eventstore.store import open_log
from eventstore.verify import verify_log
from replay import cli_backup
from sections.runtime.memory import Memory


def checkpoint_size(log_dir: Path) -> int:
    return int((log_dir / layout.CHECKPOINT).read_text().split("\n")[1])


def lines_of(log_dir: Path) -> list[bytes]:
    return b"".join(p.read_bytes() for _, p in layout.list_segments(log_dir)).splitlines()


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory):
    """A server (3+ segments from the start) with three threads adding items all along."""
    data = tmp_path_factory.mktemp("backup") / "data"
    stopping = threading.Event()
    with Server(data, "--seg-bits", "3") as server:

        def write(k: int) -> None:
            with httpx.Client(base_url=server.url, timeout=10) as c:
                c.put(f"/v1/sessions/w{k}").raise_for_status()
                n = 0
                while not stopping.is_set():
                    item = {"content": f"writer {k} item {n}"}
                    c.post(f"/v1/sessions/w{k}/sections/findings/items", json=item)
                    n += 1

        threads = [threading.Thread(target=write, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        server.vkey = httpx.get(f"{server.url}/v1/log/status").json()["vkey"]
        deadline = time.monotonic() + 30
        while len(layout.list_segments(data / "log")) < 4 or checkpoint_size(data / "log") < 20:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        try:
            yield server
        finally:
            stopping.set()
            for t in threads:
                t.join(30)


def test_backups_under_concurrent_writes_verify_valid_local(busy_server, tmp_path):
    for k in range(3):
        out = tmp_path / f"copy{k}"
        result = ledgermem("backup", "--data", busy_server.data_dir, out)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().startswith("backup: ") and result.stdout.count(b"\n") == 1
        report = verify_log(out / "log", vkey=busy_server.vkey)
        assert report.verdict == "VALID-LOCAL", report.render_text()
        assert report.segments >= 3
        copied = lines_of(out / "log")
        assert copied == lines_of(busy_server.data_dir / "log")[: len(copied)]
        assert report.anchor.size <= len(copied)


def test_the_copy_keeps_the_key_private_and_opens_as_a_data_directory(busy_server, tmp_path):
    out = tmp_path / "copy"
    assert ledgermem("backup", "--data", busy_server.data_dir, out).returncode == 0
    assert stat.S_IMODE((out / "keys" / "signing.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "keys").stat().st_mode) == 0o700
    with Memory.open(out) as memory:  # recovery accepts the copy: its checkpoint is covered
        assert {s["session"] for s in memory.list_sessions()} == {"w0", "w1", "w2"}


def test_a_checkpoint_that_changes_during_the_copy_is_harmless(busy_server, tmp_path, monkeypatch):
    log_dir = busy_server.data_dir / "log"
    read = cli_backup._read_checkpoint
    sizes: list[int] = []

    def read_then_let_writes_land(path: Path, vkey: VerifierKey):
        checkpoint = read(path, vkey)
        if not sizes:  # the first read: wait until the server has signed a newer one
            deadline = time.monotonic() + 10
            while checkpoint_size(log_dir) == checkpoint.size:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        sizes.append(checkpoint.size)
        return checkpoint

    monkeypatch.setattr(cli_backup, "_read_checkpoint", read_then_let_writes_land)
    summary = cli_backup.backup(busy_server.data_dir, tmp_path / "copy")
    assert sizes[1] > sizes[0]
    assert summary.checkpoint_size == sizes[1]  # the newer one: the copy caught up with it
    report = verify_log(tmp_path / "copy" / "log", vkey=busy_server.vkey)
    assert report.verdict == "VALID-LOCAL", report.render_text()


def test_a_naive_copy_can_catch_a_checkpoint_newer_than_its_segments(busy_server, tmp_path):
    source, naive = busy_server.data_dir / "log", tmp_path / "naive"
    naive.mkdir()
    for _, path in layout.list_segments(source):
        shutil.copyfile(path, naive / path.name)
    copied = len(lines_of(naive))
    deadline = time.monotonic() + 10
    while checkpoint_size(source) <= copied:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    shutil.copyfile(source / layout.CHECKPOINT, naive / layout.CHECKPOINT)
    assert verify_log(naive, vkey=busy_server.vkey).verdict == "FAIL"


def test_backup_refuses_a_target_that_is_not_empty(busy_server, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious").write_text("x")
    result = ledgermem("backup", "--data", busy_server.data_dir, tmp_path / "out")
    assert result.returncode == 2 and result.stderr.count(b"\n") == 1
    assert b"is not an empty directory" in result.stderr


def test_a_redaction_whose_rewrite_the_copy_missed_is_applied_to_the_copy(tmp_path, monkeypatch):
    data = tmp_path / "data"
    with Memory.open(data, seg_bits=3) as memory:
        session = memory.session("p")
        session.add("messages", "SECRET-early")
        memory.snapshot()  # holds the content: must not reach the copy
        for k in range(12):
            session.add("messages", f"filler {k}")
        old = {p.name: p.read_bytes() for _, p in layout.list_segments(data / "log")}
        session.erase_all(reason="gdpr")
        session_vkey = str(memory.key.key.vkey)
    # The copy reads segment 0 as it was before the rewrite, as a copy racing the erase can.
    complete_lines = cli_backup._complete_lines

    def stale_segment_0(path: Path) -> bytes:
        return old[path.name] if path.name == layout.segment_name(0) else complete_lines(path)

    monkeypatch.setattr(cli_backup, "_complete_lines", stale_segment_0)
    summary = cli_backup.backup(data, tmp_path / "copy")
    assert summary.redacted >= 1
    for path in (tmp_path / "copy").rglob("*"):
        assert not path.is_file() or b"SECRET" not in path.read_bytes(), path
    assert lines_of(tmp_path / "copy" / "log") == lines_of(data / "log")
    report = verify_log(tmp_path / "copy" / "log", vkey=session_vkey)
    assert report.verdict == "VALID-LOCAL" and not any(r.pending for r in report.redactions)


def test_backup_of_a_stopped_log_copies_it_whole(tmp_path):
    writer, _ = open_log(tmp_path / "data", seg_bits=3)
    for k in range(20):
        writer.append("default", "s", "notes", "x.y", {"k": k})
    writer.close()
    result = ledgermem("backup", "--data", tmp_path / "data", tmp_path / "copy", "--verify")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().rstrip().endswith("verify: VALID-LOCAL")
    assert lines_of(tmp_path / "copy" / "log") == lines_of(tmp_path / "data" / "log")
    assert orjson.loads(lines_of(tmp_path / "copy" / "log")[-1])["type"] == "log.close"
    assert (tmp_path / "copy" / "log" / "checkpoint").read_bytes() == (
        tmp_path / "data" / "log" / "checkpoint"
    ).read_bytes()
