"""Proofs as text: inclusion as C2SP tlog-proof (https://c2sp.org/tlog-proof), consistency as
the body of a C2SP tlog-witness add-checkpoint request. Pure; used by `ledgermem proof` and the
service's proof routes (streams/routes/proofs_api.py).

An inclusion proof names one record by its index, gives the hashes of its RFC 9162 inclusion
proof and carries the signed checkpoint they lead to. `verify_tlog_proof` checks a record line
against it offline, with the log's vkey alone; `verify_consistency_text` checks a consistency
proof against the older checkpoint its holder kept.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass

from .checkpoint import Checkpoint, VerifierKey, parse_checkpoint
from .errors import InvalidInput, InvalidProof
from .linecheck import check_line
from .merkle import verify_consistency, verify_inclusion


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


def _text(head: list[str], hashes: Iterable[bytes], checkpoint: str) -> str:
    """Both formats: header lines, one base64 hash a line, an empty line, the signed note."""
    lines = [*head, *(base64.b64encode(h).decode() for h in hashes)]
    return "\n".join(lines) + "\n\n" + checkpoint


def _split(text: str, what: str) -> tuple[list[str], str]:
    head, sep, checkpoint = text.partition("\n\n")
    if not sep:
        raise ProofFormatError(f"not a {what}: no empty line before the checkpoint")
    return head.split("\n"), checkpoint


def _decimal(digits: str, what: str) -> int:
    if not digits.isascii() or not digits.isdigit() or (digits != "0" and digits[0] == "0"):
        raise ProofFormatError(f"{what} {digits!r} is not a decimal")
    return int(digits)


def format_tlog_proof(index: int, hashes: Iterable[bytes], checkpoint: str) -> str:
    return _text([PROOF_HEADER, f"index {index}"], hashes, checkpoint)


def parse_tlog_proof(text: str) -> TlogProof:
    lines, checkpoint = _split(text, "tlog-proof")
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
    index = _decimal(rest[0][6:], "tlog-proof: index")
    try:
        hashes = tuple(decode_hash(h) for h in rest[1:])
    except ValueError:
        raise ProofFormatError("tlog-proof: a proof line is not base64 of 32 bytes") from None
    return TlogProof(index, hashes, checkpoint, extra)


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


# ---- consistency: the body of a C2SP tlog-witness add-checkpoint request ------------------------
#
#     old <size>
#     <base64 hash>            zero or more: the RFC 9162 consistency proof from <size>
#     (empty line)
#     <the signed checkpoint>
#
# So a log operator can hand `ledgermem proof --consistency` output straight to a witness
# (https://c2sp.org/tlog-witness), and a monitor holding an older checkpoint can check it.

MAX_CONSISTENCY_LINES = 63  # tlog-witness: a tree of < 2**63 leaves needs no more


@dataclass(frozen=True)
class ConsistencyProof:
    old: int
    hashes: tuple[bytes, ...]
    checkpoint: str  # the newer signed note, verbatim


def format_consistency(old: int, hashes: Iterable[bytes], checkpoint: str) -> str:
    return _text([f"old {old}"], hashes, checkpoint)


def parse_consistency(text: str) -> ConsistencyProof:
    lines, checkpoint = _split(text, "consistency proof")
    if not lines[0].startswith("old "):
        raise ProofFormatError("not a consistency proof: the first line is not 'old N'")
    old = _decimal(lines[0][4:], "consistency proof: old size")
    if len(lines) - 1 > MAX_CONSISTENCY_LINES:
        raise ProofFormatError(f"a consistency proof has at most {MAX_CONSISTENCY_LINES} hashes")
    try:
        hashes = tuple(decode_hash(h) for h in lines[1:])
    except ValueError:
        raise ProofFormatError("consistency proof: a line is not base64 of 32 bytes") from None
    return ConsistencyProof(old, hashes, checkpoint)


def verify_consistency_text(
    text: str, old_checkpoint: str, vkey: VerifierKey
) -> tuple[Checkpoint, Checkpoint]:
    """Check offline that the proof's checkpoint extends `old_checkpoint` (both signed by
    `vkey`): the older tree is a prefix of the newer one. Returns (old, new).

    Raises ProofFormatError for text that is not a proof (bad input), CheckpointError when a
    checkpoint does not verify, InvalidProof when the trees are not consistent."""
    proof = parse_consistency(text)
    new = parse_checkpoint(proof.checkpoint, vkey)
    old = parse_checkpoint(old_checkpoint, vkey)
    if proof.old != old.size:
        raise InvalidProof(
            f"the proof starts at size {proof.old}, the old checkpoint is {old.size}"
        )
    verify_consistency(old.size, new.size, old.root, new.root, proof.hashes)
    return old, new
