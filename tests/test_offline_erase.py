"""`ledgermem erase` and `ledgermem redact` on a stopped data directory (docs/format.md section 9):
the erased content is nowhere in the directory afterwards (grep every file), `verify` still says
VALID-LOCAL, the service still starts on it, and both refuse while a server holds the lock."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from helpers.cli import ledgermem
from server import Server

from eventstore import layout
from eventstore.reader import LogReader
from sections.runtime.memory import Memory

ALICE = ("ALICE-ADDRESS-1", "ALICE-PHONE-2", "ALICE-UPDATED-3")
BOB = ("BOB-PASSPORT-4", "BOB-SIBLING-5")
CAROL = "CAROL-KEEP-6"


@pytest.fixture
def data(tmp_path) -> Path:
    """A stopped data directory of 3+ segments whose contents also sit in a snapshot, in
    context records and in the sparse indexes."""
    root = tmp_path / "data"
    with Memory.open(root, seg_bits=3) as memory:
        alice = memory.session("alice")
        first = alice.add("messages", ALICE[0], role="user")
        alice.add("findings", ALICE[1], tags=["pii"], metadata={"src": ALICE[1]})
        alice.update("messages", first.id, content=ALICE[2])
        alice.get()
        alice.context(1000)
        bob = memory.session("bob")
        bob.add_many("messages", [{"content": BOB[0]}, {"content": BOB[1]}])
        bob.add("messages", "bob says hello")
        memory.session("carol").add("messages", CAROL)
        memory.snapshot()
        for k in range(10):
            memory.session("carol").add("messages", f"carol {k}")
    reader = LogReader(root / "log", index_dir=root / "index")
    for seq in range(
        1, reader.head(), 1 << reader.seg_bits
    ):  # a seek into each segment saves its index
        next(reader.lines(seq), None)
    assert len(layout.list_segments(root / "log")) >= 3
    return root


def files_holding(root: Path, text: str) -> list[Path]:
    """grep -rl: every file under root whose bytes hold `text`."""
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def vkey(root: Path) -> str:
    return ledgermem("vkey", "--data", root).stdout.decode().strip()


def assert_valid_local(root: Path) -> dict:
    result = ledgermem("verify", root / "log", "--vkey", vkey(root), "--json")
    report = orjson.loads(result.stdout)
    assert report["verdict"] == "VALID-LOCAL", result.stdout
    assert report["unanchored_records"] == 0
    assert not any(r["pending"] for r in report["redactions"])
    return report


def test_erase_of_a_session_leaves_none_of_its_content_anywhere(data):
    assert files_holding(data, ALICE[0])  # in the log and the snapshot before
    result = ledgermem("erase", "--data", data, "--session", "alice", "--reason", "gdpr-art17")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("erased session 'alice'")
    for text in ALICE:
        assert files_holding(data, text) == [], text
    assert files_holding(data, CAROL) and files_holding(data, BOB[0])
    assert_valid_local(data)
    with Memory.open(data) as memory:  # the service starts on it, without the session
        assert {s["session"] for s in memory.list_sessions()} == {"bob", "carol"}


def test_erase_of_an_item_takes_the_items_of_its_record_too(data):
    with Memory.open(data) as memory:
        batch = memory.session("bob").get("messages")[0].id
    result = ledgermem(
        "erase", "--data", data, "--session", "bob", "--item", batch, "--reason", "request-7"
    )
    assert result.returncode == 0, result.stderr
    assert "items" in result.stdout.decode()
    for text in BOB:
        assert files_holding(data, text) == [], text
    assert files_holding(data, "bob says hello")
    assert_valid_local(data)


def test_redact_by_seq_leaves_no_trace_and_purges_snapshots_and_indexes(data):
    assert list((data / "snapshots").glob("*")) and list((data / "index").glob("*"))
    reader = LogReader(data / "log")
    carol = next(r.seq for r in reader.records() if r.has_payload and CAROL in r.line.decode())
    refused = ledgermem("redact", "--data", data, "--seq", carol, "--reason", "x")
    assert refused.returncode == 2 and b"use `ledgermem erase`" in refused.stderr
    head = reader.head()
    assert LogReader(data / "log").head() == head  # the refusal appended nothing
    result = ledgermem(
        "redact", "--data", data, "--seq", carol, "--reason", "dsr", "--request", "R-1", "--force"
    )
    assert result.returncode == 0, result.stderr
    assert files_holding(data, CAROL) == []
    assert not list((data / "snapshots").glob("*")) and not (data / "index").exists()
    report = assert_valid_local(data)
    assert report["redactions"][-1]["targets"] == [carol]
    with Memory.open(data) as memory:  # replay skips the record whole
        assert memory.session("carol", create=False).get("messages")[0].content == "carol 0"


def test_redact_names_the_file_and_seq_it_refuses(data):
    result = ledgermem("redact", "--data", data, "--seq", 0, "--reason", "x")
    assert result.returncode == 2 and result.stderr.count(b"\n") == 1
    assert b"seg-000000000000.jsonl: seq 0 is a control record" in result.stderr
    missing = ledgermem("redact", "--data", data, "--seq", 10_000, "--reason", "x")
    assert missing.returncode == 2 and b"cannot redact seq 10000" in missing.stderr


def test_redact_and_erase_refuse_while_a_server_holds_the_lock(data):
    with Server(data) as server:
        head = LogReader(data / "log").head()
        for command in (
            ("erase", "--data", data, "--session", "alice", "--reason", "x"),
            ("redact", "--data", data, "--seq", 3, "--reason", "x", "--force"),
        ):
            result = ledgermem(*command)
            assert result.returncode == 2
            error = result.stderr.decode()
            assert error.count("\n") == 1, error
            assert f"pid={server.proc.pid}" in error and "erases through its API" in error
        assert LogReader(data / "log").head() == head
    for text in ALICE:
        assert files_holding(data, text), text
