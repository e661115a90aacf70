"""Offline verification of a log directory (log-format.md section 10).

The verifier reads files only: it never takes `LOCK` and never writes. It streams every segment
line by line, so its memory does not grow with the log: it keeps a Merkle compact range, a few
facts per segment boundary, and one entry per redaction, removed payload, restart and `ts`
decrease.

Shape:
- `_SegmentWalk` checks one segment file on its own: every line's bytes, keys, hashes, chain
  and control rules. What it cannot know alone (the previous segment's last `h`, the Merkle
  roots of the records before it) it returns as claims.
- `_Stitcher` takes those results in segment order and checks the claims: chain links across
  files, seal roots, `prev_segment_root`, embedded checkpoints, the `checkpoint` file and pins.
- Redactions are checked last, with a second, targeted read for targets whose payload is still
  present.

With `jobs > 1` the segment walks run in worker processes and the stitcher stays in this one.
Both paths run the same two pieces of code, so they give the same report.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import multiprocessing
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from . import jcs
from .checkpoint import CheckpointError, VerifierKey, parse_checkpoint
from .errors import BadKey, InvalidInput, InvalidPayload
from .identifiers import CONTROL_TENANT, is_identifier
from .layout import CHECKPOINT, segment_name, segment_number
from .merkle import CompactRange
from .record import (
    FORMAT_NAME,
    MAX_LINE_BYTES,
    PAY_TAG,
    REC_TAG,
    encode_line,
    genesis,
    leaf_hash,
    preimage,
)

FAIL = "FAIL"
VALID_EXTERNAL = "VALID-EXTERNAL"
VALID_LOCAL = "VALID-LOCAL"
INTACT_UNANCHORED = "INTACT-UNANCHORED"

CONTROL = CONTROL_TENANT
OPEN, SEAL, RESUME, CLOSE, REDACTION = (
    "segment.open",
    "segment.seal",
    "log.resume",
    "log.close",
    "redaction",
)
CONTROL_TYPES = frozenset((OPEN, SEAL, RESUME, CLOSE, REDACTION))

_REQUIRED = frozenset(("v", "seq", "ts", "tenant", "session", "section", "type", "prev", "h", "pd"))
_KNOWN = _REQUIRED | {"salt", "payload", "redacted"}
_WITH_PAYLOAD = _REQUIRED | {"salt", "payload"}
_LIMIT_53 = 2**53
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
# orjson and JCS write the same bytes for a payload except for floats in exponent form or with an
# integral value (orjson writes `1e+16`, `1.0`, `-0.0`) and for key order when an object key lies
# outside the BMP. A float with a fraction in plain notation is the same in both (shortest
# round-trip digits). These scans look for those forms anywhere in orjson's output; a false hit
# inside a string only costs a call to real JCS.
_INTEGRAL = re.compile(rb"\.0(?![0-9])")
_EXPONENT = re.compile(rb"[0-9]e[-+][0-9]")  # orjson always signs an exponent
# Deleting every other byte leaves the signs and the UTF-8 lead bytes of U+10000 and above.
_ALL_BUT_RARE = bytes(b for b in range(256) if not (0xF0 <= b <= 0xF4 or b in b"+-"))
_CHECKPOINT_MAX_BYTES = 1 << 20
_IDENTIFIER_CACHE_MAX = 4096
_CHUNK_LEAVES = 256  # leaves hashed level by level before they enter the compact range
_KEEP_TS_DECREASES = 10_000

_loads = orjson.loads
_dumps = orjson.dumps
_SORTED_STRICT = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_sha256 = hashlib.sha256
_u64_i64 = struct.Struct(">Qq").pack
_u16 = struct.Struct(">H").pack
_LEAF_REC = b"\x00" + REC_TAG  # RFC 6962 leaf prefix, then the record preimage
_ABSENT = object()
# What the hot path's parse and rebuild may raise: each sends the line the full way.
_NOT_FAST = (
    orjson.JSONDecodeError,
    orjson.JSONEncodeError,
    KeyError,
    TypeError,
    ValueError,
    RecursionError,
)


class VerifyInputError(InvalidInput):
    """Bad verifier input (no such directory, bad vkey, a pin not signed by the log key): exit 2."""


# ---------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True)
class VerifyError:
    """The place a FAIL names: `file` is a segment file name, `checkpoint` or `pin`."""

    file: str
    line: int | None
    seq: int | None
    check: str
    message: str


@dataclass(frozen=True)
class Anchor:
    source: str  # "pin", "checkpoint" (the file) or "segment.open" (embedded)
    size: int
    path: str | None = None  # the pin's file, when source is "pin"


@dataclass(frozen=True)
class Restart:
    seq: int
    clean: bool
    torn_bytes: int
    fragment_sha256: str | None
    checkpoint_size: int


@dataclass(frozen=True)
class RedactionFact:
    seq: int
    targets: list[int]
    payload_removed: list[int]
    pending: list[int]  # targets whose payload is still present
    covered: bool  # a held checkpoint covers the redaction record


@dataclass(frozen=True)
class TsDecrease:
    seq: int
    previous_ts: int
    ts: int


@dataclass
class Report:
    verdict: str
    error: VerifyError | None
    origin: str | None
    vkey_source: str  # "auditor" or "segment 0 header"
    records: int = 0
    segments: int = 0
    anchor: Anchor | None = None
    unanchored_records: int = 0
    unanchored_by_any_checkpoint: int = 0
    newest_checkpoint: int | None = None
    torn_bytes: int = 0
    restarts: list[Restart] = field(default_factory=list)
    redactions: list[RedactionFact] = field(default_factory=list)
    ts_decreases: list[TsDecrease] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == FAIL else 0

    def to_json(self) -> dict:
        """The report of log-format.md section 10, as JSON-ready values."""
        anchor = None
        if self.anchor is not None:
            anchor = {"source": self.anchor.source, "size": self.anchor.size}
            if self.anchor.path is not None:
                anchor["path"] = self.anchor.path
        return {
            "verdict": self.verdict,
            "error": None if self.error is None else vars(self.error).copy(),
            "origin": self.origin,
            "vkey_source": self.vkey_source,
            "records": self.records,
            "segments": self.segments,
            "anchor": anchor,
            "unanchored_records": self.unanchored_records,
            "unanchored_by_any_checkpoint": self.unanchored_by_any_checkpoint,
            "newest_checkpoint": self.newest_checkpoint,
            "torn_bytes": self.torn_bytes,
            "restarts": [vars(r).copy() for r in self.restarts],
            "redactions": [vars(r).copy() for r in self.redactions],
            "ts_decreases": [vars(d).copy() for d in self.ts_decreases],
            "warnings": list(self.warnings),
        }

    def render_text(self) -> str:
        """For people: the verdict first, then the anchor, the warnings and the first error."""
        out = [f"{self.verdict}  {self.origin or '(origin unknown)'}"]
        if self.error is not None:
            e = self.error
            where = e.file
            if e.line is not None:
                where += f" line {e.line}"
            if e.seq is not None:
                where += f" (seq {e.seq})"
            out.append(f"  first error: {where}: [{e.check}] {e.message}")
        out.append(f"  records: {self.records} in {self.segments} segment file(s)")
        if self.verdict != FAIL:
            if self.anchor is None:
                out.append("  anchor: none")
            else:
                source = self.anchor.source
                if self.anchor.path is not None:
                    source += f" {self.anchor.path}"
                out.append(f"  anchor: {source}, size {self.anchor.size}")
            out.append(
                f"  records beyond the anchor: {self.unanchored_records}; "
                f"beyond the newest checkpoint of any kind: {self.unanchored_by_any_checkpoint}"
            )
        out.append(f"  key: {self.vkey_source}")
        for w in self.warnings:
            out.append(f"  warning: {w}")
        if self.torn_bytes:
            out.append(f"  torn tail: {self.torn_bytes} bytes (crash leftover, not a failure)")
        for r in self.restarts:
            state = "clean" if r.clean else f"unclean, {r.torn_bytes} torn bytes"
            out.append(f"  restart at seq {r.seq}: {state}")
        for red in self.redactions:
            text = f"  redaction at seq {red.seq}: targets {red.targets}"
            if red.payload_removed:
                text += f", payload removed {red.payload_removed}"
            if red.pending:
                text += f", pending (payload still present) {red.pending}"
            if not red.covered:
                text += ", not yet covered by a checkpoint"
            out.append(text)
        for d in self.ts_decreases:
            out.append(f"  ts decreases at seq {d.seq}: {d.previous_ts} -> {d.ts}")
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Entry point


def verify_log(
    log_dir: str | os.PathLike[str],
    vkey: VerifierKey | str | None = None,
    origin: str | None = None,
    pins: Iterable[str | os.PathLike[str]] = (),
    strict: bool = True,
    jobs: int = 1,
) -> Report:
    """Verify a log directory offline. Raises VerifyInputError for bad input, else reports.

    Without `vkey`, the key named in segment 0's header is used and the verdict is at most
    INTACT-UNANCHORED: a key read from the files proves nothing against whoever wrote them.
    """
    log_dir = Path(log_dir)
    pins = [Path(p) for p in pins]
    if not log_dir.is_dir():
        raise VerifyInputError(
            f"log directory {str(log_dir)!r} does not exist or is not a directory"
        )
    if jobs < 1:
        raise VerifyInputError(f"jobs must be 1 or more, not {jobs}")
    auditor_key = _parse_vkey(vkey) if vkey is not None else None
    if auditor_key is not None and origin is not None and origin != auditor_key.origin:
        raise VerifyInputError(
            f"origin {origin!r} does not match the vkey's origin {auditor_key.origin!r}: "
            "pass the vkey of this log"
        )
    scan = _scan_directory(log_dir)
    if not scan.numbers:
        raise VerifyInputError(f"{log_dir} holds no segment files (seg-<12 digits>.jsonl)")
    header = _read_header(log_dir)
    key = auditor_key or header.vkey
    if auditor_key is None and key is not None and origin is not None and key.origin != origin:
        raise VerifyInputError(
            f"segment 0's header names a vkey for origin {key.origin!r}, not {origin!r}: "
            "check LOGDIR, or pass the log's vkey"
        )
    report = Report(
        verdict=FAIL,
        error=None,
        origin=key.origin if key else (origin or header.origin),
        vkey_source="auditor" if auditor_key else "segment 0 header",
        segments=len(scan.numbers),
        warnings=scan.warnings,
    )
    if key is None:
        if pins:
            raise VerifyInputError(
                "cannot check the pins: no --vkey, and segment 0's header has none"
            )
        report.error = header.error or VerifyError(
            segment_name(0), 1, 0, "segment.open.vkey",
            "segment 0's header names no verifier key, and no --vkey was given",
        )  # fmt: skip
        return report
    pinned = [_read_pin(p, key) for p in pins]  # bad pins are input errors, before any verdict
    if header.error is not None or header.seg_bits is None:
        report.error = header.error
        return report
    if auditor_key is None:
        scan.warnings.append(
            "no vkey given: checked with the key named in segment 0's header, which proves "
            "nothing against someone who could rewrite the files; pass --vkey for a VALID verdict"
        )
    held_file = _read_checkpoint_file(log_dir, key)
    plan = _Plan(
        log_dir=log_dir,
        seg_bits=header.seg_bits,
        origin=key.origin,
        vkey=str(key),
        auditor_vkey=str(auditor_key) if auditor_key else None,
        strict=strict,
        last=max(scan.numbers),
        queries=sorted({p.size for p in pinned} | ({held_file.size} if held_file.ok else set())),
        covered=max([p.size for p in pinned] + [held_file.size if held_file.ok else 0]),
    )
    _Stitcher(plan, held_file, pinned, report, scan).run(jobs, scan.numbers)
    return report


def _parse_vkey(vkey: VerifierKey | str) -> VerifierKey:
    if isinstance(vkey, VerifierKey):
        return vkey
    try:
        return VerifierKey.parse(vkey)
    except BadKey as exc:
        raise VerifyInputError(f"{exc}: pass the line `ledgermem vkey` prints") from None


# ---------------------------------------------------------------------------------------------
# Inputs read before the walk: the directory listing, segment 0's header, checkpoints


@dataclass
class _Scan:
    numbers: list[int]
    warnings: list[str]


def _scan_directory(log_dir: Path) -> _Scan:
    numbers: list[int] = []
    warnings: list[str] = []
    for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
        name = entry.name
        if name.endswith(".tmp"):
            warnings.append(
                f"ignored temporary file {name}: left by an interrupted checkpoint refresh or "
                "redaction rewrite; the writer removes it when it opens the log"
            )
            continue
        number = segment_number(name)
        if number is not None and entry.is_file():
            numbers.append(number)
        elif name.startswith("seg-"):
            warnings.append(
                f"ignored {name}: not a segment file name (seg-<12 digits>.jsonl, a regular file)"
            )
    numbers.sort()
    return _Scan(numbers, warnings)


@dataclass
class _Header:
    origin: str | None = None
    seg_bits: int | None = None
    vkey: VerifierKey | None = None
    error: VerifyError | None = None


def _read_header(log_dir: Path) -> _Header:
    """seg_bits, origin and vkey from segment 0's first line; the walk re-checks that line."""
    name = segment_name(0)
    try:
        with open(log_dir / name, "rb") as f:
            raw = f.readline(MAX_LINE_BYTES + 1)
    except FileNotFoundError:
        return _Header(error=VerifyError(name, None, 0, "segment.missing", f"{name} is missing"))
    except OSError as exc:
        raise VerifyInputError(f"cannot read {log_dir / name}: {exc}") from None
    fail = VerifyError(
        name, 1, 0, "segment.open", "line 1 of segment 0 is not a segment.open header"
    )
    try:
        obj = jcs.loads_strict(raw.rstrip(b"\n"))
    except InvalidPayload:
        return _Header(error=fail)
    payload = obj.get("payload") if type(obj) is dict else None
    if type(payload) is not dict or obj.get("type") != OPEN:
        return _Header(error=fail)
    header = _Header()
    if type(payload.get("origin")) is str:
        header.origin = payload["origin"]
    bits = payload.get("seg_bits")
    if type(bits) is int and 2 <= bits <= 40:
        header.seg_bits = bits
    else:
        header.error = VerifyError(
            name, 1, 0, "segment.open.seg_bits", f"seg_bits {bits!r} is not an integer 2..40"
        )
    if type(payload.get("vkey")) is str:
        with contextlib.suppress(BadKey):  # the walk reports a bad header vkey
            header.vkey = VerifierKey.parse(payload["vkey"])
    return header


@dataclass
class _HeldCheckpoint:
    """The `checkpoint` file or a pin: its size and root once parsed, or why it failed."""

    source: str
    size: int = 0
    root: bytes = b""
    ok: bool = False
    present: bool = True
    check: str = ""
    message: str = ""
    path: str | None = None


def _read_checkpoint_file(log_dir: Path, key: VerifierKey) -> _HeldCheckpoint:
    held = _HeldCheckpoint("checkpoint")
    try:
        with open(log_dir / CHECKPOINT, "rb") as f:
            data = f.read(_CHECKPOINT_MAX_BYTES + 1)
    except FileNotFoundError:
        held.present = False
        return held
    except OSError as exc:
        raise VerifyInputError(f"cannot read {log_dir / CHECKPOINT}: {exc}") from None
    if len(data) > _CHECKPOINT_MAX_BYTES:
        held.check, held.message = "checkpoint.format", "the checkpoint file is larger than 1 MiB"
        return held
    try:
        cp = parse_checkpoint(data.decode("utf-8"), key)
    except UnicodeDecodeError:
        held.check, held.message = "checkpoint.format", "the checkpoint file is not UTF-8"
        return held
    except CheckpointError as exc:
        held.check, held.message = exc.check, f"checkpoint file: {exc}"
        return held
    held.size, held.root, held.ok = cp.size, cp.root, True
    return held


def _read_pin(path: Path, key: VerifierKey) -> _HeldCheckpoint:
    try:
        text = path.read_bytes().decode("utf-8")
        cp = parse_checkpoint(text, key)
    except (OSError, UnicodeDecodeError) as exc:
        raise VerifyInputError(f"cannot read pin {path}: {exc}") from None
    except CheckpointError as exc:
        raise VerifyInputError(
            f"pin {path} is not a checkpoint signed by the log key for origin {key.origin!r}: {exc}"
        ) from None
    return _HeldCheckpoint("pin", cp.size, cp.root, ok=True, path=str(path))


# ---------------------------------------------------------------------------------------------
# One segment, checked on its own


@dataclass(frozen=True)
class _Plan:
    """Everything a segment walk needs, fixed before the walk (picklable for worker processes)."""

    log_dir: Path
    seg_bits: int
    origin: str
    vkey: str
    auditor_vkey: str | None
    strict: bool
    last: int  # number of the last segment file present
    queries: list[int]  # tree sizes whose roots the stitcher needs (checkpoint file, pins)
    covered: int  # records covered by the checkpoint file and pins: they rule out leftovers


class _LineFail(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


@dataclass
class _SegmentResult:
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


def _walk_segment(task: tuple[_Plan, int]) -> _SegmentResult:
    plan, number = task
    return _SegmentWalk(plan, number).run()


class _SegmentWalk:
    def __init__(self, plan: _Plan, number: int) -> None:
        self.plan = plan
        self.number = number
        self.size = 1 << plan.seg_bits
        self.base = number * self.size
        self.name = segment_name(number)
        self.is_last = number == plan.last
        self.vkey = VerifierKey.parse(plan.vkey)
        self.result = _SegmentResult(number)
        # The segment's tree: whole chunks of leaves go into the compact range as perfect
        # subtrees; the leaves of the chunk being filled wait in `leaves`.
        self.range = CompactRange()
        self.chunk = min(_CHUNK_LEAVES, self.size)
        self.leaves: list[bytes] = []
        self.idents: dict[tuple[str, str, str, str], bytes] = {}  # valid event identifiers
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

    def run(self) -> _SegmentResult:
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

    def _walk(self, f, file_size: int) -> None:
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
        loads, dumps, sha256, pack = _loads, _dumps, _sha256, _u64_i64
        sorted_strict, leaf_rec = _SORTED_STRICT, _LEAF_REC
        expected_prev, prev_bytes, last_ts = self.expected_prev, self.prev_bytes, self.last_ts
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
                try:
                    obj = loads(body)
                    seq, ts, prev, h, pd = obj["seq"], obj["ts"], obj["prev"], obj["h"], obj["pd"]
                    names = (obj["tenant"], obj["session"], obj["section"], obj["type"])
                    salt, payload = obj["salt"], obj["payload"]
                    ident = idents.get(names) or self._event_identifiers(names)
                    salt_bytes = bytes.fromhex(salt)
                    pb = dumps(payload, option=sorted_strict)  # refuses ints beyond ±(2**53-1)
                    fast = (
                        ident is not None
                        and len(obj) == 12
                        and type(seq) is int
                        and seq == base + line_no - 1
                        and prev == expected_prev
                        and type(ts) is int
                        and -_LIMIT_53 < ts < _LIMIT_53
                        and encode_line(seq, ts, *names, prev, h, pd, salt, pb) == body
                        and salt_bytes.hex() == salt
                        and len(salt_bytes) == 16
                        and not _needs_jcs(pb, payload)
                    )
                except _NOT_FAST:
                    fast = False
                if fast:
                    pd_bytes = sha256(PAY_TAG + salt_bytes + pb).digest()
                    # leaf_hash(preimage(...)), with the identifiers' bytes cached.
                    digest = sha256(
                        leaf_rec + prev_bytes + pack(seq, ts) + ident + pd_bytes
                    ).digest()
                    fast = pd_bytes.hex() == pd and digest.hex() == h
                if fast:
                    if ts < last_ts:  # type: ignore[operator]  # line 1 came before: not None
                        self._ts_decrease(seq, last_ts, ts)  # type: ignore[arg-type]
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

    def _state(self) -> tuple[str | None, bytes | None, int | None]:
        return self.expected_prev, self.prev_bytes, self.last_ts

    def _unusual_line(
        self, f, raw: bytes, line_no: int, offset: int, pending: tuple[int, int] | None
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
            if _is_json_text(raw):
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
        try:
            parsed = _parse(body)
            if parsed is None:
                if self.is_last:
                    return None
                raise _LineFail("record.not_json", "not a JSON text")
            self._check_record(line_no, *parsed)
        except _LineFail as exc:
            self._fail(line_no, exc.check, exc.message)
            return False
        except RecursionError:
            self._fail(
                line_no,
                "record.depth",
                "nested too deeply for this verifier to check",
            )
            return False
        return True

    @staticmethod
    def _newline_follows(f) -> bool:
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

    # -- one record

    def _check_record(self, line_no: int, obj: dict, pjcs: bytes | None, canonical: bool) -> None:
        result = self.result
        if len(obj) != 12 or obj.keys() != _WITH_PAYLOAD:
            self._check_key_set(line_no, obj)
        v = obj["v"]
        if type(v) is not int or v != 1:
            raise _LineFail("record.v", f"v is {v!r}, not 1")
        seq = obj["seq"]
        expected = self.base + line_no - 1
        if type(seq) is not int or seq != expected:
            raise _LineFail(
                "record.seq", f"line {line_no} holds seq {seq!r} where {expected} is expected"
            )
        ts = obj["ts"]
        if type(ts) is not int or not -_LIMIT_53 < ts < _LIMIT_53:
            raise _LineFail("record.ts", f"ts {ts!r} is not an integer with |ts| < 2**53")
        tenant, session, section, type_ = obj["tenant"], obj["session"], obj["section"], obj["type"]
        for name, value in (
            ("tenant", tenant),
            ("session", session),
            ("section", section),
            ("type", type_),
        ):
            if not is_identifier(value):
                raise _LineFail("record.identifier", f"{name} {value!r} is not an identifier")
        prev = obj["prev"]
        if self.expected_prev is not None:
            if prev != self.expected_prev:
                raise _LineFail(
                    "record.prev", f"prev does not chain: it is not the h of seq {seq - 1}"
                    if seq else "prev of seq 0 is not the genesis value of this origin",
                )  # fmt: skip
        elif type(prev) is not str or _HEX64.fullmatch(prev) is None:
            raise _LineFail("record.prev", "prev is not 64 lowercase hex digits")
        pd = obj["pd"]
        salt = obj.get("salt", _ABSENT)
        if (salt is _ABSENT) != (pjcs is None):
            raise _LineFail(
                "record.payload_salt", "payload and salt must be both present or both absent"
            )
        if pjcs is not None:
            if type(salt) is not str or _HEX32.fullmatch(salt) is None:
                raise _LineFail("record.salt", "salt is not 32 lowercase hex digits")
            pd_bytes = _sha256(PAY_TAG + bytes.fromhex(salt) + pjcs).digest()
            if pd_bytes.hex() != pd:
                raise _LineFail("record.pd", "pd does not match the payload and salt")
            if "redacted" in obj:
                result.redacted_on_payload += 1
        else:
            if type(pd) is not str or _HEX64.fullmatch(pd) is None:
                raise _LineFail("record.pd", "pd is not 64 lowercase hex digits")
            if tenant == CONTROL:
                raise _LineFail(
                    "control.payload_removed", "a control record's payload is never removed"
                )
            redacted = obj.get("redacted")
            if redacted is not None and type(redacted) is not int:
                raise _LineFail("record.redacted", f"redacted {redacted!r} is not an integer")
            pd_bytes = bytes.fromhex(pd)
        h = obj["h"]
        digest = leaf_hash(
            preimage(bytes.fromhex(prev), seq, ts, tenant, session, section, type_, pd_bytes)
        )
        if digest.hex() != h:
            raise _LineFail("record.h", "h does not match the record's fields")
        self._check_position(line_no, tenant, session, section, type_)
        if tenant == CONTROL:
            self._check_control(line_no, seq, type_, obj["payload"])
        if not canonical:
            result.noncanonical += 1
            if result.noncanonical == 1:
                result.noncanonical_first = line_no
        if pjcs is None:
            result.removals.append((seq, line_no, pd, obj.get("redacted")))
        if seq == self.base:
            result.first_prev = prev
        self._accept(seq, ts, digest, h)

    def _event_identifiers(self, names: tuple[str, str, str, str]) -> bytes | None:
        """The preimage bytes of four valid event identifiers, cached; None if not all valid."""
        parts = []
        for value in names:
            if not is_identifier(value):
                return None
            raw = value.encode()
            parts.append(_u16(len(raw)) + raw)
        if names[0] == CONTROL:
            return None
        if len(self.idents) >= _IDENTIFIER_CACHE_MAX:
            self.idents.clear()
        ident = self.idents[names] = b"".join(parts)
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

    def _check_key_set(self, line_no: int, obj: dict) -> None:
        keys = obj.keys()
        missing = _REQUIRED - keys
        if missing:
            raise _LineFail("record.missing_key", f"missing key(s) {sorted(missing)}")
        unknown = keys - _KNOWN
        if unknown:
            if self.plan.strict:
                raise _LineFail("record.unknown_key", f"unknown top-level key(s) {sorted(unknown)}")
            result = self.result
            result.unknown_keys += 1
            if result.unknown_keys == 1:
                result.unknown_keys_first = line_no
            if len(result.unknown_key_names) < 20:
                result.unknown_key_names.update(sorted(unknown)[:20])

    def _check_position(
        self, line_no: int, tenant: str, session: str, section: str, type_: str
    ) -> None:
        control = tenant == CONTROL
        if control and (session != CONTROL or section != CONTROL or type_ not in CONTROL_TYPES):
            raise _LineFail(
                "control.kind",
                f"tenant _log needs session and section _log and a control type, not "
                f"{session!r}/{section!r}/{type_!r}",
            )
        if line_no == 1:
            if not (control and type_ == OPEN):
                raise _LineFail("control.position", "line 1 of a segment must be its segment.open")
        elif line_no == self.size:
            if not (control and type_ == SEAL):
                raise _LineFail(
                    "control.position", "the last line of a full segment must be its segment.seal"
                )
        elif control and type_ in (OPEN, SEAL):
            raise _LineFail("control.position", f"{type_} away from its place in the segment")

    # -- control records (log-format.md section 5)

    def _check_control(self, line_no: int, seq: int, type_: str, payload: object) -> None:
        if type(payload) is not dict:
            raise _LineFail(
                f"{type_}.payload", f"the payload of a {type_} record must be an object"
            )
        if type_ == OPEN:
            self._check_open(seq, payload)
        elif type_ == SEAL:
            _expect(payload, SEAL, "segment", self.number)
            _expect(payload, SEAL, "first_seq", self.base)
            _expect(payload, SEAL, "last_seq", seq)
            self.result.seal_root = _root_field(payload, SEAL, "root")
        elif type_ == RESUME:
            self._check_resume(seq, payload)
        elif type_ == REDACTION:
            self._check_redaction(line_no, seq, payload)

    def _check_open(self, seq: int, payload: dict) -> None:
        result = self.result
        if payload.get("format") != FORMAT_NAME:
            raise _LineFail(
                "segment.open.format", f"format is {payload.get('format')!r}, not {FORMAT_NAME!r}"
            )
        if payload.get("origin") != self.plan.origin:
            raise _LineFail(
                "segment.open.origin",
                f"origin {payload.get('origin')!r} is not this log's origin {self.plan.origin!r}",
            )
        _expect(payload, OPEN, "segment", self.number)
        _expect(payload, OPEN, "first_seq", seq)
        if self.number == 0:
            _expect(payload, OPEN, "seg_bits", self.plan.seg_bits)
            text = payload.get("vkey")
            try:
                header_key = VerifierKey.parse(text) if type(text) is str else None
            except BadKey:
                header_key = None
            if header_key is None:
                raise _LineFail("segment.open.vkey", f"vkey {text!r} is not a verifier key")
            if self.plan.auditor_vkey is not None and str(header_key) != self.plan.auditor_vkey:
                result.warnings.append(
                    f"segment 0's header names vkey {text!r}, not the vkey given; "
                    "the given key is the one trusted"
                )
            return
        result.prev_segment_root = _root_field(payload, OPEN, "prev_segment_root")
        text = payload.get("checkpoint")
        if type(text) is not str:
            raise _LineFail("segment.open.checkpoint", "segment.open holds no checkpoint")
        try:
            cp = parse_checkpoint(text, self.vkey)
        except CheckpointError as exc:
            raise _LineFail("segment.open.checkpoint", f"embedded checkpoint: {exc}") from None
        if cp.size != seq:
            raise _LineFail(
                "segment.open.checkpoint", f"embedded checkpoint has size {cp.size}, not {seq}"
            )
        result.open_checkpoint_root = cp.root

    def _check_resume(self, seq: int, payload: dict) -> None:
        clean, torn = payload.get("clean"), payload.get("torn_bytes")
        fragment, size = payload.get("fragment_sha256"), payload.get("checkpoint_size")
        if type(clean) is not bool:
            raise _LineFail("log.resume.payload", "clean is not true or false")
        if type(torn) is not int or torn < 0:
            raise _LineFail("log.resume.payload", "torn_bytes is not a non-negative integer")
        if fragment is None:
            if torn:
                raise _LineFail("log.resume.payload", "fragment_sha256 is null but bytes were torn")
        elif torn == 0 or type(fragment) is not str or _HEX64.fullmatch(fragment) is None:
            raise _LineFail(
                "log.resume.payload",
                "fragment_sha256 must be 64 hex digits when bytes were torn, else null",
            )
        if type(size) is not int or size < 0:
            raise _LineFail("log.resume.payload", "checkpoint_size is not a non-negative integer")
        self.result.restarts.append(Restart(seq, clean, torn, fragment, size))

    def _check_redaction(self, line_no: int, seq: int, payload: dict) -> None:
        targets = payload.get("targets")
        if type(targets) is not list or not targets:
            raise _LineFail("redaction.payload", "targets is not a non-empty list")
        if type(payload.get("reason")) is not str:
            raise _LineFail("redaction.payload", "reason is not a string")
        if "request" in payload and type(payload["request"]) is not str:
            raise _LineFail("redaction.payload", "request is not a string")
        found = []
        for target in targets:
            t_seq = target.get("seq") if type(target) is dict else None
            t_pd = target.get("pd") if type(target) is dict else None
            if type(t_seq) is not int or type(t_pd) is not str or _HEX64.fullmatch(t_pd) is None:
                raise _LineFail("redaction.payload", f"target {target!r} is not {{seq, pd}}")
            if not 0 <= t_seq < seq:
                raise _LineFail("redaction.target", f"target seq {t_seq} is not an earlier record")
            found.append((t_seq, t_pd))
        self.result.redactions.append((seq, line_no, found))


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


def _expect(payload: dict, type_: str, key: str, value: int) -> None:
    got = payload.get(key)
    if type(got) is not int or got != value:
        raise _LineFail(f"{type_}.{key}", f"{type_} has {key} {got!r}, not {value}")


def _root_field(payload: dict, type_: str, key: str) -> bytes:
    text = payload.get(key)
    root = _b64_32(text)
    if root is None:
        raise _LineFail(f"{type_}.{key}", f"{key} {text!r} is not base64 of 32 bytes")
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


# ---------------------------------------------------------------------------------------------
# Parsing one line


def _parse(body: bytes) -> tuple[dict, bytes | None, bool] | None:
    """(record, payload JCS bytes or None, canonical) for a line; None if it is not JSON text.

    Raises _LineFail for JSON text that fails the rules of sections 2 and 4. The fast path
    parses with orjson and rebuilds the canonical line: if the rebuild is byte-identical, the
    line has no duplicate key (a rebuild from a dict cannot have one), no whitespace, canonical
    escapes and key order. Everything else takes the strict path.
    """
    try:
        obj = _loads(body)
    except orjson.JSONDecodeError:
        return _parse_strict(body)
    if type(obj) is not dict:
        return _parse_strict(body)
    payload = obj.get("payload", _ABSENT)
    try:
        if payload is _ABSENT:
            pb = None
            rebuilt = encode_line(
                obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"],
                obj["type"], obj["prev"], obj["h"], obj["pd"], None, None, obj.get("redacted"),
            )  # fmt: skip
        else:
            pb = _dumps(payload, option=_SORTED_STRICT)  # refuses integers beyond ±(2**53-1)
            rebuilt = encode_line(
                obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"],
                obj["type"], obj["prev"], obj["h"], obj["pd"], obj["salt"], pb,
            )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError, orjson.JSONEncodeError):
        return _parse_strict(body)
    if rebuilt != body:
        return _parse_strict(body)
    if pb is None or not _needs_jcs(pb, payload):
        return obj, pb, True
    try:
        jcs.check_value(payload)
        pjcs = jcs.jcs_reference(payload)
    except InvalidPayload as exc:
        raise _LineFail("payload.ijson", str(exc)) from None
    return obj, pjcs, pjcs == pb


def _needs_jcs(pb: bytes, payload: object) -> bool:
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


def _parse_strict(body: bytes) -> tuple[dict, bytes | None, bool] | None:
    if not _is_json_text(body):
        return None
    try:
        obj = jcs.loads_strict(body.decode("utf-8"))
    except InvalidPayload as exc:
        raise _LineFail("record.json", str(exc).removeprefix("payload.")) from None
    if type(obj) is not dict:
        raise _LineFail("record.not_object", "a record is a JSON object")
    payload = obj.get("payload", _ABSENT)
    pjcs = None
    if payload is not _ABSENT:
        try:
            pjcs = jcs.jcs_reference(payload)
        except InvalidPayload as exc:
            raise _LineFail("payload.ijson", str(exc)) from None
    try:
        rebuilt = encode_line(
            obj["seq"], obj["ts"], obj["tenant"], obj["session"], obj["section"], obj["type"],
            obj["prev"], obj["h"], obj["pd"], obj.get("salt"), pjcs, obj.get("redacted"),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError):
        rebuilt = None
    return obj, pjcs, rebuilt == body


def _is_json_text(data: bytes) -> bool:
    """Whether bytes parse as JSON at all (NaN and 1e400 included: those are JSON that fails)."""
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


# ---------------------------------------------------------------------------------------------
# Stitching segment results together, in order


class _Stitcher:
    def __init__(
        self,
        plan: _Plan,
        held_file: _HeldCheckpoint,
        pins: list[_HeldCheckpoint],
        report: Report,
        scan: _Scan,
    ) -> None:
        self.plan = plan
        self.size = 1 << plan.seg_bits
        self.held_file = held_file
        self.pins = pins
        self.report = report
        self.scan = scan
        self.segment_roots = CompactRange()  # one leaf per full segment: see _root_at
        self.prev_h: str | None = None
        self.prev_ts: int | None = None
        self.prev_segment_root: bytes | None = None
        self.records = 0
        self.roots: dict[int, bytes] = {}  # answers to plan.queries
        self.embedded_newest: int | None = None
        self.failure: tuple[tuple, VerifyError] | None = None
        self.redactions: list[tuple[int, str, int, list[tuple[int, str]]]] = []
        self.removals: list[tuple[int, str, int, str, object]] = []
        self.restarts: list[Restart] = []
        self.ts_decreases: list[TsDecrease] = []
        self.ts_dropped = 0
        self.noncanonical = 0
        self.noncanonical_first: tuple[str, int] | None = None
        self.unknown = 0
        self.unknown_first: tuple[str, int] | None = None
        self.unknown_names: set[str] = set()
        self.redacted_on_payload = 0
        self.walk_warnings: list[str] = []
        self.torn_bytes = 0
        self.authorized: dict[int, list[int]] = {}  # removed seq -> redactions naming it rightly
        self.pending: dict[int, set[int]] = {}  # redaction seq -> targets still holding payload
        self.redacted_mismatched = 0

    def run(self, jobs: int, numbers: list[int]) -> None:
        expected = list(range(self.plan.last + 1))
        missing = sorted(set(expected) - set(numbers))
        stop = missing[0] if missing else self.plan.last + 1
        tasks = [(self.plan, n) for n in range(stop)]
        completed = True
        with contextlib.closing(_results(tasks, jobs)) as results:
            for result in results:
                if not self._take(result):
                    completed = False
                    break
        if completed and missing:
            n = missing[0]
            self._line_failure(
                n, None, n * self.size, "segment.missing", f"{segment_name(n)} is missing"
            )
        self._finish()

    # -- per segment

    def _take(self, r: _SegmentResult) -> bool:
        """Check one segment's claims against what came before. False once something failed."""
        n, size = r.number, self.size
        name = segment_name(n)
        base = n * size
        candidates: list[tuple[int, str, str]] = []
        if r.records >= 1 and n > 0:
            if r.first_prev != self.prev_h:
                candidates.append(
                    (1, "record.prev", f"prev does not chain: it is not the h of seq {base - 1}")
                )
            elif r.prev_segment_root != self.prev_segment_root:
                candidates.append(
                    (1, "segment.open.prev_segment_root",
                     f"prev_segment_root is not the Merkle root of segment {n - 1}")
                )  # fmt: skip
            elif r.open_checkpoint_root != self.segment_roots.root():
                candidates.append(
                    (1, "segment.open.checkpoint",
                     f"the embedded checkpoint's root is not the Merkle root of the first {base} records")
                )  # fmt: skip
        if r.records == size and r.seal_root != self._root_at(size - 1, r):
            candidates.append(
                (size, "segment.seal.root",
                 f"the seal's root is not the Merkle root of the first {base + size - 1} records")
            )  # fmt: skip
        if r.error is not None:
            line, seq, check, message = r.error
            candidates.append((line, check, message))
        if candidates:
            line, check, message = min(candidates, key=lambda c: c[0])
            self._line_failure(n, line or None, base + max(line, 1) - 1, check, message)
            self.records += max(line, 1) - 1
            self._gather(r, upto=base + max(line, 1) - 1)
            return False
        if self.prev_ts is not None and r.first_ts is not None and r.first_ts < self.prev_ts:
            self.ts_decreases.append(TsDecrease(base, self.prev_ts, r.first_ts))
        for k in self.plan.queries:
            if base <= k <= base + r.records and k < base + size:
                self.roots[k] = self._root_at(k - base, r)
        if n > 0 and r.records:
            self.embedded_newest = base
        if r.records == size:
            self.segment_roots.append(r.root)
            self.prev_segment_root = r.root
        self.records += r.records
        if r.records:
            self.prev_h, self.prev_ts = r.last_h, r.last_ts
        self.torn_bytes += r.torn_bytes
        if r.torn_bytes:
            self.walk_warnings.append(
                f"crash leftover: {r.torn_bytes} bytes at the end of {name} from offset "
                f"{r.torn_offset} (the writer moves them to quarantine/ when it opens the log)"
            )
        self._gather(r, upto=None)
        return True

    def _root_at(self, m: int, r: _SegmentResult) -> bytes:
        """Root of the first base+m records, given the roots of the full segments before.

        Segments are aligned subtrees of S leaves, and an RFC 6962 tree of n*S+m leaves
        (0 < m <= S) is the RFC 6962 tree over n+1 nodes: the n segment roots, then the root
        of the m records of the next segment. So a compact range over segment roots, plus one
        more node, gives every root the verifier needs.
        """
        if m == 0:
            return self.segment_roots.root()
        tree = self.segment_roots.copy()
        tree.append(r.local_roots.get(m, b""))
        return tree.root()

    def _gather(self, r: _SegmentResult, upto: int | None) -> None:
        def keep(seq: int) -> bool:
            return upto is None or seq < upto

        name = segment_name(r.number)
        self.restarts += [x for x in r.restarts if keep(x.seq)]
        self.redactions += [(s, name, line, t) for s, line, t in r.redactions if keep(s)]
        self.removals += [(s, name, line, pd, red) for s, line, pd, red in r.removals if keep(s)]
        self.ts_decreases += [d for d in r.ts_decreases if keep(d.seq)]
        self.ts_dropped += r.ts_decreases_dropped
        if r.noncanonical:
            self.noncanonical += r.noncanonical
            self.noncanonical_first = self.noncanonical_first or (name, r.noncanonical_first)
        if r.unknown_keys:
            self.unknown += r.unknown_keys
            self.unknown_first = self.unknown_first or (name, r.unknown_keys_first)
            self.unknown_names |= r.unknown_key_names
        self.redacted_on_payload += r.redacted_on_payload
        self.walk_warnings += r.warnings

    def _line_failure(
        self, n: int, line: int | None, seq: int | None, check: str, message: str
    ) -> None:
        self._candidate((0, n, line or 0), VerifyError(segment_name(n), line, seq, check, message))

    def _candidate(self, rank: tuple, error: VerifyError) -> None:
        if self.failure is None or rank < self.failure[0]:
            self.failure = (rank, error)

    # -- after the walk

    def _finish(self) -> None:
        records = self.records
        self._check_redactions()
        self._check_held(self.held_file, (2,), "checkpoint", records)
        for index, pin in enumerate(self.pins):
            self._check_held(pin, (4, index), "pin", records)
        self._report(records)

    def _check_held(self, held: _HeldCheckpoint, rank: tuple, file: str, records: int) -> None:
        if not held.present:
            return
        where = f"pin {held.path}" if held.path else "the checkpoint file"
        if not held.ok:
            self._candidate(rank, VerifyError(file, None, None, held.check, held.message))
        elif held.size > records:
            self._candidate(
                rank,
                VerifyError(
                    file, None, records, "checkpoint.size",
                    f"{where} covers {held.size} records, but only {records} are present: "
                    "records were removed behind a signed checkpoint",
                ),
            )  # fmt: skip
        elif self.roots.get(held.size, self._root_of_prefix(held.size)) != held.root:
            self._candidate(
                rank,
                VerifyError(
                    file, None, None, "checkpoint.root",
                    f"{where} signs a root for size {held.size} that is not the Merkle root "
                    "of the records present",
                ),
            )  # fmt: skip

    def _root_of_prefix(self, size: int) -> bytes:
        # Sizes that end on a segment boundary past the last walked segment (a full last segment).
        if size == self.segment_roots.size * self.size:
            return self.segment_roots.root()
        return b""

    def _check_redactions(self) -> None:
        """Section 9: every removed payload needs a later redaction naming its seq and pd."""
        removed = {seq: (name, line, pd, red) for seq, name, line, pd, red in self.removals}
        authorized: dict[int, list[int]] = {}
        lookups: dict[int, list[tuple[int, str, int, str]]] = {}
        for r_seq, name, line, targets in self.redactions:
            for t_seq, t_pd in targets:
                if t_seq in removed:
                    if removed[t_seq][2] != t_pd:
                        self._redaction_failure(
                            name, line, r_seq, t_seq, "names a pd that is not the target's"
                        )
                    else:
                        authorized.setdefault(t_seq, []).append(r_seq)
                else:
                    lookups.setdefault(t_seq, []).append((r_seq, name, line, t_pd))
        for t_seq, tenant, pd in _read_records(self.plan, sorted(lookups)):
            for r_seq, name, line, t_pd in lookups[t_seq]:
                if tenant == CONTROL:
                    self._redaction_failure(name, line, r_seq, t_seq, "names a control record")
                elif pd != t_pd:
                    self._redaction_failure(
                        name, line, r_seq, t_seq, "names a pd that is not the target's"
                    )
                else:
                    self.pending.setdefault(r_seq, set()).add(t_seq)
        mismatched = 0
        for seq, (name, line, _pd, red) in removed.items():
            if seq not in authorized:
                self._candidate(
                    (1, seq),
                    VerifyError(
                        name, line, seq, "redaction.unauthorized",
                        f"the payload of seq {seq} is removed, but no later redaction record "
                        "names its seq and pd",
                    ),
                )  # fmt: skip
            elif red not in authorized[seq]:
                mismatched += 1
        self.redacted_mismatched = mismatched
        self.authorized = authorized

    def _redaction_failure(self, name: str, line: int, r_seq: int, t_seq: int, why: str) -> None:
        n = segment_number(name) or 0
        self._candidate(
            (0, n, line),
            VerifyError(
                name, line, r_seq, "redaction.target", f"the redaction's target seq {t_seq} {why}"
            ),
        )

    # -- the report

    def _report(self, records: int) -> None:
        report = self.report
        sizes = [p.size for p in self.pins]
        if self.held_file.ok:
            sizes.append(self.held_file.size)
        if self.embedded_newest is not None:
            sizes.append(self.embedded_newest)
        newest = max(sizes) if sizes else None
        report.records = records
        report.newest_checkpoint = newest
        report.torn_bytes = self.torn_bytes
        report.restarts = self.restarts
        report.ts_decreases = self.ts_decreases
        report.redactions = [
            RedactionFact(
                seq=r_seq,
                targets=[t for t, _ in targets],
                payload_removed=[t for t, _ in targets if r_seq in self.authorized.get(t, [])],
                pending=sorted(self.pending.get(r_seq, ())),
                covered=newest is not None and newest > r_seq,
            )
            for r_seq, _name, _line, targets in self.redactions
        ]
        report.warnings = self.scan.warnings + self.walk_warnings + self._summary_warnings()
        report.unanchored_by_any_checkpoint = max(0, records - (newest or 0))
        if self.failure is not None:
            report.verdict, report.error = FAIL, self.failure[1]
            report.unanchored_records = records
            return
        anchor = None
        if report.vkey_source == "auditor":
            if self.pins:
                pin = max(self.pins, key=lambda p: p.size)
                anchor = Anchor("pin", pin.size, pin.path)
            elif self.held_file.ok and (self.embedded_newest or 0) <= self.held_file.size:
                anchor = Anchor("checkpoint", self.held_file.size)
            elif self.embedded_newest is not None:
                anchor = Anchor("segment.open", self.embedded_newest)
        report.anchor = anchor
        report.unanchored_records = records - (anchor.size if anchor else 0)
        if anchor is None:
            report.verdict = INTACT_UNANCHORED
        else:
            report.verdict = VALID_EXTERNAL if anchor.source == "pin" else VALID_LOCAL

    def _summary_warnings(self) -> list[str]:
        out = []
        if self.noncanonical:
            name, line = self.noncanonical_first  # type: ignore[misc]
            out.append(
                f"{self.noncanonical} non-canonical line(s), first {name} line {line}: key order, "
                "whitespace or escapes differ from the writer's bytes (nothing hashes the line, so "
                "they still verify)"
            )
        if self.unknown:
            name, line = self.unknown_first  # type: ignore[misc]
            out.append(
                f"{self.unknown} line(s) with unknown top-level keys {sorted(self.unknown_names)}, "
                f"first {name} line {line} (ignored in non-strict mode; strict mode fails them)"
            )
        if self.redacted_on_payload:
            out.append(
                f"{self.redacted_on_payload} record(s) carry `redacted` but still hold their payload"
            )
        if self.redacted_mismatched:
            out.append(
                f"{self.redacted_mismatched} redacted record(s) whose `redacted` value is missing or "
                "is not the seq of a redaction naming them (advisory)"
            )
        if self.ts_dropped:
            out.append(f"{self.ts_dropped} more ts decreases not listed")
        return out


def _results(tasks: list[tuple[_Plan, int]], jobs: int) -> Iterator[_SegmentResult]:
    """Segment results in order; in worker processes when jobs > 1."""
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield _walk_segment(task)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with context.Pool(min(jobs, len(tasks))) as pool:
        yield from pool.imap(_walk_segment, tasks)
        # Leaving the block terminates the workers, also when the caller stops early on a FAIL.


def _read_records(plan: _Plan, seqs: list[int]) -> Iterator[tuple[int, str, str]]:
    """(seq, tenant, pd) of the given records: a second read, only of the segments holding them."""
    size = 1 << plan.seg_bits
    by_segment: dict[int, set[int]] = {}
    for seq in seqs:
        by_segment.setdefault(seq // size, set()).add(seq)
    for number, wanted in sorted(by_segment.items()):
        base = number * size
        with open(plan.log_dir / segment_name(number), "rb") as f:
            for index, raw in enumerate(f):
                seq = base + index
                if seq in wanted:
                    # The walk already passed this line, so it parses.
                    try:
                        obj = _loads(raw)
                    except orjson.JSONDecodeError:
                        obj = json.loads(raw)
                    yield seq, obj["tenant"], obj["pd"]
                    wanted.discard(seq)
                    if not wanted:
                        break
