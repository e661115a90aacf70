"""The offline verifier against the spec's vectors (docs/format.md section 10, docs/wire.md `verify`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import ledgermem

from eventstore.verify import (
    FAIL,
    INTACT_UNANCHORED,
    VALID_EXTERNAL,
    VALID_LOCAL,
    VerifyInputError,
    verify_log,
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return ledgermem("verify", *args, text=True, cwd=REPO)


VECTORS_DIR = Path(__file__).parent / "vectors"
SAMPLE = VECTORS_DIR / "sample-log"
TAMPER = VECTORS_DIR / "tamper"
EXPECTED = json.loads((VECTORS_DIR / "expected.json").read_text("utf-8"))
TAMPER_EXPECTED = json.loads((TAMPER / "expected.json").read_text("utf-8"))
VKEY = EXPECTED["vkey"]
REPO = Path(__file__).resolve().parent.parent


def verify(log_dir: Path, **kwargs):
    kwargs.setdefault("vkey", VKEY)
    return verify_log(log_dir, **kwargs)


# -- sample-log, without pins


def test_sample_log_is_valid_local_anchored_by_the_checkpoint_file():
    facts = EXPECTED["without_pins"]
    report = verify(SAMPLE)
    assert report.verdict == VALID_LOCAL == facts["verdict"]
    assert report.error is None
    assert report.records == facts["records"]
    assert report.segments == facts["segments"]
    assert report.anchor is not None
    assert (report.anchor.source, report.anchor.size) == ("checkpoint", facts["anchor_size"])
    assert report.unanchored_records == 0
    assert report.unanchored_by_any_checkpoint == facts["records_beyond_newest_checkpoint"]
    assert report.torn_bytes == facts["torn_bytes"]
    assert report.exit_code == 0


def test_sample_log_reports_the_unclean_restart_with_its_torn_fragment():
    [expected] = EXPECTED["without_pins"]["unclean_restarts"]
    [restart] = verify(SAMPLE).restarts
    assert restart.seq == expected["seq"]
    assert restart.clean is expected["clean"]
    assert restart.torn_bytes == expected["torn_bytes"]
    assert restart.fragment_sha256 == expected["fragment_sha256"]


def test_sample_log_reports_the_redaction_of_seq_5_as_removed_and_covered():
    [expected] = EXPECTED["without_pins"]["redactions"]
    [redaction] = verify(SAMPLE).redactions
    assert redaction.seq == expected["seq"]
    assert redaction.targets == expected["targets"]
    assert redaction.payload_removed == expected["payload_removed"]
    assert redaction.pending == []
    assert redaction.covered is True


def test_sample_log_reports_the_ts_decrease_at_seq_9():
    expected = EXPECTED["without_pins"]["ts_decreases"]
    decreases = verify(SAMPLE).ts_decreases
    assert [(d.seq, d.previous_ts, d.ts) for d in decreases] == [
        (e["seq"], e["previous_ts"], e["ts"]) for e in expected
    ]


def test_sample_log_ignores_lock_and_quarantine_without_warnings():
    assert (SAMPLE / "LOCK").exists() and (SAMPLE / "quarantine").is_dir()
    assert verify(SAMPLE).warnings == []


# -- sample-log, with pins


@pytest.mark.parametrize("pin", EXPECTED["with_pins"], ids=lambda p: Path(p["pin"]).name)
def test_each_pin_anchors_a_valid_external_verdict(pin):
    report = verify(SAMPLE, pins=[VECTORS_DIR / pin["pin"]])
    assert report.verdict == VALID_EXTERNAL == pin["verdict"]
    assert report.anchor is not None
    assert (report.anchor.source, report.anchor.size) == ("pin", pin["anchor_size"])
    assert report.unanchored_records == pin["records_beyond_pin"]
    assert report.unanchored_by_any_checkpoint == pin.get("records_beyond_newest_checkpoint", 0)


def test_two_pins_anchor_at_the_larger_one():
    pins = [VECTORS_DIR / "pins" / "checkpoint-8", VECTORS_DIR / "pins" / "checkpoint-11"]
    report = verify(SAMPLE, pins=pins)
    assert report.verdict == VALID_EXTERNAL
    assert report.anchor is not None and report.anchor.size == 11


# -- without the auditor's vkey


def test_without_a_vkey_the_verdict_is_intact_unanchored():
    report = verify_log(SAMPLE)
    assert report.verdict == INTACT_UNANCHORED
    assert report.anchor is None
    assert report.unanchored_records == 11


def test_without_a_vkey_the_report_says_the_key_came_from_the_files():
    report = verify_log(SAMPLE)
    assert report.vkey_source == "segment 0 header"
    assert any("no vkey given" in w for w in report.warnings)
    assert "segment 0 header" in report.render_text()


def test_an_origin_that_is_not_the_vkeys_is_an_input_error():
    with pytest.raises(VerifyInputError):
        verify(SAMPLE, origin="example.org/another-log")


# -- the tampered copies


@pytest.mark.parametrize("case", sorted(TAMPER_EXPECTED), ids=str)
def test_each_tampered_copy_gets_its_verdict_and_place(case):
    expected = TAMPER_EXPECTED[case]
    report = verify(TAMPER / case)
    assert report.verdict == expected["verdict"]
    if expected["verdict"] == FAIL:
        assert report.error is not None
        assert (report.error.file, report.error.line, report.error.seq) == (
            expected["file"],
            expected["line"],
            expected["seq"],
        )
        assert report.exit_code == 1
    else:
        assert report.error is None
        assert report.exit_code == 0


def test_a_torn_tail_beyond_the_checkpoint_is_reported_not_failed():
    expected = TAMPER_EXPECTED["08-torn-tail-crash"]
    report = verify(TAMPER / "08-torn-tail-crash")
    assert report.records == expected["records"]
    assert report.torn_bytes == expected["torn_bytes"]
    assert report.anchor is not None and report.anchor.size == expected["anchor_size"]


def test_truncation_with_the_checkpoint_deleted_is_anchored_by_the_embedded_checkpoint():
    expected = TAMPER_EXPECTED["09-truncated-checkpoint-deleted"]
    report = verify(TAMPER / "09-truncated-checkpoint-deleted")
    assert report.records == expected["records"]
    assert report.anchor is not None
    assert (report.anchor.source, report.anchor.size) == ("segment.open", expected["anchor_size"])
    assert report.unanchored_records == expected["unanchored_records"]


def test_the_auditors_pin_detects_truncation_the_files_cannot_show():
    expected = TAMPER_EXPECTED["09-truncated-checkpoint-deleted"]["with_pin"]
    report = verify(
        TAMPER / "09-truncated-checkpoint-deleted", pins=[VECTORS_DIR / expected["pin"]]
    )
    assert report.verdict == expected["verdict"] == FAIL
    assert report.error is not None and report.error.file == expected["file"] == "pin"


# -- jobs


CASES = [SAMPLE] + [TAMPER / case for case in sorted(TAMPER_EXPECTED)]


@pytest.mark.parametrize("log_dir", CASES, ids=lambda p: p.name)
def test_two_jobs_give_the_same_report_as_one(log_dir):
    assert verify(log_dir, jobs=2).to_json() == verify(log_dir, jobs=1).to_json()


def test_two_jobs_with_a_pin_give_the_same_report_as_one():
    pins = [VECTORS_DIR / "pins" / "checkpoint-8"]
    assert verify(SAMPLE, pins=pins, jobs=2).to_json() == verify(SAMPLE, pins=pins).to_json()


# -- reading only


def test_verify_does_not_change_the_directory(tmp_path):
    log = tmp_path / "log"
    shutil.copytree(SAMPLE, log)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in log.rglob("*") if p.is_file()}
    verify(log)
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in log.rglob("*") if p.is_file()}
    assert after == before


def test_verify_runs_while_a_writer_holds_lock(tmp_path):
    import fcntl

    log = tmp_path / "log"
    shutil.copytree(SAMPLE, log)
    with open(log / "LOCK", "rb+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert verify(log).verdict == VALID_LOCAL


# -- the report


def test_report_json_carries_the_section_10_keys():
    keys = set(verify(SAMPLE).to_json())
    assert keys >= {
        "verdict", "error", "records", "anchor", "unanchored_records",
        "unanchored_by_any_checkpoint", "torn_bytes", "restarts", "redactions",
        "ts_decreases", "warnings",
    }  # fmt: skip


def test_a_fail_report_names_file_line_seq_check_and_message():
    error = verify(TAMPER / "01-payload-edit").to_json()["error"]
    assert set(error) == {"file", "line", "seq", "check", "message"}
    assert error["check"] == "record.pd"


def test_the_text_report_puts_the_verdict_first_and_the_error_at_a_glance():
    lines = verify(TAMPER / "04-swapped-lines").render_text().splitlines()
    assert lines[0].startswith("FAIL")
    assert "seg-000000000000.jsonl line 2 (seq 1)" in lines[1]


# -- the command line, in a real subprocess


def test_cli_exits_0_and_prints_the_verdict_for_a_valid_log():
    done = run_cli(str(SAMPLE), "--vkey", VKEY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(VALID_LOCAL)


def test_cli_exits_0_for_intact_unanchored_without_a_vkey():
    done = run_cli(str(SAMPLE))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(INTACT_UNANCHORED)


def test_cli_exits_1_for_fail():
    done = run_cli(str(TAMPER / "01-payload-edit"), "--vkey", VKEY)
    assert done.returncode == 1
    assert done.stdout.startswith(FAIL)


def test_cli_json_is_one_object_with_the_verdict_and_error():
    done = run_cli(str(TAMPER / "06-truncated-behind-checkpoint"), "--vkey", VKEY, "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["verdict"] == FAIL
    assert (report["error"]["file"], report["error"]["seq"]) == ("checkpoint", 10)


def test_cli_json_with_a_pin_reports_valid_external():
    pin = VECTORS_DIR / "pins" / "checkpoint-8"
    done = run_cli(str(SAMPLE), "--vkey", VKEY, "--pin", str(pin), "--json", "--jobs", "2")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == VALID_EXTERNAL
    assert report["anchor"]["size"] == 8 and report["unanchored_records"] == 3


def test_cli_reads_the_vkey_from_a_file_with_at(tmp_path):
    vkey_file = tmp_path / "vkey"
    vkey_file.write_text(VKEY + "\n")
    done = run_cli(str(SAMPLE), "--vkey", f"@{vkey_file}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(VALID_LOCAL)


@pytest.mark.parametrize(
    "args",
    [
        ("does-not-exist",),
        (str(SAMPLE), "--vkey", "not-a-vkey"),
        (str(SAMPLE), "--vkey", VKEY, "--origin", "example.org/another-log"),
        (str(SAMPLE), "--vkey", VKEY, "--pin", "no-such-pin"),
        (str(SAMPLE), "--jobs", "0"),
    ],
    ids=["missing-dir", "bad-vkey", "origin-mismatch", "missing-pin", "bad-jobs"],
)
def test_cli_exits_2_with_one_line_on_stderr_for_bad_input(args):
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip()


def test_cli_verify_does_not_import_the_web_stack():
    code = (
        "import sys, ledgermem_cli\n"
        f"rc = ledgermem_cli.main(['verify', {str(SAMPLE)!r}, '--vkey', {VKEY!r}])\n"
        "loaded = [m for m in ('starlette', 'uvicorn', 'sections', 'streams') if m in sys.modules]\n"
        "print(rc, loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stderr
