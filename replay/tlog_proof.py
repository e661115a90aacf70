"""The C2SP tlog-proof text format (https://c2sp.org/tlog-proof), used by `ledgermem proof`.

A proof names one record by its index, gives the hashes of its RFC 9162 inclusion proof and
carries the signed checkpoint they lead to. `verify_tlog_proof` checks a record line against
it offline, with the log's vkey alone.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass

from eventstore.checkpoint import Checkpoint, VerifierKey, parse_checkpoint
from eventstore.errors import InvalidInput, InvalidProof
from eventstore.linecheck import check_line
from eventstore.merkle import verify_inclusion


class ProofFormatError(InvalidInput):
    """Text that is not a C2SP tlog-proof: exit 2."""


def decode_hash(text: str) -> bytes:
    """A proof hash: canonical base64 of exactly 32 bytes, else ValueError."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) != 32 or base64.b64encode(raw).decode() != text:
        raise ValueError(text)
    return raw


PROOF_HEADER = "c2sp.org/tlog-proof@v1"


@dataclass(frozen=True)
class TlogProof:
    index: int
    hashes: tuple[bytes, ...]
    checkpoint: str  # the signed note, verbatim
    extra: bytes | None = None  # opaque and unauthenticated; we write none


def format_tlog_proof(index: int, hashes: Iterable[bytes], checkpoint: str) -> str:
    lines = [PROOF_HEADER, f"index {index}", *(base64.b64encode(h).decode() for h in hashes)]
    return "\n".join(lines) + "\n\n" + checkpoint


def parse_tlog_proof(text: str) -> TlogProof:
    head, sep, checkpoint = text.partition("\n\n")
    if not sep:
        raise ProofFormatError("not a tlog-proof: no empty line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != PROOF_HEADER:
        raise ProofFormatError(f"not a tlog-proof: the first line is not {PROOF_HEADER!r}")
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        try:
            extra = base64.b64decode(rest[0][6:], validate=True)
        except ValueError:
            raise ProofFormatError("tlog-proof: the extra line is not base64") from None
        rest = rest[1:]
    if not rest or not rest[0].startswith("index "):
        raise ProofFormatError("tlog-proof: no 'index N' line")
    digits = rest[0][6:]
    if not digits.isascii() or not digits.isdigit() or (digits != "0" and digits[0] == "0"):
        raise ProofFormatError(f"tlog-proof: index {digits!r} is not a decimal")
    try:
        hashes = tuple(decode_hash(h) for h in rest[1:])
    except ValueError:
        raise ProofFormatError("tlog-proof: a proof line is not base64 of 32 bytes") from None
    return TlogProof(int(digits), hashes, checkpoint, extra)


def verify_tlog_proof(text: str, line: bytes, vkey: VerifierKey) -> tuple[TlogProof, Checkpoint]:
    """Check offline that `line` is the record at the proof's index in the log `vkey` signs.

    Raises ProofFormatError for text that is not a proof (bad input), and CheckpointError,
    LineError or InvalidProof when it does not verify.
    """
    proof = parse_tlog_proof(text)
    checkpoint = parse_checkpoint(proof.checkpoint, vkey)
    record = check_line(line.removesuffix(b"\n")).record
    if record.seq != proof.index:
        raise InvalidProof(
            f"the record is seq {record.seq}, but the proof is for index {proof.index}"
        )
    verify_inclusion(
        proof.index, checkpoint.size, bytes.fromhex(record.h), proof.hashes, checkpoint.root
    )
    return proof, checkpoint
