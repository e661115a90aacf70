"""The spec's vectors, byte for byte: JCS, pd, preimage, h, lines, roots, proofs, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventstore import checkpoint, jcs, merkle, record
from eventstore.errors import InvalidPayload

VECTORS = json.loads((Path(__file__).parent / "vectors" / "vectors.json").read_text("utf-8"))
RECORDS = VECTORS["records"]
LEAVES = [bytes.fromhex(r["h"]) for r in RECORDS]
KEY = checkpoint.SigningKey.from_seed(
    VECTORS["origin"], bytes.fromhex(VECTORS["key"]["ed25519_seed"])
)


def _payload(vector: dict) -> object:
    text = vector["payload_input_json"]
    return json.loads(vector["jcs"] if text is None else text)


def test_tags_are_the_spec_bytes():
    for name, tag in (
        ("REC_TAG", record.REC_TAG),
        ("PAY_TAG", record.PAY_TAG),
        ("GEN_TAG", record.GEN_TAG),
    ):
        assert tag.hex() == VECTORS["tags"][name]["hex"]


def test_genesis_binds_the_origin():
    assert record.genesis(VECTORS["origin"]).hex() == VECTORS["genesis"]


def test_verifier_key_and_key_id_match_the_vectors():
    assert str(KEY.vkey) == VECTORS["key"]["vkey"]
    assert KEY.vkey.key_id.hex() == VECTORS["key"]["key_id"]
    assert checkpoint.VerifierKey.parse(VECTORS["key"]["vkey"]) == KEY.vkey


@pytest.mark.parametrize("vector", RECORDS, ids=lambda v: f"seq{v['seq']}")
def test_writer_reproduces_each_record_byte_for_byte(vector):
    payload_jcs = jcs.canonical(_payload(vector))
    assert payload_jcs.hex() == vector["jcs_hex"]
    salt = bytes.fromhex(vector["salt"])
    pd = record.payload_digest(salt, payload_jcs)
    assert pd.hex() == vector["pd"]
    args = (
        vector["seq"],
        vector["ts"],
        vector["tenant"],
        vector["session"],
        vector["section"],
        vector["type"],
    )
    pre = record.preimage(bytes.fromhex(vector["prev"]), *args, pd)
    assert len(pre) == vector["preimage_len"]
    assert pre.hex() == vector["preimage_hex"]
    h = record.leaf_hash(pre)
    assert h.hex() == vector["h"]
    line = record.encode_line(*args, vector["prev"], h.hex(), pd.hex(), vector["salt"], payload_jcs)
    assert line + b"\n" == vector["line"].encode("utf-8")


def test_records_chain_from_genesis():
    prev = VECTORS["genesis"]
    for vector in RECORDS:
        assert vector["prev"] == prev
        prev = vector["h"]


def test_redacted_line_drops_payload_and_salt_and_names_the_redaction():
    original = record.Record.from_line(RECORDS[5]["line"].encode())
    assert original.redacted_line(6) + b"\n" == VECTORS["redacted_lines"]["5"].encode()


def test_sample_log_lines_are_the_vector_lines():
    sample = Path(__file__).parent / "vectors" / "sample-log"
    lines = b"".join(p.read_bytes() for p in sorted(sample.glob("seg-*.jsonl"))).splitlines(
        keepends=True
    )
    expected = [v["line"].encode() for v in RECORDS]
    expected[5] = VECTORS["redacted_lines"]["5"].encode()
    assert lines == expected


@pytest.mark.parametrize("vector", VECTORS["merkle"]["roots"], ids=lambda v: f"size{v['size']}")
def test_merkle_root_of_each_size(vector):
    assert merkle.root(LEAVES[: vector["size"]]).hex() == vector["hex"]


def test_compact_range_root_matches_at_every_size():
    compact = merkle.CompactRange()
    for size, vector in enumerate(VECTORS["merkle"]["roots"]):
        assert compact.size == size
        assert compact.root().hex() == vector["hex"]
        if size < len(LEAVES):
            compact.append(LEAVES[size])


@pytest.mark.parametrize(
    "vector", VECTORS["merkle"]["inclusion"], ids=lambda v: f"{v['index']}in{v['size']}"
)
def test_inclusion_proof_matches_and_verifies(vector):
    path = merkle.inclusion_proof(vector["index"], vector["size"], merkle.list_subtree_root(LEAVES))
    assert [p.hex() for p in path] == vector["path"]
    merkle.verify_inclusion(
        vector["index"],
        vector["size"],
        bytes.fromhex(vector["leaf"]),
        path,
        bytes.fromhex(vector["root"]),
    )


@pytest.mark.parametrize(
    "vector", VECTORS["merkle"]["consistency"], ids=lambda v: f"{v['first']}to{v['second']}"
)
def test_consistency_proof_matches_and_verifies(vector):
    path = merkle.consistency_proof(
        vector["first"], vector["second"], merkle.list_subtree_root(LEAVES)
    )
    assert [p.hex() for p in path] == vector["path"]
    merkle.verify_consistency(
        vector["first"],
        vector["second"],
        bytes.fromhex(vector["first_root"]),
        bytes.fromhex(vector["second_root"]),
        path,
    )


def test_every_proof_between_all_sizes_verifies_and_a_wrong_leaf_does_not():
    sub = merkle.list_subtree_root(LEAVES)
    for size in range(1, len(LEAVES) + 1):
        tree_root = merkle.root(LEAVES[:size])
        for index in range(size):
            path = merkle.inclusion_proof(index, size, sub)
            merkle.verify_inclusion(index, size, LEAVES[index], path, tree_root)
            with pytest.raises(merkle.InvalidProof):
                merkle.verify_inclusion(
                    index, size, LEAVES[(index + 1) % len(LEAVES)], path, tree_root
                )
        for first in range(size + 1):
            path = merkle.consistency_proof(first, size, sub)
            merkle.verify_consistency(first, size, merkle.root(LEAVES[:first]), tree_root, path)


def test_signed_checkpoint_of_size_5_is_byte_identical():
    assert (
        checkpoint.sign_checkpoint(KEY, 5, merkle.root(LEAVES[:5])) == VECTORS["checkpoint_size_5"]
    )


@pytest.mark.parametrize("name", sorted(VECTORS["checkpoints_in_sample_log"]))
def test_sample_log_checkpoints_parse_and_verify(name):
    text = VECTORS["checkpoints_in_sample_log"][name]
    parsed = checkpoint.parse_checkpoint(text, KEY.vkey)
    assert parsed.root == merkle.root(LEAVES[: parsed.size])
    assert checkpoint.sign_checkpoint(KEY, parsed.size, parsed.root) == text


def test_checkpoint_with_one_changed_signature_character_is_refused():
    text = VECTORS["checkpoint_size_5"]
    at = text.rindex(" ") + 10
    forged = text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]
    with pytest.raises(checkpoint.CheckpointError) as caught:
        checkpoint.parse_checkpoint(forged, KEY.vkey)
    assert caught.value.check == "checkpoint.signature"


def test_witness_signatures_by_unknown_keys_are_ignored():
    other = checkpoint.SigningKey.generate("witness.example/w1")
    text = VECTORS["checkpoint_size_5"]
    witness_line = checkpoint.sign_checkpoint(other, 5, merkle.root(LEAVES[:5])).split("\n\n")[1]
    assert checkpoint.parse_checkpoint(text + witness_line, KEY.vkey).size == 5


@pytest.mark.parametrize("case", VECTORS["jcs_cases"], ids=lambda c: c["input_json"][:24])
def test_jcs_cases_match_rfc8785(case):
    value = json.loads(case["input_json"])
    assert jcs.jcs_reference(value).hex() == case["jcs_hex"]
    if "refused" in case.get("note", ""):
        with pytest.raises(InvalidPayload):
            jcs.canonical(value)
    else:
        assert jcs.canonical(value).hex() == case["jcs_hex"]
