"""Checking one untrusted line against the record rules (docs/format.md sections 2 to 5).

`check_line` is the one per-line check. Crash recovery, the offline verifier, the background
verifier and the bundle checker all call it, so a line fails the same check, under the same
name, whoever reads it. It raises `LineError(check, message)`; `check` is the short machine
name the verifier's report carries (`record.pd`, `payload.ijson`, ...).

A line that does not parse as JSON at all raises `NotJsonText` (check `record.not_json`): of all
complete lines, only those can start a crash leftover (section 10, rule (b)). `is_json_text`
is the test itself, shared by everything that tells a leftover from damage.

What one line cannot show is asked for through keyword arguments: the seq it must hold, the
`h` it must chain from, and the segment size that fixes where segment.open and segment.seal go.
Control payload rules stay with the verifier, the one reader that checks them.

Pure functions over bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import orjson

from . import jcs
from .errors import InvalidPayload, LedgerError
from .identifiers import is_identifier
from .record import (
    CONTROL_TENANT,
    CONTROL_TYPES,
    HEX32,
    HEX64,
    INT_LIMIT,
    KNOWN_KEYS,
    MAX_LINE_BYTES,
    PAY_TAG,
    PAYLOAD_KEYS,
    REQUIRED_KEYS,
    SEGMENT_OPEN,
    SEGMENT_SEAL,
    Record,
    encode_line,
    leaf_hash,
    preimage,
    segment_position,
)

_loads = orjson.loads
_dumps = orjson.dumps
_sha256 = hashlib.sha256
# Sorted keys as JCS wants, and integers beyond ±(2**53-1) refused as section 4 wants.
SORTED_STRICT = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_ABSENT = object()
# Every `check` name check_line can raise: the single-line rules. Verifier checks outside this
# set (segment.*, checkpoint.*, redaction.*, control payload rules, record.unterminated, ...)
# need more than one line.
CHECKS = frozenset(
    (
        "record.too_long", "record.not_json", "record.json", "record.not_object",
        "payload.ijson", "record.depth", "record.missing_key", "record.unknown_key", "record.v",
        "record.seq", "record.ts", "record.identifier", "record.prev", "record.payload_salt",
        "record.salt", "record.pd", "control.payload_removed", "record.redacted", "record.h",
        "control.kind", "control.position",
    )
)  # fmt: skip
# orjson and JCS write the same bytes for a payload except for floats in exponent form or with an
# integral value (orjson writes `1e+16`, `1.0`, `-0.0`) and for key order when an object key lies
# outside the BMP. A float with a fraction in plain notation is the same in both (shortest
# round-trip digits). These scans look for those forms anywhere in orjson's output; a false hit
# inside a string only costs a call to real JCS.
_INTEGRAL = re.compile(rb"\.0(?![0-9])")
_EXPONENT = re.compile(rb"[0-9]e[-+][0-9]")  # orjson always signs an exponent
# Deleting every other byte leaves the signs and the UTF-8 lead bytes of U+10000 and above.
_ALL_BUT_RARE = bytes(b for b in range(256) if not (0xF0 <= b <= 0xF4 or b in b"+-"))


class LineError(LedgerError):
    """A record line that fails a check of docs/format.md sections 2 to 5. `check` names it."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


class NotJsonText(LineError):
    """A complete line that does not parse as JSON: the only kind that may be a crash leftover."""

    def __init__(self) -> None:
        super().__init__("record.not_json", "not a JSON text")


@dataclass(frozen=True, slots=True)
class CheckedLine:
    """A line that passed `check_line`, with what its checks computed."""

    line: bytes  # without the newline
    obj: dict  # the parsed record
    h: bytes  # the record's hash, recomputed from its fields (it equals the `h` the line holds)
    payload_jcs: bytes | None  # the payload's JCS bytes; None once the payload was removed
    canonical: bool  # whether the line is byte for byte what a writer emits
    unknown_keys: frozenset[str]  # top-level keys outside the format (only when not strict)

    @property
    def record(self) -> Record:
        obj = self.obj
        return Record(
            obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"], obj["type"],
            obj["prev"], obj["h"], obj["pd"], obj.get("salt"), obj.get("payload"),
            obj.get("redacted"), self.line,
        )  # fmt: skip


def check_line(
    line: bytes,
    *,
    seq: int | None = None,
    prev: bytes | None = None,
    seg_bits: int | None = None,
    strict: bool = True,
) -> CheckedLine:
    """Check one complete line (without its newline) as a record; raise LineError if it fails.

    `seq`: the seq the line must hold (else any 0 <= seq < 2**53). `prev`: the `h` it must
    chain from (else any 64 hex digits). `seg_bits`: check its place in its segment (segment.open
    first, segment.seal last, neither between). `strict=False` accepts unknown top-level keys
    and reports them in `unknown_keys`. The checks run in a fixed order, so a line with several
    faults always names the same first one.
    """
    if len(line) > MAX_LINE_BYTES:
        raise LineError("record.too_long", "a line longer than 16 MiB")
    try:
        obj, payload_jcs, canonical = parse_line(line)
        return _check_record(line, obj, payload_jcs, canonical, seq, prev, seg_bits, strict)
    except RecursionError:
        raise LineError("record.depth", "nested too deeply for this verifier to check") from None


def _check_record(
    line: bytes,
    obj: dict,
    payload_jcs: bytes | None,
    canonical: bool,
    expected_seq: int | None,
    expected_prev: bytes | None,
    seg_bits: int | None,
    strict: bool,
) -> CheckedLine:
    unknown: frozenset[str] = frozenset()
    if len(obj) != 12 or obj.keys() != PAYLOAD_KEYS:
        unknown = check_keys(obj, strict)
    v = obj["v"]
    if type(v) is not int or v != 1:
        raise LineError("record.v", f"v is {v!r}, not 1")
    seq = obj["seq"]
    if expected_seq is not None:
        if type(seq) is not int or seq != expected_seq:
            where = "" if seg_bits is None else f"line {line_number(expected_seq, seg_bits)} "
            raise LineError(
                "record.seq", f"{where}holds seq {seq!r} where {expected_seq} is expected"
            )
    elif type(seq) is not int or not 0 <= seq < INT_LIMIT:
        raise LineError("record.seq", f"seq {seq!r} is not an integer 0 <= seq < 2**53")
    ts = obj["ts"]
    if type(ts) is not int or not -INT_LIMIT < ts < INT_LIMIT:
        raise LineError("record.ts", f"ts {ts!r} is not an integer with |ts| < 2**53")
    tenant, session, section, type_ = obj["tenant"], obj["session"], obj["section"], obj["type"]
    for name, value in (
        ("tenant", tenant),
        ("session", session),
        ("section", section),
        ("type", type_),
    ):
        if not is_identifier(value):
            raise LineError("record.identifier", f"{name} {value!r} is not an identifier")
    prev = obj["prev"]
    if expected_prev is not None:
        if prev != expected_prev.hex():
            raise LineError(
                "record.prev", f"prev does not chain: it is not the h of seq {seq - 1}"
                if seq else "prev of seq 0 is not the genesis value of this origin",
            )  # fmt: skip
    elif type(prev) is not str or HEX64.fullmatch(prev) is None:
        raise LineError("record.prev", "prev is not 64 lowercase hex digits")
    pd = obj["pd"]
    salt = obj.get("salt", _ABSENT)
    if (salt is _ABSENT) != (payload_jcs is None):
        raise LineError(
            "record.payload_salt", "payload and salt must be both present or both absent"
        )
    if payload_jcs is not None:
        if type(salt) is not str or HEX32.fullmatch(salt) is None:
            raise LineError("record.salt", "salt is not 32 lowercase hex digits")
        pd_bytes = _sha256(PAY_TAG + bytes.fromhex(salt) + payload_jcs).digest()
        if pd_bytes.hex() != pd:
            raise LineError("record.pd", "pd does not match the payload and salt")
    else:
        if type(pd) is not str or HEX64.fullmatch(pd) is None:
            raise LineError("record.pd", "pd is not 64 lowercase hex digits")
        if tenant == CONTROL_TENANT:
            raise LineError(
                "control.payload_removed", "a control record's payload is never removed"
            )
        redacted = obj.get("redacted")
        if redacted is not None and type(redacted) is not int:
            raise LineError("record.redacted", f"redacted {redacted!r} is not an integer")
        pd_bytes = bytes.fromhex(pd)
    h = leaf_hash(preimage(bytes.fromhex(prev), seq, ts, tenant, session, section, type_, pd_bytes))
    if h.hex() != obj["h"]:
        raise LineError("record.h", "h does not match the record's fields")
    check_control_kind(tenant, session, section, type_)
    if seg_bits is not None:
        check_position(seq, seg_bits, tenant, type_)
    return CheckedLine(line, obj, h, payload_jcs, canonical, unknown)


def check_keys(obj: dict, strict: bool = True) -> frozenset[str]:
    """Raise LineError for a missing key, or an unknown one when strict; return the unknown."""
    keys = obj.keys()
    missing = REQUIRED_KEYS - keys
    if missing:
        raise LineError("record.missing_key", f"missing key(s) {sorted(missing)}")
    unknown = keys - KNOWN_KEYS
    if unknown and strict:
        raise LineError("record.unknown_key", f"unknown top-level key(s) {sorted(unknown)}")
    return frozenset(unknown)


def check_control_kind(tenant: str, session: str, section: str, type_: str) -> None:
    """A control record is `_log`/`_log`/`_log` with one of the five control types."""
    if tenant == CONTROL_TENANT and (
        session != CONTROL_TENANT or section != CONTROL_TENANT or type_ not in CONTROL_TYPES
    ):
        raise LineError(
            "control.kind",
            f"tenant _log needs session and section _log and a control type, not "
            f"{session!r}/{section!r}/{type_!r}",
        )


def check_position(seq: int, seg_bits: int, tenant: str, type_: str) -> None:
    """segment.open first in its segment, segment.seal last, and neither anywhere else."""
    required = segment_position(seq, seg_bits)
    control = tenant == CONTROL_TENANT
    if required == SEGMENT_OPEN:
        if not (control and type_ == SEGMENT_OPEN):
            raise LineError("control.position", "line 1 of a segment must be its segment.open")
    elif required == SEGMENT_SEAL:
        if not (control and type_ == SEGMENT_SEAL):
            raise LineError(
                "control.position", "the last line of a full segment must be its segment.seal"
            )
    elif control and type_ in (SEGMENT_OPEN, SEGMENT_SEAL):
        raise LineError("control.position", f"{type_} away from its place in the segment")


def line_number(seq: int, seg_bits: int) -> int:
    """The 1-based line that holds `seq` in its segment file."""
    return (seq & ((1 << seg_bits) - 1)) + 1


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_line(line: bytes) -> tuple[dict, bytes | None, bool]:
    """(record, payload JCS bytes or None, canonical) for a line.

    Raises NotJsonText if the line does not parse as JSON, and LineError for JSON text that
    breaks the rules of sections 2 and 4 (duplicate keys, NaN, 1e400, integers beyond
    ±(2**53-1), lone surrogates, not an object). The fast path parses with orjson and rebuilds
    the canonical line: if the rebuild is byte-identical, the line has no duplicate key (a
    rebuild from a dict cannot have one), no whitespace, canonical escapes and key order.
    Everything else takes the strict path.
    """
    try:
        obj = _loads(line)
    except orjson.JSONDecodeError:
        return _parse_strict(line)
    if type(obj) is not dict:
        return _parse_strict(line)
    payload = obj.get("payload", _ABSENT)
    try:
        if payload is _ABSENT:
            pb = None
            rebuilt = encode_line(
                obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"],
                obj["type"], obj["prev"], obj["h"], obj["pd"], None, None, obj.get("redacted"),
            )  # fmt: skip
        else:
            pb = _dumps(payload, option=SORTED_STRICT)  # refuses integers beyond ±(2**53-1)
            rebuilt = encode_line(
                obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"],
                obj["type"], obj["prev"], obj["h"], obj["pd"], obj["salt"], pb,
            )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError, orjson.JSONEncodeError):
        return _parse_strict(line)
    if rebuilt != line:
        return _parse_strict(line)
    if pb is None or not needs_jcs(pb, payload):
        return obj, pb, True
    try:
        jcs.check_value(payload, max_depth=None)  # the depth limit is for input, not the format
        pjcs = jcs.jcs_reference(payload)
    except InvalidPayload as exc:
        raise LineError("payload.ijson", str(exc)) from None
    return obj, pjcs, pjcs == pb


def _parse_strict(line: bytes) -> tuple[dict, bytes | None, bool]:
    if not is_json_text(line):
        raise NotJsonText()
    try:
        obj = jcs.loads_strict(line.decode("utf-8"), max_depth=None)
    except InvalidPayload as exc:
        raise LineError("record.json", str(exc).removeprefix("payload.")) from None
    if type(obj) is not dict:
        raise LineError("record.not_object", "a record is a JSON object")
    payload = obj.get("payload", _ABSENT)
    pjcs = None
    if payload is not _ABSENT:
        try:
            pjcs = jcs.jcs_reference(payload)
        except InvalidPayload as exc:
            raise LineError("payload.ijson", str(exc)) from None
    try:
        rebuilt = encode_line(
            obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"], obj["type"],
            obj["prev"], obj["h"], obj["pd"], obj.get("salt"), pjcs, obj.get("redacted"),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError):
        rebuilt = None
    return obj, pjcs, rebuilt == line


def is_json_text(data: bytes) -> bool:
    """Whether bytes parse as JSON at all, a trailing newline aside.

    `NaN`/`Infinity` tokens, `1e400`, integers of any size and lone surrogates count as parsing:
    those are JSON texts that fail the checks (FAIL, section 4), never crash leftovers, because
    a torn write does not produce a complete line holding them. So does a text nested too deeply
    for Python's parser.
    """
    if data.endswith(b"\n"):
        data = data[:-1]
    try:
        _loads(data)
        return True
    except orjson.JSONDecodeError:
        pass
    try:
        json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    except RecursionError:
        return True
    return True


def needs_jcs(pb: bytes, payload: object) -> bool:
    """Whether orjson's sorted bytes `pb` may differ from the payload's JCS bytes."""
    if _INTEGRAL.search(pb) is not None:
        return True
    # One pass keeps only signs and non-BMP lead bytes; usually nothing is left.
    rare = pb.translate(None, _ALL_BUT_RARE)
    if not rare:
        return False
    if (b"+" in rare or b"-" in rare) and _EXPONENT.search(pb) is not None:
        return True
    return rare.strip(b"+-") != b"" and _has_non_bmp_key(payload)


def _has_non_bmp_key(value: object) -> bool:
    if type(value) is dict:
        for key, item in value.items():
            if (not key.isascii() and max(key) > "\uffff") or _has_non_bmp_key(item):
                return True
    elif type(value) is list:
        return any(_has_non_bmp_key(item) for item in value)
    return False
