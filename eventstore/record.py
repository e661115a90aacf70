"""Records: the format's constants, canonical bytes, hashes and segment positions
(docs/format.md sections 2, 3 and 5).

Pure functions over bytes. This module and `linecheck` (which checks an untrusted line against
these rules) are the format core: the writer, crash recovery, the offline verifier, the
background verifier and the bundle checker all build on them, so each rule has exactly one
definition.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

import orjson

FORMAT_NAME = "ledgermem/v1"
REC_TAG = b"ledgermem/v1 record\n"
PAY_TAG = b"ledgermem/v1 payload\n"
GEN_TAG = b"ledgermem/v1 genesis\n"
MAX_LINE_BYTES = 16 * 2**20
SALT_BYTES = 16
INT_LIMIT = 2**53  # seq, ts and payload integers stay strictly inside ±INT_LIMIT

CONTROL_TENANT = "_log"  # tenant, session and section of every control record
SEGMENT_OPEN = "segment.open"
SEGMENT_SEAL = "segment.seal"
LOG_RESUME = "log.resume"
LOG_CLOSE = "log.close"
REDACTION = "redaction"
CONTROL_TYPES = frozenset((SEGMENT_OPEN, SEGMENT_SEAL, LOG_RESUME, LOG_CLOSE, REDACTION))

REQUIRED_KEYS = frozenset(
    ("v", "seq", "ts", "tenant", "session", "section", "type", "prev", "h", "pd")
)
KNOWN_KEYS = REQUIRED_KEYS | {"salt", "payload", "redacted"}
PAYLOAD_KEYS = REQUIRED_KEYS | {"salt", "payload"}  # the keys of every line that keeps its payload
# A full match is required: `$` would accept a trailing newline.
HEX64 = re.compile(r"[0-9a-f]{64}")  # prev, h, pd
HEX32 = re.compile(r"[0-9a-f]{32}")  # salt

# Top-level keys in the order writers emit them; `redacted` only on redacted lines.
KEYS = (
    "v",
    "seq",
    "ts",
    "tenant",
    "session",
    "section",
    "type",
    "prev",
    "h",
    "pd",
    "salt",
    "payload",
)
REDACTED_KEYS = (
    "v",
    "seq",
    "ts",
    "tenant",
    "session",
    "section",
    "type",
    "prev",
    "h",
    "pd",
    "redacted",
)

_sha256 = hashlib.sha256
pack_seq_ts = struct.Struct(">Qq").pack  # seq (u64) and ts (i64) as they enter the preimage
_u16 = struct.Struct(">H").pack
LEAF_PREFIX = b"\x00" + REC_TAG  # the RFC 6962 leaf prefix, then the record preimage
# encode_line's bytes for a record with a payload, newline included, formatted in one step.
_EVENT_LINE = (
    b'{"v":1,"seq":%d,"ts":%d,%b,"prev":"%b","h":"%b","pd":"%b","salt":"%b","payload":%b}\n'
)
_IDENTIFIER_CACHE_MAX = 4096
_names: dict[tuple[str, str, str, str], tuple[bytes, bytes]] = {}


def segment_position(seq: int, seg_bits: int) -> str | None:
    """The control type that `seq` must hold by its place: SEGMENT_OPEN for the first record of
    a segment of 2**seg_bits records, SEGMENT_SEAL for the last, None for the places between
    (where neither may appear)."""
    mask = (1 << seg_bits) - 1
    place = seq & mask
    if place == 0:
        return SEGMENT_OPEN
    if place == mask:
        return SEGMENT_SEAL
    return None


def genesis(origin: str) -> bytes:
    """The `prev` of seq 0, binding the chain to the log's origin."""
    return _sha256(GEN_TAG + origin.encode("utf-8")).digest()


def payload_digest(salt: bytes, payload_jcs: bytes) -> bytes:
    return _sha256(PAY_TAG + salt + payload_jcs).digest()


def preimage(
    prev: bytes, seq: int, ts: int, tenant: str, session: str, section: str, type_: str, pd: bytes
) -> bytes:
    parts = [REC_TAG, prev, pack_seq_ts(seq, ts)]
    for name in (tenant, session, section, type_):
        raw = name.encode("utf-8")
        parts.append(_u16(len(raw)))
        parts.append(raw)
    parts.append(pd)
    return b"".join(parts)


def leaf_hash(record_preimage: bytes) -> bytes:
    """RFC 6962 leaf hash: the record's `h` and its Merkle leaf."""
    return _sha256(b"\x00" + record_preimage).digest()


def record_hash(
    prev: bytes, seq: int, ts: int, tenant: str, session: str, section: str, type_: str, pd: bytes
) -> bytes:
    return leaf_hash(preimage(prev, seq, ts, tenant, session, section, type_, pd))


def identifier_bytes(tenant: str, session: str, section: str, type_: str) -> tuple[bytes, bytes]:
    """The four identifiers as they enter the preimage (length-prefixed) and the line; cached,
    because a log repeats the same few combinations millions of times."""
    key = (tenant, session, section, type_)
    cached = _names.get(key)
    if cached is None:
        t, s, c, y = tenant.encode(), session.encode(), section.encode(), type_.encode()
        cached = (
            _u16(len(t)) + t + _u16(len(s)) + s + _u16(len(c)) + c + _u16(len(y)) + y,
            b'"tenant":"%b","session":"%b","section":"%b","type":"%b"' % (t, s, c, y),
        )
        if len(_names) >= _IDENTIFIER_CACHE_MAX:
            _names.clear()
        _names[key] = cached
    return cached


def encode_line(
    seq: int,
    ts: int,
    tenant: str,
    session: str,
    section: str,
    type_: str,
    prev_hex: str,
    h_hex: str,
    pd_hex: str,
    salt_hex: str | None,
    payload_jcs: bytes | None,
    redacted: int | None = None,
) -> bytes:
    """The record's line, without its trailing newline.

    Identifiers are restricted to characters that JSON never escapes, and the hex fields are
    hex, so plain formatting gives exactly the canonical bytes.
    """
    head = (
        f'{{"v":1,"seq":{seq},"ts":{ts},"tenant":"{tenant}","session":"{session}",'
        f'"section":"{section}","type":"{type_}","prev":"{prev_hex}","h":"{h_hex}","pd":"{pd_hex}"'
    ).encode()
    if payload_jcs is None:
        tail = b"}" if redacted is None else b',"redacted":%d}' % redacted
        return head + tail
    if salt_hex is None:  # the line checks pass untrusted fields and catch this
        raise TypeError("a record with a payload has a salt")
    return head + b',"salt":"' + salt_hex.encode() + b'","payload":' + payload_jcs + b"}"


class _RecordSlots:
    """`Record`'s storage with a plain `__init__`: how the writer and the reader fill a record.

    A frozen dataclass's own `__init__` sets each field through `object.__setattr__`, 2.3 µs for
    thirteen fields against 0.4 µs here, and the writer builds a record per append. `make_record`
    fills one of these and then gives it `Record`'s class: the same slots (Record adds none), so
    the object is a complete, frozen `Record` from then on.
    """

    __slots__ = (
        "seq", "ts", "tenant", "session", "section", "type", "prev", "h", "pd", "salt",
        "payload", "redacted", "line",
    )  # fmt: skip

    def __init__(
        self, seq: int, ts: int, tenant: str, session: str, section: str, type: str, prev: str,
        h: str, pd: str, salt: str | None, payload: object, redacted: int | None, line: bytes,
    ) -> None:  # fmt: skip
        self.seq = seq
        self.ts = ts
        self.tenant = tenant
        self.session = session
        self.section = section
        self.type = type
        self.prev = prev
        self.h = h
        self.pd = pd
        self.salt = salt
        self.payload = payload
        self.redacted = redacted
        self.line = line


@dataclass(frozen=True, slots=True)
class Record(_RecordSlots):
    """One parsed record line. `line` is the exact bytes of the file, without the newline.

    Build one with `make_record` (fast) or `Record(...)` (the dataclass's own constructor, for
    `dataclasses.replace` and the like); both give equal, frozen records."""

    seq: int
    ts: int
    tenant: str
    session: str
    section: str
    type: str
    prev: str
    h: str
    pd: str
    salt: str | None
    payload: object
    redacted: int | None
    line: bytes

    @property
    def has_payload(self) -> bool:
        """False once the payload was erased (docs/format.md section 9)."""
        return self.salt is not None

    @property
    def is_control(self) -> bool:
        return self.tenant == CONTROL_TENANT

    @classmethod
    def from_line(cls, line: bytes) -> Record:
        """Parse a line this project wrote. Untrusted files go through the verifier instead."""
        if line.endswith(b"\n"):
            line = line[:-1]
        obj = orjson.loads(line)
        get = obj.get
        return make_record(
            obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"], obj["type"],
            obj["prev"], obj["h"], obj["pd"], get("salt"), get("payload"), get("redacted"), line,
        )  # fmt: skip

    def redacted_line(self, redaction_seq: int) -> bytes:
        """This record's line with `payload` and `salt` removed (docs/format.md section 9)."""
        return encode_line(
            self.seq, self.ts, self.tenant, self.session, self.section, self.type,
            self.prev, self.h, self.pd, None, None, redaction_seq,
        )  # fmt: skip


def make_record(
    seq: int, ts: int, tenant: str, session: str, section: str, type_: str, prev: str, h: str,
    pd: str, salt: str | None, payload: object, redacted: int | None, line: bytes,
) -> Record:  # fmt: skip
    """A frozen `Record` with these fields, built the fast way (see `_RecordSlots`)."""
    record = _RecordSlots(
        seq, ts, tenant, session, section, type_, prev, h, pd, salt, payload, redacted, line
    )
    record.__class__ = Record
    return record  # type: ignore[return-value]  # why: a Record since the line above; mypy cannot follow a __class__ change


def new_record(
    prev: bytes,
    seq: int,
    ts: int,
    tenant: str,
    session: str,
    section: str,
    type_: str,
    salt: bytes,
    payload: object,
    payload_jcs: bytes,
    prev_hex: str | None = None,
) -> tuple[Record, bytes, bytes]:
    """(record, its line with the newline, h) of a new record: the writer's hot path.

    The same bytes as `encode_line` and the same hashes as `payload_digest`/`record_hash`
    (tests/test_format_vectors.py holds them to the spec's vectors), in one format step.
    `prev_hex` is `prev.hex()` when the caller has it already (the writer: the last record's h).
    """
    pd = _sha256(PAY_TAG + salt + payload_jcs).digest()
    preimage_names, line_names = identifier_bytes(tenant, session, section, type_)
    h = _sha256(LEAF_PREFIX + prev + pack_seq_ts(seq, ts) + preimage_names + pd).digest()
    if prev_hex is None:
        prev_hex = prev.hex()
    h_hex, pd_hex, salt_hex = h.hex(), pd.hex(), salt.hex()
    line = _EVENT_LINE % (
        seq, ts, line_names, prev_hex.encode(), h_hex.encode(), pd_hex.encode(),
        salt_hex.encode(), payload_jcs,
    )  # fmt: skip
    record = _RecordSlots(
        seq, ts, tenant, session, section, type_, prev_hex, h_hex, pd_hex, salt_hex, payload,
        None, line[:-1],
    )  # fmt: skip
    record.__class__ = Record  # see _RecordSlots
    return record, line, h  # type: ignore[return-value]  # why: a Record since the line above; mypy cannot follow a __class__ change
