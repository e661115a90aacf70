"""`ledgermem verify` on a log cut back with its checkpoint deleted (issue 30, Low): the files
alone cannot show the cut, so the report says what no checkpoint anchors, `--require-anchor`
turns that into exit 3, and a pin kept from earlier turns the cut into a FAIL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import ledgermem

from sections.runtime.memory import Memory

VECTORS = Path(__file__).parent / "vectors"
VECTORS_VKEY = json.loads((VECTORS / "expected.json").read_text("utf-8"))["vkey"]


def verify(*args: object):
    return ledgermem("verify", *args, text=True)


@pytest.fixture(scope="module")
def cut(tmp_path_factory) -> tuple[Path, str, Path]:
    """A real log cut back by 5 records with its checkpoint deleted, its vkey, and a pin of the
    checkpoint taken before the cut."""
    root = tmp_path_factory.mktemp("cut")
    data = root / "data"
    with Memory.open(data) as mem:
        session = mem.session("s1")
        for n in range(12):
            session.add("messages", f"note {n}")
    log = data / "log"
    pin = root / "pin"
    shutil.copyfile(log / "checkpoint", pin)
    [segment] = log.glob("seg-*.jsonl")
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(b"".join(lines[:-5]))
    (log / "checkpoint").unlink()
    vkey = ledgermem("vkey", "--data", data, text=True).stdout.strip()
    return log, vkey, pin


def test_the_report_names_every_record_it_could_not_anchor(cut):
    log, vkey, _ = cut
    done = verify(log, "--vkey", vkey, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "INTACT-UNANCHORED"
    assert report["checkpoint_file"] is False
    records = report["records"]
    assert report["not_anchored"].startswith(f"all {records} records: no checkpoint file")
    text = verify(log, "--vkey", vkey).stdout
    [line] = [x for x in text.splitlines() if x.startswith("  not anchored: ")]
    assert f"all {records} records" in line and "--pin FILE" in line


def test_require_anchor_exits_3_on_a_log_nothing_anchors(cut):
    log, vkey, _ = cut
    done = verify(log, "--vkey", vkey, "--require-anchor")
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert done.stdout.startswith("INTACT-UNANCHORED")
    assert done.stderr.count("\n") == 1 and "--require-anchor" in done.stderr


def test_a_pin_kept_from_before_the_cut_makes_it_a_fail(cut):
    log, vkey, pin = cut
    for extra in ((), ("--require-anchor",)):
        done = verify(log, "--vkey", vkey, "--pin", pin, *extra)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert done.stdout.startswith("FAIL") and "records were removed" in done.stdout


def test_records_past_an_embedded_checkpoint_are_named_with_their_seqs():
    # Tamper vector 09: seq 10 cut and the checkpoint file deleted; segment 2's header anchors 8.
    done = verify(VECTORS / "tamper" / "09-truncated-checkpoint-deleted", "--vkey", VECTORS_VKEY)
    assert done.returncode == 0 and done.stdout.startswith("VALID-LOCAL")
    [line] = [x for x in done.stdout.splitlines() if x.startswith("  not anchored: ")]
    assert "2 records after the anchor (seq 8..9)" in line and "no checkpoint file" in line


def test_a_fully_anchored_log_reports_nothing_unanchored():
    done = verify(VECTORS / "sample-log", "--vkey", VECTORS_VKEY, "--json", "--require-anchor")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["not_anchored"], report["checkpoint_file"]) == (None, True)
