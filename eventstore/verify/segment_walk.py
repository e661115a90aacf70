"""One segment file, checked on its own (docs/format.md sections 2 to 5 and 10).

`SegmentWalk` reads a segment line by line and checks every line's bytes, keys, hashes, chain
and control rules. What it cannot know alone (the previous segment's last `h`, the Merkle roots
of the records before it) it returns as claims in a `SegmentResult`, for the stitcher.

The hot loop accepts the common line (a canonical event record that passes every check) inline;
any other line goes through the format core's `linecheck.check_line`, which alone decides what
a failure is called.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import BinaryIO, cast

import orjson

from ..checkpoint import VerifierKey
from ..identifiers import is_identifier
from ..layout import segment_name
from ..linecheck import (
    SORTED_STRICT,
    CheckedLine,
    LineError,
    NotJsonText,
    check_line,
    is_json_text,
    needs_jcs,
)
from ..merkle import CompactRange
from ..record import (
    CONTROL_TENANT,
    INT_LIMIT,
    LEAF_PREFIX,
    LOG_RESUME,
    MAX_LINE_BYTES,
    PAY_TAG,
    REDACTION,
    SEGMENT_OPEN,
    SEGMENT_SEAL,
    genesis,
    identifier_bytes,
    pack_seq_ts,
)
from . import control
from .plan import Plan
from .report import Restart, TsDecrease

_IDENTIFIER_CACHE_MAX = 4096
_CHUNK_LEAVES = 256  # leaves hashed level by level before they enter the compact range
_KEEP_TS_DECREASES = 10_000
# A canonical event line is `_HEAD`, ts, `,` and the identifiers (as `record.identifier_bytes`
# writes them), then `_FIXED` (fixed width: three hashes and the salt), the payload and `}`.
_HEAD = b'{"v":1,"seq":%d,"ts":'
_FIXED = ',"prev":"{}","h":"{}","pd":"{}","salt":"{}","payload":'
_PAYLOAD_KEY_BYTES = len('","payload":')  # after the salt's 32 hex digits, ending `_FIXED`
_SALT_TO_END = 32 + _PAYLOAD_KEY_BYTES  # from the salt's first digit to the end of `_FIXED`
_FIXED_BYTES = len(_FIXED.format("0" * 64, "0" * 64, "0" * 64, "0" * 32))
_NAMES = re.compile(rb'"tenant":"([^"]*)","session":"([^"]*)","section":"([^"]*)","type":"([^"]*)"')
_sha256 = hashlib.sha256
# What the hot path's parse and rebuild may raise: each sends the line the full way.
_NOT_FAST = (
    orjson.JSONDecodeError,
    orjson.JSONEncodeError,
    KeyError,
    TypeError,
    ValueError,
    RecursionError,
)


@dataclass
class SegmentResult:
    number: int
    records: int = 0
    error: tuple[int, int, str, str] | None = None  # (line, seq, check, message)
    first_prev: str | None = None  # `prev` of line 1, for the stitcher to link
    first_ts: int | None = None
    last_h: str | None = None
    last_ts: int | None = None
    root: bytes = b""  # Merkle root of this segment's records alone
    local_roots: dict[int, bytes] = field(default_factory=dict)  # records-in-segment -> root
    prev_segment_root: bytes | None = None  # claimed by segment.open
    open_checkpoint_root: bytes | None = None  # root in the embedded checkpoint
    seal_root: bytes | None = None  # claimed by segment.seal
    restarts: list[Restart] = field(default_factory=list)
    redactions: list[tuple[int, int, list[tuple[int, str]]]] = field(default_factory=list)
    removals: list[tuple[int, int, str, object]] = field(default_factory=list)
    ts_decreases: list[TsDecrease] = field(default_factory=list)
    ts_decreases_dropped: int = 0
    noncanonical: int = 0
    noncanonical_first: int = 0
    unknown_keys: int = 0
    unknown_keys_first: int = 0
    unknown_key_names: set[str] = field(default_factory=set)
    redacted_on_payload: int = 0
    warnings: list[str] = field(default_factory=list)
    torn_bytes: int = 0
    torn_offset: int = 0


def walk_segment(task: tuple[Plan, int]) -> SegmentResult:
    plan, number = task
    return SegmentWalk(plan, number).run()


class SegmentWalk:
    def __init__(self, plan: Plan, number: int) -> None:
        self.plan = plan
        self.number = number
        self.size = 1 << plan.seg_bits
        self.base = number * self.size
        self.name = segment_name(number)
        self.is_last = number == plan.last
        self.vkey = VerifierKey.parse(plan.vkey)
        self.result = SegmentResult(number)
        # The segment's tree: whole chunks of leaves go into the compact range as perfect
        # subtrees; the leaves of the chunk being filled wait in `leaves`.
        self.range = CompactRange()
        self.chunk = min(_CHUNK_LEAVES, self.size)
        self.leaves: list[bytes] = []
        self.idents: dict[bytes, bytes] = {}  # identifiers as in a line -> preimage bytes
        # Local tree sizes whose roots the stitcher needs: pins, the checkpoint file, the seal.
        self.queries = {
            k - self.base for k in plan.queries if self.base < k < self.base + self.size
        }
        self.queries.add(self.size - 1)
        first_prev = genesis(plan.origin) if number == 0 else None
        self.prev_bytes = first_prev
        self.expected_prev = first_prev.hex() if first_prev is not None else None
        self.last_ts: int | None = None
        self.sealed = False

    # -- the walk

    def run(self) -> SegmentResult:
        result = self.result
        path = self.plan.log_dir / self.name
        try:
            f = open(path, "rb", buffering=1 << 20)  # noqa: SIM115 - closed below
        except FileNotFoundError:
            result.error = (0, self.base, "segment.missing", f"{self.name} is missing")
            return result
        with f:
            file_size = os.fstat(f.fileno()).st_size
            self._walk(f, file_size)
        if result.error is None:
            self._check_segment_end()
        result.root = self._local_root()
        if result.records:
            result.last_h, result.last_ts = self.expected_prev, self.last_ts
        return result

    def _walk(self, f: BinaryIO, file_size: int) -> None:
        """Read the file line by line, checking each line, until the end or the first failure.

        This is the hot loop. The common line, a canonical event record that passes every
        check, is accepted inline with local variables: it decides and never explains. Any
        other line (control records, redacted or non-canonical lines, floats that orjson writes
        differently from JCS, any failed check) goes to `_check_line`, which gives the precise
        answer. Both update the same state; the locals are written back before the slow path.
        """
        readline = f.readline
        limit = MAX_LINE_BYTES + 1
        size, base, result = self.size, self.base, self.result
        idents, queries = self.idents, self.queries
        leaves, chunk = self.leaves, self.chunk
        loads, dumps, sha256, pack = orjson.loads, orjson.dumps, _sha256, pack_seq_ts
        fromhex, head, fixed = binascii.unhexlify, _HEAD.__mod__, _FIXED.format
        sorted_strict, leaf_rec = SORTED_STRICT, LEAF_PREFIX
        expected_prev, prev_bytes, last_ts = self._state()
        offset = 0
        line_no = 0
        pending: tuple[int, int] | None = None  # (offset, line) of an unparsable last-segment line
        while True:
            raw = readline(limit)
            if not raw:
                break
            line_no += 1
            # Line 1 and line S (and any after it) are never events; `sealed` implies line > S.
            if raw[-1] != 10 or pending is not None or not 1 < line_no < size:
                self._save(expected_prev, prev_bytes, last_ts)
                stop, pending = self._unusual_line(f, raw, line_no, offset, pending)
                expected_prev, prev_bytes, last_ts = self._state()
                if stop:
                    break
            else:
                body = raw[:-1]
                seq = base + line_no - 1
                # The canonical event line, cut at fixed separators instead of parsed into a
                # dict: only the payload is parsed. Whatever is cut must equal what is rebuilt
                # from the computed hashes, so a line the cuts misread simply goes the full way.
                try:
                    start = head(seq)
                    cut = body.find(b',"tenant":"', len(start))
                    ts_raw = body[len(start) : cut]
                    ts = int(ts_raw)
                    names_end = body.find(b',"prev":"', cut)
                    names_raw = body[cut + 1 : names_end]
                    ident = idents.get(names_raw) or self._event_identifiers(names_raw)
                    fixed_end = names_end + _FIXED_BYTES
                    salt_raw = body[fixed_end - _SALT_TO_END : fixed_end - _PAYLOAD_KEY_BYTES]
                    salt_bytes = fromhex(salt_raw)
                    pb = body[fixed_end:-1]
                    payload = loads(pb)
                    fast = (
                        ident  # empty: not four valid event identifiers
                        and body.startswith(start)
                        and body[-1] == 125  # b"}"
                        and b"%d" % ts == ts_raw
                        and -INT_LIMIT < ts < INT_LIMIT
                        and dumps(payload, option=sorted_strict) == pb  # also ints ≤ 2**53-1
                        and not needs_jcs(pb, payload)
                    )
                except _NOT_FAST:
                    fast = False
                if fast:
                    pd_bytes = sha256(PAY_TAG + salt_bytes + pb).digest()
                    # leaf_hash(preimage(...)), with the identifiers' bytes cached.
                    digest = sha256(
                        leaf_rec + prev_bytes + pack(seq, ts) + ident + pd_bytes
                    ).digest()
                    h = digest.hex()
                    fast = (
                        body[names_end:fixed_end]
                        == fixed(expected_prev, h, pd_bytes.hex(), salt_bytes.hex()).encode()
                    )
                if fast:
                    if ts < last_ts:
                        self._ts_decrease(seq, last_ts, ts)
                    last_ts, expected_prev, prev_bytes = ts, h, digest
                    leaves.append(digest)
                    if len(leaves) == chunk:
                        self._flush_leaves()
                    result.records += 1
                    if line_no in queries:
                        result.local_roots[line_no] = self._local_root()
                else:
                    self._save(expected_prev, prev_bytes, last_ts)
                    accepted = self._check_line(body, line_no)
                    if accepted is False:
                        return
                    if accepted is None:
                        pending = (offset, line_no)
                    expected_prev, prev_bytes, last_ts = self._state()
            offset += len(raw)
        self._save(expected_prev, prev_bytes, last_ts)
        if pending is not None:
            self._leftover(pending, file_size)

    def _save(
        self, expected_prev: str | None, prev_bytes: bytes | None, last_ts: int | None
    ) -> None:
        self.expected_prev, self.prev_bytes, self.last_ts = expected_prev, prev_bytes, last_ts

    def _state(self) -> tuple[str, bytes, int]:
        """The chain's state, for the walk's locals. It is unset (None) before line 1 is read and
        after a line that stops the walk, but the walk's inline path only takes lines after
        line 1, which set it: typed as set, so that path needs no check per line."""
        return cast(tuple[str, bytes, int], (self.expected_prev, self.prev_bytes, self.last_ts))

    def _unusual_line(
        self, f: BinaryIO, raw: bytes, line_no: int, offset: int, pending: tuple[int, int] | None
    ) -> tuple[bool, tuple[int, int] | None]:
        """Lines off the hot path: the first and last of a segment, partial lines, anything after
        a seal or after an unparsable line. Returns (stop walking, pending leftover)."""
        if self.sealed:
            self._fail(line_no, "segment.after_seal", "bytes after the segment.seal line")
            return True, None
        if raw[-1] != 10:  # no b"\n": the end of the file, or a line over 16 MiB
            if len(raw) == MAX_LINE_BYTES + 1 and self._newline_follows(f):
                where = pending[1] if pending is not None else line_no
                self._fail(where, "record.too_long", "a line longer than 16 MiB")
                return True, None
            return True, pending or (offset, line_no)
        if pending is not None:
            # After an unparsable line, the rest is a crash leftover only if nothing parses.
            if is_json_text(raw):
                self._fail(
                    pending[1], "record.not_json",
                    "not a JSON text, and a later line parses: not a crash leftover",
                )  # fmt: skip
                return True, None
            return False, pending
        parsed_ok = self._check_line(raw[:-1], line_no)
        if parsed_ok is None:
            return False, (offset, line_no)
        return not parsed_ok, None

    def _check_line(self, body: bytes, line_no: int) -> bool | None:
        """Check one complete line the full way. False on failure; None if it is not JSON text
        in the last segment (a possible crash leftover)."""
        plan = self.plan
        try:
            checked = check_line(
                body,
                seq=self.base + line_no - 1,
                prev=self.prev_bytes,
                seg_bits=plan.seg_bits,
                strict=plan.strict,
            )
            self._take_record(line_no, checked)
        except NotJsonText as exc:
            if self.is_last:
                return None
            self._fail(line_no, exc.check, exc.message)
            return False
        except LineError as exc:
            self._fail(line_no, exc.check, exc.message)
            return False
        return True

    @staticmethod
    def _newline_follows(f: BinaryIO) -> bool:
        while chunk := f.read(1 << 20):
            if b"\n" in chunk:
                return True
        return False

    def _leftover(self, pending: tuple[int, int], file_size: int) -> None:
        offset, line_no = pending
        seq = self.base + line_no - 1
        if not self.is_last:
            self._fail(line_no, "record.unterminated", "an unterminated line")
        elif self.plan.covered > seq:
            self._fail(
                line_no, "record.covered_leftover",
                f"an unterminated or unparsable line where a checkpoint covers seq {seq}: "
                "a checkpoint only covers durable records, so this is not a crash leftover",
            )  # fmt: skip
        else:
            self.result.torn_bytes = file_size - offset
            self.result.torn_offset = offset

    def _fail(self, line_no: int, check: str, message: str) -> None:
        self.result.error = (line_no, self.base + line_no - 1, check, message)

    def _check_segment_end(self) -> None:
        result = self.result
        n = result.records
        if not self.is_last and n < self.size:
            self._fail(
                n + 1, "segment.size",
                f"{self.name} ends after {n} records, but every segment but the last holds "
                f"{self.size} and ends with its segment.seal",
            )  # fmt: skip
        elif n == 0 and self.number == 0:
            self._fail(1, "segment.size", "segment 0 holds no records: it must open the log")
        elif n == 0:
            result.warnings.append(
                f"{self.name} is empty: a crash during rotation, after segment "
                f"{self.number - 1} was sealed"
            )

    # -- one record, once check_line passed it

    def _take_record(self, line_no: int, checked: CheckedLine) -> None:
        result = self.result
        obj = checked.obj
        seq = obj["seq"]
        if checked.unknown_keys:
            result.unknown_keys += 1
            if result.unknown_keys == 1:
                result.unknown_keys_first = line_no
            if len(result.unknown_key_names) < 20:
                result.unknown_key_names.update(sorted(checked.unknown_keys)[:20])
        if checked.payload_jcs is not None and "redacted" in obj:
            result.redacted_on_payload += 1
        if obj["tenant"] == CONTROL_TENANT:
            self._check_control(line_no, seq, obj["type"], obj["payload"])
        if not checked.canonical:
            result.noncanonical += 1
            if result.noncanonical == 1:
                result.noncanonical_first = line_no
        if checked.payload_jcs is None:
            result.removals.append((seq, line_no, obj["pd"], obj.get("redacted")))
        if seq == self.base:
            result.first_prev = obj["prev"]
        self._accept(seq, obj["ts"], checked.h, obj["h"])

    def _event_identifiers(self, names_raw: bytes) -> bytes:
        """The preimage bytes of four valid event identifiers, given as they stand in a canonical
        line (`"tenant":"...",...,"type":"..."`); cached. Empty unless the bytes are exactly that
        form of four valid identifiers and the tenant is not the control tenant."""
        match = _NAMES.fullmatch(names_raw)
        if match is None:
            return b""
        try:
            names = tuple(value.decode() for value in match.groups())
        except UnicodeDecodeError:
            return b""
        if names[0] == CONTROL_TENANT or not all(is_identifier(value) for value in names):
            return b""
        ident, in_line = identifier_bytes(*names)
        if in_line != names_raw:
            return b""
        if len(self.idents) >= _IDENTIFIER_CACHE_MAX:
            self.idents.clear()
        self.idents[names_raw] = ident
        return ident

    def _accept(self, seq: int, ts: int, digest: bytes, h: str) -> None:
        result = self.result
        last_ts = self.last_ts
        if last_ts is None:
            result.first_ts = ts
        elif ts < last_ts:
            self._ts_decrease(seq, last_ts, ts)
        self.last_ts = ts
        self.leaves.append(digest)
        if len(self.leaves) == self.chunk:
            self._flush_leaves()
        result.records += 1
        if result.records in self.queries:
            result.local_roots[result.records] = self._local_root()
        self.expected_prev = h
        self.prev_bytes = digest
        if result.records == self.size:
            self.sealed = True

    def _flush_leaves(self) -> None:
        self.range.append_subtree(self.chunk, _perfect_subtree_root(self.leaves))
        self.leaves.clear()

    def _local_root(self) -> bytes:
        """Merkle root of the segment's records so far."""
        if not self.leaves:
            return self.range.root()
        tree = self.range.copy()
        for leaf in self.leaves:
            tree.append(leaf)
        return tree.root()

    def _ts_decrease(self, seq: int, previous: int, ts: int) -> None:
        result = self.result
        if len(result.ts_decreases) < _KEEP_TS_DECREASES:
            result.ts_decreases.append(TsDecrease(seq, previous, ts))
        else:
            result.ts_decreases_dropped += 1

    # -- control records (docs/format.md section 5)

    def _check_control(self, line_no: int, seq: int, type_: str, payload: object) -> None:
        if type(payload) is not dict:
            raise LineError(
                f"{type_}.payload", f"the payload of a {type_} record must be an object"
            )
        result = self.result
        if type_ == SEGMENT_OPEN:
            if self.number == 0:
                warning = control.check_log_header(payload, self.plan)
                if warning is not None:
                    result.warnings.append(warning)
            else:
                result.prev_segment_root, result.open_checkpoint_root = control.check_segment_open(
                    payload, self.plan, self.number, seq, self.vkey
                )
        elif type_ == SEGMENT_SEAL:
            result.seal_root = control.check_segment_seal(payload, self.number, self.base, seq)
        elif type_ == LOG_RESUME:
            result.restarts.append(control.check_log_resume(payload, seq))
        elif type_ == REDACTION:
            result.redactions.append((seq, line_no, control.check_redaction(payload, seq)))


def _perfect_subtree_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 root of a power-of-two number of leaves, one level at a time.

    The same value as appending them to a CompactRange, at a third of the cost: one list
    comprehension per level instead of a method call per leaf.
    """
    level = leaves
    while len(level) > 1:
        pairs = zip(level[0::2], level[1::2], strict=True)
        level = [_sha256(b"\x01" + left + right).digest() for left, right in pairs]
    return level[0]
