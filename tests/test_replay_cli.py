"""`ledgermem replay`, `state` and `diff` on a copy of the files, through the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from helpers.child import readline_within
from helpers.cli import ledgermem

from sections.model.config import MemoryConfig, SectionConfig
from sections.runtime.memory import Memory

ROOT = Path(__file__).parent.parent
CONFIG = MemoryConfig(
    sections=(
        SectionConfig("notes", 12, "fifo", "durable"),
        SectionConfig("scratch", None, "none", "turn"),
        SectionConfig("findings", 100, "priority", "durable"),
    )
)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A log of 3+ segments, with the live projection captured after every command."""
    data = tmp_path_factory.mktemp("replay") / "data"
    captured: dict[int, list] = {}
    marks: dict[str, int] = {}
    with Memory.open(data, config=CONFIG, seg_bits=3) as mem:

        def capture():
            seq, sessions = mem.read(lambda state: (state.seq, state.to_json()["sessions"]))
            captured[seq] = orjson.loads(orjson.dumps(sessions))

        s = mem.session("s/1", metadata={"app": "a"})
        t = mem.session("t@2", tenant="other")
        capture()
        marks["start"] = mem.read(lambda state: state.seq)
        first = s.add("notes", "aaaa aaaa")  # 3 tokens
        kept = s.add("findings", "keep this fact", priority=9)
        s.add("scratch", "for this turn")
        t.add("notes", "other tenant")
        capture()
        marks["before"] = mem.read(lambda state: state.seq)
        for i in range(4):
            s.add("notes", f"note {i} xxxx")  # evicts the oldest notes (fifo, 12 tokens)
            capture()
        dropped = s.add("findings", "drop me", priority=1)
        s.remove("findings", dropped.id)
        s.end_turn()
        s.update("findings", kept.id, content="keep this fact, revised")
        gone = s.add("findings", "erase me", priority=5)
        capture()
        s.erase([gone.id], reason="gdpr")
        capture()
        s.context(budget=50)
        marks["context"] = mem.read(lambda state: state.seq)
        capture()
        marks["after"] = mem.read(lambda state: state.seq)
        marks["first_note"] = first.seq
        marks["dropped"] = dropped.seq
        marks["gone"] = gone.seq
    return data / "log", captured, marks


def test_replay_prints_exactly_the_file_bytes(history):
    log_dir, _, _ = history
    result = ledgermem("replay", log_dir)
    assert result.returncode == 0, result.stderr
    files = sorted(log_dir.glob("seg-*.jsonl"))
    assert len(files) >= 3
    assert result.stdout == b"".join(p.read_bytes() for p in files)


def test_replay_filters_and_ranges_keep_the_lines_unchanged(history):
    log_dir, _, _ = history
    lines = b"".join(p.read_bytes() for p in sorted(log_dir.glob("seg-*.jsonl"))).splitlines(
        keepends=True
    )
    records = [json.loads(line) for line in lines]
    result = ledgermem(
        "replay", log_dir, "--session", "s/1", "--type", "item.added", "--type", "item.removed"
    )
    expected = [
        line
        for line, r in zip(lines, records, strict=True)
        if r["session"] == "s/1" and r["type"] in ("item.added", "item.removed")
    ]
    assert result.stdout.splitlines(keepends=True) == expected
    ranged = ledgermem("replay", log_dir, "--from-seq", 5, "--to-seq", 12)
    assert ranged.stdout.splitlines(keepends=True) == lines[5:13]
    since = records[10]["ts"]
    timed = ledgermem("replay", log_dir, "--since", since)
    assert timed.stdout.splitlines(keepends=True) == [
        line for line, r in zip(lines, records, strict=True) if r["ts"] >= since
    ]
    pretty = ledgermem("replay", log_dir, "--pretty", "--tenant", "other")
    assert pretty.returncode == 0 and b"other/t@2" in pretty.stdout


def _erased_masked(sessions: list, erased_id: str) -> list:
    """What the captured state looks like once an item's payload is erased: no content back."""
    for session in sessions:
        for section in session["sections"].values():
            for item in section["items"]:
                if item["id"] == erased_id:
                    item.update(content=None, tags=[], metadata={})
    return sessions


def test_state_at_each_seq_equals_the_live_projection_captured_then(history):
    log_dir, captured, marks = history
    for seq, sessions in captured.items():
        result = ledgermem("state", log_dir, "--at", seq)
        assert result.returncode == 0, result.stderr
        expected = _erased_masked(json.loads(json.dumps(sessions)), str(marks["gone"]))
        assert json.loads(result.stdout)["sessions"] == expected, f"at seq {seq}"


def test_state_at_a_time_is_the_longest_prefix_not_later_than_it(history):
    log_dir, captured, marks = history
    lines = b"".join(p.read_bytes() for p in sorted(log_dir.glob("seg-*.jsonl"))).splitlines()
    ts = json.loads(lines[marks["before"]])["ts"]
    expected_seq = max(
        i for i, line in enumerate(lines) if all(json.loads(x)["ts"] <= ts for x in lines[: i + 1])
    )
    result = ledgermem("state", log_dir, "--at", ts, "--time")
    assert json.loads(result.stdout)["at"] == expected_seq
    iso = ledgermem("state", log_dir, "--at", "1970-01-01T00:00:00Z")
    assert json.loads(iso.stdout) == {"at": -1, "sessions": []}


def test_state_of_one_section_and_the_context_as_assembled(history):
    log_dir, captured, marks = history
    one = json.loads(
        ledgermem(
            "state", log_dir, "--at", marks["after"], "--session", "s/1", "--section", "notes"
        ).stdout
    )
    assert list(one["sessions"][0]["sections"]) == ["notes"]
    context = json.loads(
        ledgermem("state", log_dir, "--at", marks["after"], "--session", "s/1", "--context").stdout
    )
    assert context["context_seq"] == marks["context"]
    assert context["messages"][0]["content"].startswith("## notes")


def test_diff_lists_added_updated_evicted_and_removed_items_with_reasons(history):
    log_dir, _, marks = history
    result = ledgermem(
        "diff", log_dir, "--from", marks["before"], "--to", marks["after"], "--session", "s/1"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["sessions"]["default/s/1"]
    assert {e["id"] for e in report["evicted"]} >= {str(marks["first_note"])}
    assert all(e["reason"] == "fifo" for e in report["evicted"])
    how = {e["section"]: e["how"] for e in report["removed"]}
    assert how == {"scratch": "turn ended"}
    assert [u["fields"] for u in report["updated"]] == [["content", "content_seq"]]
    transient = {e["id"]: e["left"] for e in report["transient"]}
    assert transient[str(marks["dropped"])] == "removed"
    assert transient[str(marks["gone"])] == "erased"
    added_sections = sorted(a["section"] for a in report["added"])
    assert added_sections == ["notes"] * len(added_sections)


def test_diff_is_exactly_the_difference_of_the_two_states(history):
    log_dir, captured, _ = history
    seqs = sorted(captured)
    for a, b in zip(seqs, seqs[1:], strict=False):
        report = json.loads(ledgermem("diff", log_dir, "--from", a, "--to", b).stdout)["sessions"]

        def ids(sessions):
            return {
                (s["tenant"], s["session"], i["id"])
                for s in sessions
                for sec in s["sections"].values()
                for i in sec["items"]
            }

        before, after = ids(captured[a]), ids(captured[b])
        added = {
            (k.split("/", 1)[0], k.split("/", 1)[1], e["id"])
            for k, v in report.items()
            for e in v["added"]
        }
        left = {
            (k.split("/", 1)[0], k.split("/", 1)[1], e["id"])
            for k, v in report.items()
            for e in v["removed"] + v["evicted"]
        }
        assert added == after - before, (a, b)
        assert left == before - after, (a, b)


def test_bad_input_is_one_line_and_exit_2(tmp_path, history):
    log_dir, _, _ = history
    for args in (("replay", tmp_path / "missing"), ("state", log_dir, "--at", 10**9), ("state", log_dir, "--at", "yesterday"),
                 ("diff", log_dir, "--from", 5, "--to", 2), ("state", log_dir, "--at", 1, "--section", "x")):  # fmt: skip
        result = ledgermem(*args)
        assert result.returncode == 2, args
        assert result.stderr.decode().count("\n") == 1, result.stderr


def test_replay_follow_tails_a_live_writer(tmp_path):
    log_dir = tmp_path / "live"
    writer = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "helpers" / "slow_writer.py"),
            str(log_dir),
            "00" * 32,
            "60",
            "0.005",
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert readline_within(writer.stdout, 60, "the slow writer").strip() == b"ready"
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ledgermem_cli",
            "replay",
            str(log_dir),
            "--follow",
            "--type",
            "item.added",
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        got = [
            json.loads(readline_within(follower.stdout, 60, "replay --follow"))["payload"]["i"]
            for _ in range(60)
        ]
    finally:
        follower.kill()
        writer.wait(30)
    assert got == list(range(60))
