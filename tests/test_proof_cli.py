"""`ledgermem proof` (C2SP tlog-proof, and checking one offline) and `ledgermem checkpoint`."""

from __future__ import annotations

import base64
import hashlib
import shutil

import orjson
import pytest
from helpers.cli import ledgermem

from eventstore import layout, log_proofs
from eventstore.checkpoint import CheckpointError, SigningKey, VerifierKey
from eventstore.errors import InvalidProof
from eventstore.linecheck import LineError
from eventstore.merkle import inclusion_proof, list_subtree_root
from eventstore.reader import LogReader
from eventstore.segfile import first_line
from eventstore.tlog_proof import (
    PROOF_HEADER,
    ProofFormatError,
    parse_tlog_proof,
    verify_tlog_proof,
)
from eventstore.writer import Durability
from replay.bundle import SubtreeRoots
from sections.runtime.memory import Memory


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    data = tmp_path_factory.mktemp("proof") / "data"
    with Memory.open(data, seg_bits=3, durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("s", tenant="acme")
        for i in range(25):
            s.add("messages", f"message {i}")
        erased = s.add("messages", "erase me")
        s.erase([erased.id], reason="test")
        vkey = str(mem.key.key.vkey)
    path = data / "log"
    assert len(layout.list_segments(path)) >= 3
    reader = LogReader(path)
    lines = dict(reader.lines())
    return {"path": path, "vkey": vkey, "lines": lines, "erased": erased.seq, "reader": reader}


def size_of(log) -> int:
    return int((log["path"] / "checkpoint").read_text().split("\n")[1])


def proof_text(log, seq: int, *size: object) -> str:
    result = ledgermem("proof", log["path"], "--seq", seq, *size)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


# ---- proof --------------------------------------------------------------------------------------


def test_a_proof_is_the_c2sp_text_around_the_newest_checkpoint(log):
    text = proof_text(log, 5)
    head, _, note = text.partition("\n\n")
    lines = head.split("\n")
    assert lines[0] == PROOF_HEADER and lines[1] == "index 5"
    assert all(len(base64.b64decode(h)) == 32 for h in lines[2:])
    assert note == (log["path"] / "checkpoint").read_text()


@pytest.mark.parametrize("pick", ["first", "segment-open", "middle", "redacted", "last"])
def test_a_proof_verifies_offline_with_the_records_line(log, pick):
    size = size_of(log)
    seq = {
        "first": 0,
        "segment-open": 8,
        "middle": 13,
        "redacted": log["erased"],
        "last": size - 1,
    }[pick]
    proof, checkpoint = verify_tlog_proof(
        proof_text(log, seq), log["lines"][seq], VerifierKey.parse(log["vkey"])
    )
    assert proof.index == seq and checkpoint.size == size


def test_a_proof_against_a_checkpoint_a_segment_open_embeds(log):
    for size in (8, 16):
        text = proof_text(log, 3, "--size", size)
        embedded = orjson.loads(first_line(log["path"] / layout.segment_name(size // 8)))
        assert text.partition("\n\n")[2] == embedded["payload"]["checkpoint"]
        _, checkpoint = verify_tlog_proof(text, log["lines"][3], VerifierKey.parse(log["vkey"]))
        assert checkpoint.size == size


def test_a_size_without_a_signed_checkpoint_is_refused(log):
    result = ledgermem("proof", log["path"], "--seq", 3, "--size", 9)
    assert result.returncode == 2
    assert b"no signed checkpoint of size 9" in result.stderr
    assert result.stderr.count(b"\n") == 1


def test_a_record_the_checkpoint_does_not_cover_is_refused(log):
    result = ledgermem("proof", log["path"], "--seq", 10, "--size", 8)
    assert result.returncode == 2 and b"not covered by the checkpoint of size 8" in result.stderr


def test_the_proof_is_the_rfc9162_audit_path_for_every_leaf_and_size(log, monkeypatch):
    """The memoized subtree roots give the same paths as the plain definition, with the
    recursion exercised by a tiny chunk size."""
    monkeypatch.setattr(log_proofs, "_CHUNK", 2)
    reader = log["reader"]
    leaves = reader.leaf_hashes(0, size_of(log))
    for size in range(1, len(leaves) + 1):
        roots = SubtreeRoots(reader)
        for seq in range(size):
            expected = inclusion_proof(seq, size, list_subtree_root(leaves))
            assert inclusion_proof(seq, size, roots) == expected


# ---- proof --verify ------------------------------------------------------------------------------


@pytest.fixture
def saved(log, tmp_path):
    proof = tmp_path / "p.tlog-proof"
    proof.write_text(proof_text(log, 13))
    line = tmp_path / "line"
    line.write_bytes(log["lines"][13] + b"\n")  # as `ledgermem replay` prints it
    return proof, line


def test_proof_verify_accepts_the_record(log, saved):
    proof, line = saved
    result = ledgermem("proof", "--verify", proof, "--record", line, "--vkey", log["vkey"])
    assert result.returncode == 0 and result.stdout.startswith(b"VALID  the record is seq 13")
    piped = ledgermem(
        "proof", "--verify", proof, "--record", "-", "--vkey", log["vkey"], stdin=line.read_bytes()
    )
    assert piped.returncode == 0


def test_proof_verify_fails_for_another_record(log, saved, tmp_path):
    proof, _ = saved
    other = tmp_path / "other"
    other.write_bytes(log["lines"][14])
    result = ledgermem("proof", "--verify", proof, "--record", other, "--vkey", log["vkey"])
    assert result.returncode == 1 and b"is seq 14, but the proof is for index 13" in result.stdout


def test_proof_verify_fails_for_an_edited_hash_line_or_key(log, saved, tmp_path):
    proof, line = saved
    vkey = VerifierKey.parse(log["vkey"])
    text = proof.read_text()
    lines = text.split("\n")
    lines[2] = base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    with pytest.raises(InvalidProof):
        verify_tlog_proof("\n".join(lines), line.read_bytes(), vkey)
    edited = line.read_bytes().replace(b'"content":"message ', b'"content":"MESSAGE ')
    assert edited != line.read_bytes()
    with pytest.raises(LineError) as failed:
        verify_tlog_proof(text, edited, vkey)
    assert failed.value.check == "record.pd"
    with pytest.raises(CheckpointError):
        verify_tlog_proof(text, line.read_bytes(), SigningKey.generate(vkey.origin).vkey)
    forged = tmp_path / "forged"
    forged.write_text("\n".join(lines))
    result = ledgermem("proof", "--verify", forged, "--record", line, "--vkey", log["vkey"])
    assert result.returncode == 1 and result.stdout.startswith(b"FAIL")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "c2sp.org/tlog-proof@v2\nindex 1\n\nnote\n",
        "c2sp.org/tlog-proof@v1\nindex 01\n\nnote\n",
        "c2sp.org/tlog-proof@v1\nindex 1\nnot-base64\n\nnote\n",
        "c2sp.org/tlog-proof@v1\n",
    ],
)
def test_text_that_is_not_a_tlog_proof_is_bad_input(log, tmp_path, text):
    with pytest.raises(ProofFormatError):
        parse_tlog_proof(text)
    proof, line = tmp_path / "p", tmp_path / "l"
    proof.write_text(text)
    line.write_bytes(log["lines"][1])
    result = ledgermem("proof", "--verify", proof, "--record", line, "--vkey", log["vkey"])
    assert result.returncode == 2


def test_a_proof_with_extra_data_still_parses(log):
    text = proof_text(log, 2)
    with_extra = text.replace("\nindex", "\nextra " + base64.b64encode(b"ctx").decode() + "\nindex")
    proof, _ = verify_tlog_proof(with_extra, log["lines"][2], VerifierKey.parse(log["vkey"]))
    assert proof.extra == b"ctx"


# ---- checkpoint --------------------------------------------------------------------------------


def test_checkpoint_prints_the_checkpoint_file(log):
    result = ledgermem("checkpoint", log["path"], "--vkey", log["vkey"])
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout == (log["path"] / "checkpoint").read_bytes()


def test_without_the_file_checkpoint_prints_the_newest_embedded_one(log, tmp_path):
    copy = tmp_path / "log"
    shutil.copytree(log["path"], copy)
    (copy / "checkpoint").unlink()
    result = ledgermem("checkpoint", copy)
    number, newest = layout.list_segments(copy)[-1]
    embedded = orjson.loads(first_line(newest))["payload"]["checkpoint"]
    assert result.returncode == 0 and result.stdout.decode() == embedded
    assert f"embedded in the segment.open of {newest.name}".encode() in result.stderr
    assert ledgermem("proof", copy, "--seq", 1).returncode == 0


def test_checkpoint_with_another_key_is_refused(log):
    origin = VerifierKey.parse(log["vkey"]).origin
    result = ledgermem("checkpoint", log["path"], "--vkey", str(SigningKey.generate(origin).vkey))
    assert result.returncode == 2 and b"signature" in result.stderr


def test_commands_on_a_directory_without_a_log_are_bad_input(tmp_path):
    for args in (("checkpoint", tmp_path), ("proof", tmp_path, "--seq", 0)):
        result = ledgermem(*args)
        assert result.returncode == 2 and result.stderr.count(b"\n") == 1
