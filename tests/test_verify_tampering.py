"""Tampering made here, on copies of the sample log, and what the verifier says about it.

`Forge` rewrites a copy of tests/vectors/sample-log the way someone with write access and the
vector signing key could: change records, then recompute every `pd`, `h`, `prev`, seal root,
`prev_segment_root` and signed checkpoint, so that the one change under test is the only thing
wrong. It reproduces the sample log byte for byte when nothing is changed (tested first).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.cli import ledgermem

from eventstore import jcs, merkle, record
from eventstore.checkpoint import SigningKey, sign_checkpoint
from eventstore.layout import segment_name
from eventstore.verify import FAIL, INTACT_UNANCHORED, VALID_LOCAL, VerifyInputError, verify_log
from eventstore.writer import Durability, LogWriter


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return ledgermem("verify", *args, text=True, cwd=REPO)


VECTORS_DIR = Path(__file__).parent / "vectors"
SAMPLE = VECTORS_DIR / "sample-log"
VECTORS = json.loads((VECTORS_DIR / "vectors.json").read_text("utf-8"))
ORIGIN = VECTORS["origin"]
KEY = SigningKey.from_seed(ORIGIN, bytes.fromhex(VECTORS["key"]["ed25519_seed"]))
VKEY = VECTORS["key"]["vkey"]
S = 2 ** VECTORS["seg_bits"]
REPO = Path(__file__).resolve().parent.parent


class Forge:
    """A copy of the sample log as editable records, written back fully re-hashed and re-signed."""

    def __init__(self, log_dir: Path) -> None:
        shutil.copytree(SAMPLE, log_dir)
        self.dir = log_dir
        self.key = KEY  # signs the embedded checkpoints and the checkpoint file
        self.records: list[dict] = []
        for n in range(3):
            for line in (log_dir / segment_name(n)).read_bytes().splitlines():
                rec = json.loads(line)
                marker = b',"payload":'
                if marker in line:  # keep the payload's exact bytes
                    rec["payload"] = line[line.index(marker) + len(marker) : -1]
                self.records.append(rec)

    def payload(self, seq: int) -> dict:
        return json.loads(self.records[seq]["payload"])

    def set_payload(self, seq: int, value: object) -> None:
        self.records[seq]["payload"] = jcs.canonical(value)

    def write(self) -> None:
        leaves: list[bytes] = []
        lines: list[bytes] = []
        for seq, rec in enumerate(self.records):
            prev = record.genesis(ORIGIN) if seq == 0 else leaves[-1]
            if rec["tenant"] == "_log" and rec["type"] == "segment.seal":
                body = self.payload(seq)
                body["root"] = _b64(merkle.root(leaves[:seq]))
                rec["payload"] = jcs.canonical(body)
            if rec["tenant"] == "_log" and rec["type"] == "segment.open" and seq:
                body = self.payload(seq)
                body["prev_segment_root"] = _b64(merkle.root(leaves[seq - S : seq]))
                body["checkpoint"] = sign_checkpoint(self.key, seq, merkle.root(leaves[:seq]))
                rec["payload"] = jcs.canonical(body)
            salt = rec.get("salt")
            if "payload" in rec:
                rec["pd"] = record.payload_digest(bytes.fromhex(salt), rec["payload"]).hex()
            rec["prev"] = prev.hex()
            h = record.record_hash(
                prev, rec["seq"], rec["ts"], rec["tenant"], rec["session"], rec["section"],
                rec["type"], bytes.fromhex(rec["pd"]),
            )  # fmt: skip
            rec["h"] = h.hex()
            leaves.append(h)
            lines.append(_line(rec))
        for n in range(3):
            (self.dir / segment_name(n)).write_bytes(b"".join(lines[n * S : (n + 1) * S]))
        text = sign_checkpoint(self.key, len(leaves), merkle.root(leaves))
        (self.dir / "checkpoint").write_text(text, encoding="utf-8")

    def line(self, seq: int) -> bytes:
        return self.lines(seq // S)[seq % S]

    def lines(self, segment: int) -> list[bytes]:
        return (self.dir / segment_name(segment)).read_bytes().splitlines(keepends=True)

    def replace_line(self, seq: int, new: bytes) -> None:
        lines = self.lines(seq // S)
        lines[seq % S] = new
        (self.dir / segment_name(seq // S)).write_bytes(b"".join(lines))


def _line(rec: dict) -> bytes:
    """The record's line; json.dumps escapes what an identifier should never hold."""
    payload = rec.get("payload")
    keys = record.KEYS[:-1] if payload is not None else record.REDACTED_KEYS
    head = json.dumps(
        {k: rec[k] for k in keys if k in rec}, ensure_ascii=False, separators=(",", ":")
    )
    tail = b',"payload":' + payload + b"}" if payload is not None else b"}"
    return head[:-1].encode() + tail + b"\n"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.fixture
def forge(tmp_path: Path) -> Forge:
    return Forge(tmp_path / "log")


def verify(forge: Forge, **kwargs):
    kwargs.setdefault("vkey", VKEY)
    return verify_log(forge.dir, **kwargs)


def place(report) -> tuple:
    error = report.error
    return (report.verdict, error.file, error.line, error.seq, error.check)


SEG2 = segment_name(2)


# -- the tool itself


def test_forge_reproduces_the_sample_log_byte_for_byte(forge):
    forge.write()
    for name in (segment_name(0), segment_name(1), SEG2, "checkpoint"):
        assert (forge.dir / name).read_bytes() == (SAMPLE / name).read_bytes()


# -- line bytes and keys (docs/format.md section 2)


@pytest.mark.parametrize(
    "old, new",
    [
        (b'{"claim":"user.prefers",', b'{"claim":"user.dislikes","claim":"user.prefers",'),
        (b'"value":"tea"}', b'"value":"tea","value":"tea"}'),
        (b'"seq":10,', b'"seq":10,"seq":10,'),
    ],
    ids=["payload-last-wins", "payload-same-value", "top-level"],
)
def test_a_duplicate_key_anywhere_on_a_line_fails(forge, old, new):
    line = forge.line(10)
    assert old in line
    forge.replace_line(10, line.replace(old, new, 1))
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.json")


def test_an_unknown_top_level_key_fails_in_strict_mode(forge):
    forge.replace_line(10, forge.line(10).replace(b'{"v":1,', b'{"v":1,"note":"x",'))
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.unknown_key")


def test_an_unknown_top_level_key_is_a_warning_in_non_strict_mode(forge):
    forge.replace_line(10, forge.line(10).replace(b'{"v":1,', b'{"v":1,"note":"x",'))
    report = verify(forge, strict=False)
    assert report.verdict == VALID_LOCAL
    assert any("unknown top-level keys ['note']" in w for w in report.warnings)


def test_cli_non_strict_exits_0_for_an_unknown_top_level_key(forge):
    forge.replace_line(10, forge.line(10).replace(b'{"v":1,', b'{"v":1,"note":"x",'))
    strict = run_cli(str(forge.dir), "--vkey", VKEY)
    lenient = run_cli(str(forge.dir), "--vkey", VKEY, "--non-strict", "--json")
    assert (strict.returncode, lenient.returncode) == (1, 0)
    assert json.loads(lenient.stdout)["verdict"] == VALID_LOCAL


def _add_whitespace(line: bytes) -> bytes:
    """A space after every `:` and `,` outside strings: the same JSON, other bytes."""
    out, in_string, escaped = bytearray(), False, False
    for byte in line.rstrip(b"\n"):
        out.append(byte)
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b":,":
            out.append(0x20)
    return bytes(out) + b"\n"


def test_whitespace_only_reserialization_still_verifies_with_a_warning(forge):
    for n in range(3):
        lines = [_add_whitespace(line) for line in forge.lines(n)]
        (forge.dir / segment_name(n)).write_bytes(b"".join(lines))
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert report.records == 11
    assert [w for w in report.warnings if "non-canonical" in w] == [
        f"11 non-canonical line(s), first {segment_name(0)} line 1: key order, whitespace or "
        "escapes differ from the writer's bytes (nothing hashes the line, so they still verify)"
    ]


def test_reordered_keys_still_verify_with_a_warning(forge):
    rec = json.loads(forge.line(10))
    reordered = json.dumps(dict(reversed(rec.items())), ensure_ascii=False, separators=(",", ":"))
    forge.replace_line(10, reordered.encode() + b"\n")
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert any("1 non-canonical line(s)" in w for w in report.warnings)


def test_an_integer_written_as_a_float_fails(forge):
    forge.replace_line(10, forge.line(10).replace(b'"seq":10,', b'"seq":10.0,'))
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.seq")


def test_payload_without_salt_fails(forge):
    rec = json.loads(forge.line(10))
    del rec["salt"]
    forge.replace_line(10, json.dumps(rec, separators=(",", ":")).encode() + b"\n")
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.payload_salt")


def test_an_identifier_with_a_trailing_newline_fails_despite_valid_hashes(forge):
    # `re.match(r"...$")` would accept "acme\n"; a full match does not.
    forge.records[10]["tenant"] = "acme\n"
    forge.write()
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.identifier")


# -- payload numbers (docs/format.md section 4)


def test_an_integer_beyond_2_53_in_a_payload_fails_even_when_hashed_as_written(forge):
    forge.records[10]["payload"] = b'{"claim":"user.prefers","n":9007199254740993,"value":"tea"}'
    forge.write()
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.json")


def test_the_largest_safe_integer_in_a_payload_verifies(forge):
    forge.records[10]["payload"] = b'{"claim":"user.prefers","n":9007199254740991,"value":"tea"}'
    forge.write()
    assert verify(forge).verdict == VALID_LOCAL


def test_pd_is_checked_over_jcs_bytes_not_the_bytes_as_written(forge):
    # orjson writes 1.0 where JCS writes 1: a pd over `1.0` is not the record's pd.
    forge.records[10]["payload"] = b'{"claim":"user.prefers","n":1.0,"value":"tea"}'
    forge.write()
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.pd")


def test_a_float_written_non_canonically_verifies_with_a_warning(forge):
    forge.records[10]["payload"] = b'{"claim":"user.prefers","n":1,"value":"tea"}'
    forge.write()
    forge.replace_line(10, forge.line(10).replace(b'"n":1,', b'"n":1.0,'))
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert any("1 non-canonical line(s)" in w for w in report.warnings)


# -- control records (docs/format.md section 5)


def test_bytes_after_a_segment_seal_fail(forge):
    seal = forge.lines(1)[-1]
    (forge.dir / segment_name(1)).write_bytes(b"".join(forge.lines(1)) + seal)
    assert place(verify(forge)) == (FAIL, segment_name(1), 5, 8, "segment.after_seal")


def test_a_wrong_seal_root_fails_at_the_seal(forge):
    forge.write()
    line = forge.line(7)
    root = json.loads(line)["payload"]["root"]
    forge.replace_line(7, line.replace(root.encode(), _b64(bytes(32)).encode()))
    # The seal's h no longer matches either; the line is the place, whichever check says so.
    report = verify(forge)
    assert place(report)[:4] == (FAIL, segment_name(1), 4, 7)


def test_a_missing_segment_file_fails_at_that_segment(forge):
    (forge.dir / segment_name(1)).unlink()
    report = verify(forge)
    assert place(report) == (FAIL, segment_name(1), None, 4, "segment.missing")


def test_a_sealed_last_segment_without_successor_is_valid(forge):
    (forge.dir / SEG2).unlink()
    (forge.dir / "checkpoint").unlink()
    report = verify(forge)
    assert (report.verdict, report.records, report.anchor.size) == (VALID_LOCAL, 8, 4)
    assert report.warnings == []


def test_an_empty_last_segment_after_a_sealed_one_is_a_warning(forge):
    (forge.dir / SEG2).write_bytes(b"")
    (forge.dir / "checkpoint").unlink()
    report = verify(forge)
    assert (report.verdict, report.records) == (VALID_LOCAL, 8)
    assert any(f"{SEG2} is empty" in w for w in report.warnings)


def test_a_header_vkey_other_than_the_auditors_is_a_warning(forge):
    other = SigningKey.from_seed(ORIGIN, bytes(32)).vkey
    header = forge.payload(0)
    header["vkey"] = str(other)
    forge.set_payload(0, header)
    forge.write()
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert any("segment 0's header names vkey" in w for w in report.warnings)


def test_a_control_record_without_its_payload_fails(forge):
    rec = forge.records[9]
    del rec["payload"], rec["salt"]
    forge.write()
    assert place(verify(forge)) == (FAIL, SEG2, 2, 9, "control.payload_removed")


# -- redaction (docs/format.md section 9)


def test_a_redaction_naming_a_wrong_pd_fails_at_the_redaction_record(forge):
    body = forge.payload(6)
    body["targets"][0]["pd"] = forge.records[10]["pd"]
    forge.set_payload(6, body)
    forge.write()
    assert place(verify(forge)) == (FAIL, segment_name(1), 3, 6, "redaction.target")


def test_a_redaction_naming_a_control_record_fails_at_the_redaction_record(forge):
    body = forge.payload(6)
    body["targets"].append({"pd": forge.records[4]["pd"], "seq": 4})
    forge.set_payload(6, body)
    forge.write()
    assert place(verify(forge)) == (FAIL, segment_name(1), 3, 6, "redaction.target")


def test_a_redaction_whose_target_still_holds_its_payload_is_pending(forge):
    original = json.loads(VECTORS["records"][5]["line"])
    forge.records[5] = {**original, "payload": jcs.canonical(original["payload"])}
    forge.write()
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    [redaction] = report.redactions
    assert (redaction.targets, redaction.payload_removed, redaction.pending) == ([5], [], [5])


def test_a_wrong_redacted_value_is_only_a_warning(forge):
    forge.replace_line(5, forge.line(5).replace(b'"redacted":6}', b'"redacted":7}'))
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert any("`redacted` value" in w for w in report.warnings)


# -- crash leftovers (docs/format.md section 10)


def test_an_unparsable_last_line_beyond_every_checkpoint_is_a_torn_tail(forge):
    with open(forge.dir / SEG2, "ab") as f:
        f.write(b"\x00" * 40 + b"\n")
    report = verify(forge)
    assert (report.verdict, report.records, report.torn_bytes) == (VALID_LOCAL, 11, 41)


def test_an_unparsable_line_followed_by_a_json_line_fails(forge):
    with open(forge.dir / SEG2, "ab") as f:
        f.write(b"\x00" * 40 + b"\n" + b'{"v":1}\n')
    assert place(verify(forge)) == (FAIL, SEG2, 4, 11, "record.not_json")


def test_an_unparsable_line_a_checkpoint_covers_fails(forge):
    lines = forge.lines(2)
    lines[-1] = b"\x00" * 40 + b"\n"  # seq 10 lost, but the checkpoint file covers 11 records
    (forge.dir / SEG2).write_bytes(b"".join(lines))
    assert place(verify(forge)) == (FAIL, SEG2, 3, 10, "record.covered_leftover")


# -- the directory (docs/format.md section 1)


def test_a_stray_seg_name_is_a_warning(forge):
    (forge.dir / "seg-foo.jsonl").write_bytes(b"not a segment\n")
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert any(
        w.startswith("ignored seg-foo.jsonl: not a segment file name") for w in report.warnings
    )


@pytest.mark.parametrize("name", ["checkpoint.tmp", "seg-000000000002.jsonl.tmp"])
def test_a_tmp_file_is_ignored_with_a_warning(forge, name):
    (forge.dir / name).write_bytes(b"half-written\n")
    report = verify(forge)
    assert report.verdict == VALID_LOCAL
    assert any(w.startswith(f"ignored temporary file {name}") for w in report.warnings)


def test_an_index_directory_is_ignored(forge):
    (forge.dir / "index").mkdir()
    (forge.dir / "index" / "seg-000000000000.idx").write_bytes(b"\x00" * 16)
    report = verify(forge)
    assert (report.verdict, report.warnings) == (VALID_LOCAL, [])


# -- pins and keys (docs/format.md section 10, inputs)


def other_key_pin(tmp_path: Path) -> Path:
    other = SigningKey.from_seed(ORIGIN, bytes(range(32)))
    pin = tmp_path / "pin-other-key"
    pin.write_text(sign_checkpoint(other, 11, merkle.root([bytes(32)] * 11)), encoding="utf-8")
    return pin


def test_a_pin_signed_by_another_key_is_an_input_error(forge, tmp_path):
    with pytest.raises(VerifyInputError, match="not a checkpoint signed by the log key"):
        verify(forge, pins=[other_key_pin(tmp_path)])


def test_cli_exits_2_for_a_pin_signed_by_another_key(forge, tmp_path):
    done = run_cli(str(forge.dir), "--vkey", VKEY, "--pin", str(other_key_pin(tmp_path)))
    assert done.returncode == 2
    assert "not a checkpoint signed by the log key" in done.stderr


def test_a_checkpoint_file_signed_by_another_key_fails(forge):
    other = SigningKey.from_seed(ORIGIN, bytes(range(32)))
    root = merkle.root([bytes.fromhex(r["h"]) for r in VECTORS["records"]])
    (forge.dir / "checkpoint").write_text(sign_checkpoint(other, 11, root), encoding="utf-8")
    assert place(verify(forge)) == (FAIL, "checkpoint", None, None, "checkpoint.signature")


def test_without_a_vkey_a_rewritten_log_is_at_most_intact_unanchored(forge):
    # Whoever rewrites the files can also put their own key in the header.
    forge.key = SigningKey.from_seed(ORIGIN, bytes(32))
    header = forge.payload(0)
    header["vkey"] = str(forge.key.vkey)
    forge.set_payload(0, header)
    forge.write()
    assert verify_log(forge.dir).verdict == INTACT_UNANCHORED
    assert verify(forge).verdict == FAIL


# -- a log written by LogWriter


def write_log(log_dir: Path) -> SigningKey:
    """Three-record segments, floats, a non-BMP character, a redaction and a restart."""
    key = SigningKey.from_seed("test.ledgermem.local/verify", bytes(32))
    options = {"seg_bits": 3, "durability": Durability.UNSAFE_NO_FSYNC}
    writer = LogWriter.open(log_dir, key, **options)
    records = [
        writer.append("acme", "s-1", "messages", "item.added", {"text": f"note {i} 😀", "x": i / 3})
        for i in range(20)
    ]
    writer.redact([records[3].seq, records[12].seq], "test")
    writer.close()
    writer = LogWriter.open(log_dir, key, **options)
    writer.append("acme", "s-2", "findings", "item.added", {"big": 1e300, "n": 2**53 - 1})
    writer.close()
    return key


def test_a_log_written_by_the_writer_verifies_the_same_with_one_and_two_jobs(tmp_path):
    key = write_log(tmp_path / "log")
    one = verify_log(tmp_path / "log", str(key.vkey))
    assert (one.verdict, one.warnings) == (VALID_LOCAL, [])
    assert [(r.targets, r.payload_removed) for r in one.redactions] == [([4, 17], [4, 17])]
    assert [r.clean for r in one.restarts] == [True]
    assert verify_log(tmp_path / "log", str(key.vkey), jobs=2).to_json() == one.to_json()


def test_a_writer_log_cut_behind_its_checkpoint_fails(tmp_path):
    key = write_log(tmp_path / "log")
    last = max((tmp_path / "log").glob("seg-*.jsonl"))
    lines = last.read_bytes().splitlines(keepends=True)
    last.write_bytes(b"".join(lines[:-1]))
    report = verify_log(tmp_path / "log", str(key.vkey))
    assert (report.verdict, report.error.file, report.error.check) == (
        FAIL,
        "checkpoint",
        "checkpoint.size",
    )


# -- jobs


def test_two_jobs_agree_with_one_on_a_forged_failure(forge):
    body = forge.payload(6)
    body["targets"][0]["pd"] = forge.records[10]["pd"]
    forge.set_payload(6, body)
    forge.write()
    assert verify(forge, jobs=2).to_json() == verify(forge, jobs=1).to_json()
