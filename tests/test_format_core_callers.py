"""Every reader of the log agrees on the spec's vectors and on every tamper case.

The callers of the format core: `verify_log` (offline), `LogWriter.open` (crash recovery,
section 8), `linecheck.check_line` (the per-line check bundles and proofs use) and the
background verifier of the service. For each tamper case of tests/vectors/tamper they must
agree with expected.json and with each other:

- verify's verdict and first failing place are the expected ones;
- the writer refuses (CorruptLog) when the damage lies where section 8 makes it look (the last
  segment, the `checkpoint` file), never quarantines anything from a log that verify fails, and
  quarantines exactly verify's `torn_bytes` otherwise. Damage inside sealed segments behind the
  recovery point is not recovery's to find (section 8 validates the last segment only);
- on a complete failing line, the per-line check names the same check as verify when the check
  is a single-line rule, and passes the line when verify's check needs more than that line;
- the background verifier reaches "failed" naming the same check on a single-line failure, and
  "ok" on a log that verifies.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import orjson
import pytest

from eventstore.checkpoint import SigningKey, VerifierKey
from eventstore.errors import CorruptLog
from eventstore.layout import segment_name
from eventstore.linecheck import CHECKS, LineError, check_line, is_json_text
from eventstore.record import genesis
from eventstore.verify import FAIL, verify_log
from eventstore.writer import LogWriter
from streams.server.verifier import BackgroundVerifier

VECTORS_DIR = Path(__file__).parent / "vectors"
VECTORS = json.loads((VECTORS_DIR / "vectors.json").read_text("utf-8"))
SAMPLE = VECTORS_DIR / "sample-log"
TAMPER = VECTORS_DIR / "tamper"
EXPECTED = json.loads((TAMPER / "expected.json").read_text("utf-8"))
CASES = sorted(EXPECTED)
ORIGIN = VECTORS["origin"]
VKEY = VECTORS["key"]["vkey"]
KEY = SigningKey.from_seed(ORIGIN, bytes.fromhex(VECTORS["key"]["ed25519_seed"]))
SEG_BITS = VECTORS["seg_bits"]
LAST_SEGMENT = segment_name(2)  # the vectors' logs hold three segments


def copy_of(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("quarantine", "LOCK"))
    return target


def file_bytes(log_dir: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(log_dir.iterdir())
        if p.is_file() and p.name != "LOCK"
    }


def quarantined(log_dir: Path) -> list[bytes]:
    qdir = log_dir / "quarantine"
    return [p.read_bytes() for p in sorted(qdir.iterdir())] if qdir.exists() else []


def line_and_context(log_dir: Path, file: str, line: int) -> tuple[bytes, bytes | None]:
    """The raw line (newline kept) at 1-based `line` of `file`, and the h it must chain from."""
    lines = (log_dir / file).read_bytes().splitlines(keepends=True)
    raw = lines[line - 1]
    if line > 1:
        prev = bytes.fromhex(orjson.loads(lines[line - 2])["h"])
    else:
        prev = genesis(ORIGIN) if file == segment_name(0) else None
    return raw, prev


def run_background_verifier(log_dir: Path, last_seq: int) -> tuple[str, str | None]:
    verifier = BackgroundVerifier(
        log_dir, VerifierKey.parse(VKEY), head=lambda: last_seq, interval=0.02
    )
    verifier.start()
    try:
        deadline = time.monotonic() + 10
        while verifier.verdict.state == "catching_up" and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        verifier.stop()
    return verifier.verdict.state, verifier.verdict.error


def last_seq_present(log_dir: Path) -> int:
    lines = (log_dir / LAST_SEGMENT).read_bytes().split(b"\n")
    complete = [line for line in lines[:-1] if line]
    return orjson.loads(complete[-1])["seq"]


@pytest.mark.parametrize("case", CASES)
def test_verify_gives_the_expected_verdict_and_place(case):
    expected = EXPECTED[case]
    report = verify_log(TAMPER / case, vkey=VKEY)
    assert report.verdict == expected["verdict"]
    if expected["verdict"] == FAIL:
        error = report.error
        assert (error.file, error.line, error.seq) == (
            expected["file"], expected["line"], expected["seq"]
        )  # fmt: skip
    else:
        assert report.torn_bytes == expected.get("torn_bytes", 0)


@pytest.mark.parametrize("case", CASES)
def test_the_writer_refuses_damage_and_quarantines_only_crash_leftovers(case, tmp_path):
    report = verify_log(TAMPER / case, vkey=VKEY)
    work = copy_of(TAMPER / case, tmp_path)
    before = file_bytes(work)
    try:
        LogWriter.open(work, KEY).close()
    except CorruptLog:
        assert report.verdict == FAIL, "the writer refused a log that verifies"
        assert file_bytes(work) == before, "a refused open changes no file"
        assert quarantined(work) == []
        return
    error = report.error
    if report.verdict == FAIL:
        assert error.file not in ("checkpoint", LAST_SEGMENT), (
            f"verify fails {error.file} ({error.check}), which recovery checks, yet it opened"
        )
        assert quarantined(work) == [], "nothing is a crash leftover in a log that fails"
    else:
        leftovers = quarantined(work)
        assert sum(map(len, leftovers)) == report.torn_bytes
        if report.torn_bytes:
            assert before[LAST_SEGMENT].endswith(leftovers[0])


@pytest.mark.parametrize("case", [c for c in CASES if EXPECTED[c].get("line")])
def test_the_line_check_agrees_with_verify_on_the_failing_line(case):
    error = verify_log(TAMPER / case, vkey=VKEY).error
    raw, prev = line_and_context(TAMPER / case, error.file, error.line)
    if not raw.endswith(b"\n"):
        # Not a complete line: only the walk can call it (unterminated, or a leftover).
        assert error.check not in CHECKS and not is_json_text(raw)
        return
    try:
        check_line(raw[:-1], seq=error.seq, prev=prev, seg_bits=SEG_BITS)
    except LineError as exc:
        assert exc.check == error.check, exc
    else:
        assert error.check not in CHECKS, f"verify says {error.check}; the line check passed"


@pytest.mark.parametrize("case", CASES)
def test_the_background_verifier_agrees_with_verify(case, tmp_path):
    report = verify_log(TAMPER / case, vkey=VKEY)
    work = copy_of(TAMPER / case, tmp_path)
    state, error = run_background_verifier(work, last_seq_present(work))
    if report.verdict != FAIL:
        assert (state, error) == ("ok", None)
    elif report.error.check in CHECKS:
        assert state == "failed" and f"[{report.error.check}]" in error, error
        assert error.startswith(f"seq {report.error.seq}:")


# ---- the spec's sample log goes through every caller ------------------------------------------


def test_every_line_of_the_sample_log_passes_the_line_check_with_its_vector_hash():
    hashes = {r["seq"]: r["h"] for r in VECTORS["records"]}
    prev = genesis(ORIGIN)
    for n in range(3):
        for index, line in enumerate((SAMPLE / segment_name(n)).read_bytes().splitlines()):
            seq = (n << SEG_BITS) + index
            checked = check_line(line, seq=seq, prev=prev, seg_bits=SEG_BITS)
            assert checked.h.hex() == hashes[seq]
            prev = checked.h


def test_the_sample_log_opens_for_writing_and_verifies_in_the_background(tmp_path):
    assert verify_log(SAMPLE, vkey=VKEY).verdict != FAIL
    work = copy_of(SAMPLE, tmp_path)
    assert run_background_verifier(work, last_seq_present(work)) == ("ok", None)
    LogWriter.open(work, KEY).close()
    assert quarantined(work) == []


# ---- a complete line holding NaN or 1e400 is damage, never a crash leftover -------------------


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"1e400"])
def test_a_last_line_holding_a_non_finite_number_fails_everywhere(token, tmp_path):
    work = copy_of(SAMPLE, tmp_path)
    last = (work / LAST_SEGMENT).read_bytes().splitlines()[-1]
    seq = orjson.loads(last)["seq"]
    line = last.replace(b'"seq":%d,' % seq, b'"seq":%d,' % (seq + 1), 1)
    line = line[: line.index(b'"payload":') + len(b'"payload":')] + token + b"}"
    with open(work / LAST_SEGMENT, "ab") as f:
        f.write(line + b"\n")
    before = file_bytes(work)

    report = verify_log(work, vkey=VKEY)
    assert report.verdict == FAIL and report.torn_bytes == 0
    assert (report.error.file, report.error.check) == (LAST_SEGMENT, "record.json")
    with pytest.raises(CorruptLog, match=LAST_SEGMENT):
        LogWriter.open(work, KEY)
    assert file_bytes(work) == before, "nothing truncated"
    assert quarantined(work) == [], "nothing quarantined"
    with pytest.raises(LineError) as failed:
        check_line(line)
    assert failed.value.check == "record.json"
