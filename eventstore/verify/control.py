"""The payload rules of control records (docs/format.md section 5), as the verifier checks them.

Each function takes the payload of a control record whose line already passed
`linecheck.check_line` (so it is an object on a `_log` record in its right place), raises
LineError naming the failed rule, and returns the facts the stitcher needs.
"""

from __future__ import annotations

import base64

from ..checkpoint import CheckpointError, VerifierKey, parse_checkpoint
from ..errors import BadKey
from ..linecheck import LineError
from ..record import FORMAT_NAME, HEX64, REDACTION, SEGMENT_OPEN, SEGMENT_SEAL
from .plan import Plan
from .report import Restart


def check_log_header(payload: dict, plan: Plan) -> str | None:
    """Segment 0's segment.open; returns a warning when it names another vkey than the one given."""
    _check_open(payload, plan, 0, 0)
    _expect(payload, SEGMENT_OPEN, "seg_bits", plan.seg_bits)
    text = payload.get("vkey")
    try:
        header_key = VerifierKey.parse(text) if type(text) is str else None
    except BadKey:
        header_key = None
    if header_key is None:
        raise LineError("segment.open.vkey", f"vkey {text!r} is not a verifier key")
    if plan.auditor_vkey is not None and str(header_key) != plan.auditor_vkey:
        return (
            f"segment 0's header names vkey {text!r}, not the vkey given; "
            "the given key is the one trusted"
        )
    return None


def check_segment_open(
    payload: dict, plan: Plan, number: int, seq: int, vkey: VerifierKey
) -> tuple[bytes, bytes]:
    """A later segment.open: (the prev_segment_root it claims, its embedded checkpoint's root)."""
    _check_open(payload, plan, number, seq)
    prev_segment_root = _root_field(payload, SEGMENT_OPEN, "prev_segment_root")
    text = payload.get("checkpoint")
    if type(text) is not str:
        raise LineError("segment.open.checkpoint", "segment.open holds no checkpoint")
    try:
        cp = parse_checkpoint(text, vkey)
    except CheckpointError as exc:
        raise LineError("segment.open.checkpoint", f"embedded checkpoint: {exc}") from None
    if cp.size != seq:
        raise LineError(
            "segment.open.checkpoint", f"embedded checkpoint has size {cp.size}, not {seq}"
        )
    return prev_segment_root, cp.root


def _check_open(payload: dict, plan: Plan, number: int, seq: int) -> None:
    if payload.get("format") != FORMAT_NAME:
        raise LineError(
            "segment.open.format", f"format is {payload.get('format')!r}, not {FORMAT_NAME!r}"
        )
    if payload.get("origin") != plan.origin:
        raise LineError(
            "segment.open.origin",
            f"origin {payload.get('origin')!r} is not this log's origin {plan.origin!r}",
        )
    _expect(payload, SEGMENT_OPEN, "segment", number)
    _expect(payload, SEGMENT_OPEN, "first_seq", seq)


def check_segment_seal(payload: dict, number: int, first_seq: int, seq: int) -> bytes:
    """A segment.seal: the Merkle root of its segment's records that it claims."""
    _expect(payload, SEGMENT_SEAL, "segment", number)
    _expect(payload, SEGMENT_SEAL, "first_seq", first_seq)
    _expect(payload, SEGMENT_SEAL, "last_seq", seq)
    return _root_field(payload, SEGMENT_SEAL, "root")


def check_log_resume(payload: dict, seq: int) -> Restart:
    clean, torn = payload.get("clean"), payload.get("torn_bytes")
    fragment, size = payload.get("fragment_sha256"), payload.get("checkpoint_size")
    if type(clean) is not bool:
        raise LineError("log.resume.payload", "clean is not true or false")
    if type(torn) is not int or torn < 0:
        raise LineError("log.resume.payload", "torn_bytes is not a non-negative integer")
    if fragment is None:
        if torn:
            raise LineError("log.resume.payload", "fragment_sha256 is null but bytes were torn")
    elif torn == 0 or type(fragment) is not str or HEX64.fullmatch(fragment) is None:
        raise LineError(
            "log.resume.payload",
            "fragment_sha256 must be 64 hex digits when bytes were torn, else null",
        )
    if type(size) is not int or size < 0:
        raise LineError("log.resume.payload", "checkpoint_size is not a non-negative integer")
    return Restart(seq, clean, torn, fragment, size)


def check_redaction(payload: dict, seq: int) -> list[tuple[int, str]]:
    """A redaction: its targets as (seq, pd); the stitcher matches them to removed payloads."""
    targets = payload.get("targets")
    if type(targets) is not list or not targets:
        raise LineError(f"{REDACTION}.payload", "targets is not a non-empty list")
    if type(payload.get("reason")) is not str:
        raise LineError(f"{REDACTION}.payload", "reason is not a string")
    if "request" in payload and type(payload["request"]) is not str:
        raise LineError(f"{REDACTION}.payload", "request is not a string")
    found = []
    for target in targets:
        t_seq = target.get("seq") if type(target) is dict else None
        t_pd = target.get("pd") if type(target) is dict else None
        if type(t_seq) is not int or type(t_pd) is not str or HEX64.fullmatch(t_pd) is None:
            raise LineError(f"{REDACTION}.payload", f"target {target!r} is not {{seq, pd}}")
        if not 0 <= t_seq < seq:
            raise LineError(f"{REDACTION}.target", f"target seq {t_seq} is not an earlier record")
        found.append((t_seq, t_pd))
    return found


def _expect(payload: dict, type_: str, key: str, value: int) -> None:
    got = payload.get(key)
    if type(got) is not int or got != value:
        raise LineError(f"{type_}.{key}", f"{type_} has {key} {got!r}, not {value}")


def _root_field(payload: dict, type_: str, key: str) -> bytes:
    text = payload.get(key)
    root = _b64_32(text)
    if root is None:
        raise LineError(f"{type_}.{key}", f"{key} {text!r} is not base64 of 32 bytes")
    return root


def _b64_32(text: object) -> bytes | None:
    if type(text) is not str:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if len(raw) != 32 or base64.b64encode(raw).decode() != text:
        return None
    return raw
