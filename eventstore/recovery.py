"""Crash recovery decisions (log-format.md sections 8 and 10), as pure functions over bytes.

`scan_tail` walks the last segment's bytes, checks every complete line, and says where the
valid records end and which suffix, if any, is a crash leftover. The writer does the file work
(quarantine, truncate, fsync) around it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import orjson

from . import jcs
from .errors import CorruptLog
from .record import PAY_TAG, record_hash

_sha256 = hashlib.sha256


@dataclass
class TailScan:
    leaves: list[bytes] = field(default_factory=list)  # h of each valid record, in order
    valid_end: int = 0  # byte offset just past the last valid line
    leftover_offset: int | None = None  # where a crash leftover starts, if any
    first: dict | None = None  # the first valid record (the segment.open), parsed
    last: dict | None = None  # the last valid record, parsed
    last_event: dict | None = None  # the last valid record that is not segment.seal/open

    @property
    def count(self) -> int:
        return len(self.leaves)


def _is_json_text(line: bytes) -> bool:
    try:
        orjson.loads(line)
        return True
    except orjson.JSONDecodeError:
        pass
    try:  # orjson refuses 1e400 and lone surrogates, which are still JSON texts
        json.loads(line, parse_constant=_no_constant)
        return True
    except (ValueError, UnicodeError):
        return False


def _no_constant(token: str) -> object:
    raise ValueError(token)


def check_line(line: bytes, seq: int, prev: bytes, seg_bits: int) -> tuple[bytes, dict]:
    """Check one complete line as record `seq` following `prev`; return (h, parsed) or raise ValueError."""
    obj = orjson.loads(line)
    if type(obj) is not dict:
        raise ValueError("not a JSON object")
    if obj.get("v") != 1 or type(obj.get("seq")) is not int or type(obj.get("ts")) is not int:
        raise ValueError("bad v, seq or ts")
    if obj["seq"] != seq:
        raise ValueError(f"holds seq {obj['seq']} where {seq} is expected")
    if obj.get("prev") != prev.hex():
        raise ValueError(f"seq {seq} does not chain: prev is not the h of seq {seq - 1}")
    salt = obj.get("salt")
    if ("payload" in obj) != (salt is not None):
        raise ValueError("payload and salt must be both present or both absent")
    pd = bytes.fromhex(obj["pd"])
    if salt is not None:
        payload = obj["payload"]
        body = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
        salt_bytes = bytes.fromhex(salt)
        if _sha256(PAY_TAG + salt_bytes + body).digest() != pd:
            body = jcs.jcs_reference(payload)
            if _sha256(PAY_TAG + salt_bytes + body).digest() != pd:
                raise ValueError(f"seq {seq}: payload does not match pd")
    h = record_hash(
        prev, seq, obj["ts"], obj["tenant"], obj["session"], obj["section"], obj["type"], pd
    )
    if h.hex() != obj.get("h"):
        raise ValueError(f"seq {seq}: h does not match the record")
    mask = (1 << seg_bits) - 1
    is_open = obj["tenant"] == "_log" and obj["type"] == "segment.open"
    is_seal = obj["tenant"] == "_log" and obj["type"] == "segment.seal"
    if (seq & mask == 0) != is_open or (seq & mask == mask) != is_seal:
        raise ValueError(f"seq {seq}: segment.open/segment.seal out of place")
    return h, obj


def scan_tail(data: bytes, first_seq: int, prev: bytes, seg_bits: int, file_name: str) -> TailScan:
    """Validate the last segment and find its crash leftover, if any (section 10's rules).

    Raises CorruptLog for anything that is not a crash leftover: a complete line that parses as
    JSON but fails a check, or a non-JSON line followed by a line that parses.
    """
    scan = TailScan()
    offset, seq = 0, first_seq
    end = len(data)
    while offset < end:
        newline = data.find(b"\n", offset)
        if newline < 0:
            scan.leftover_offset = offset  # (a) bytes after the last newline
            break
        line = data[offset:newline]
        try:
            h, obj = check_line(line, seq, prev, seg_bits)
        except orjson.JSONDecodeError:
            if _is_json_text(line) or _any_json_after(data, newline + 1):
                raise CorruptLog(
                    f"{file_name} at byte {offset} (seq {seq}): a complete line that is not a "
                    "valid record, with records after it; this is not a crash leftover"
                ) from None
            scan.leftover_offset = offset  # (b) a non-JSON line, and nothing parses after it
            break
        except (ValueError, KeyError, TypeError, jcs.InvalidPayload) as exc:
            raise CorruptLog(f"{file_name} at byte {offset} (line for seq {seq}): {exc}") from None
        scan.leaves.append(h)
        if scan.first is None:
            scan.first = obj
        scan.last = obj
        if not (obj["tenant"] == "_log" and obj["type"] in ("segment.open", "segment.seal")):
            scan.last_event = obj
        prev, seq = h, seq + 1
        offset = newline + 1
        scan.valid_end = offset
    return scan


def _any_json_after(data: bytes, offset: int) -> bool:
    return any(_is_json_text(line) for line in data[offset:].split(b"\n")[:-1])
