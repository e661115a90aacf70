"""Session bundles: one file proving that a session's records are in a log, without the log.

A bundle holds one session's records (the exact line bytes of the segment files), an RFC 9162
inclusion proof for each against one signed checkpoint, and that checkpoint. An auditor holding
the log's vkey checks it alone (`verify_bundle`): every line is a well-formed record whose `pd`
and `h` follow from its bytes, every `h` is the leaf at its seq in the tree the checkpoint
signed, every record belongs to the named tenant and session, and each record's `prev_seq`
names the bundle's previous record, so no record of the session is missing between the first
and the last. Nothing here can prove that no record follows the last one: the log may hold
later records of the session, before or after the checkpoint.

The file is JSON (docs/replay.md has the format):

    {"format":"ledgermem.bundle/1","origin":..,"vkey":..,"tenant":..,"session":..,
     "checkpoint":"<signed note>","records":[
    {"line":"<the record's line>","proof":["<base64 hash>",...]},
    ...
    ]}

Checking is pure (bytes in, report out): each line goes through the format core's
`eventstore.linecheck.check_line`, the same check `ledgermem verify` runs. Building reads a log
directory through `LogReader`. The C2SP tlog-proof text format of `ledgermem proof` lives in
`tlog_proof`.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from eventstore import jcs
from eventstore.checkpoint import Checkpoint, CheckpointError, VerifierKey, parse_checkpoint
from eventstore.errors import CorruptLog, InvalidInput, InvalidPayload, InvalidProof
from eventstore.identifiers import CONTROL_TENANT, is_identifier
from eventstore.linecheck import LineError, check_line
from eventstore.log_proofs import SubtreeRoots, checkpoint_of_size, header_key, newest_checkpoint
from eventstore.merkle import inclusion_proof, verify_inclusion
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.tlog_proof import decode_hash

# Moved to eventstore/log_proofs.py (the service serves proofs too); kept importable from here.
__all__ = ["SubtreeRoots", "checkpoint_of_size", "header_key", "newest_checkpoint"]

FORMAT = "ledgermem.bundle/1"
VALID = "VALID"
VALID_UNLINKED = "VALID-UNLINKED"
FAIL = "FAIL"

_BUNDLE_KEYS = ("format", "origin", "vkey", "tenant", "session", "checkpoint", "records")
_RECORD_KEYS = ("line", "proof")


class BundleError(InvalidInput):
    """A file that is not a well-formed bundle (unreadable, not JSON, wrong shape): exit 2."""


# ---------------------------------------------------------------------------------------------
# The file


@dataclass(frozen=True)
class BundleRecord:
    line: bytes  # the record's line, exactly as in its segment file, without the newline
    proof: tuple[str, ...]  # base64 hashes of its inclusion proof, leaf's sibling first


@dataclass(frozen=True)
class Bundle:
    origin: str
    vkey: str  # the log's vkey as the exporter read it: informational, the auditor brings theirs
    tenant: str
    session: str
    checkpoint: str  # the signed note the proofs lead to
    records: tuple[BundleRecord, ...]

    def to_bytes(self) -> bytes:
        """One JSON object, one record per line so that the file greps and diffs well."""
        head = orjson.dumps(
            {
                "format": FORMAT,
                "origin": self.origin,
                "vkey": self.vkey,
                "tenant": self.tenant,
                "session": self.session,
                "checkpoint": self.checkpoint,
            }
        )
        rows = [
            orjson.dumps({"line": r.line.decode("utf-8"), "proof": list(r.proof)})
            for r in self.records
        ]
        return head[:-1] + b',"records":[\n' + b",\n".join(rows) + b"\n]}\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> Bundle:
        """Parse strictly: duplicate keys, unknown keys and wrong types are BundleError."""
        try:
            obj = jcs.loads_strict(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise BundleError("not a bundle: the file is not UTF-8") from None
        except InvalidPayload as exc:
            raise BundleError(f"not a bundle: {exc}") from None
        if type(obj) is not dict:
            raise BundleError("not a bundle: the file is not a JSON object")
        if obj.get("format") != FORMAT:
            raise BundleError(
                f"not a bundle of format {FORMAT!r} (format is {obj.get('format')!r})"
            )
        _exact_keys(obj, _BUNDLE_KEYS, "the bundle")
        for key in _BUNDLE_KEYS[1:-1]:
            if type(obj[key]) is not str:
                raise BundleError(f"not a bundle: {key!r} is not a string")
        if type(obj["records"]) is not list:
            raise BundleError("not a bundle: 'records' is not a list")
        records = []
        for index, row in enumerate(obj["records"], 1):
            where = f"record {index}"
            if type(row) is not dict:
                raise BundleError(f"not a bundle: {where} is not an object")
            _exact_keys(row, _RECORD_KEYS, where)
            if type(row["line"]) is not str:
                raise BundleError(f"not a bundle: the line of {where} is not a string")
            proof = row["proof"]
            if type(proof) is not list or not all(type(h) is str for h in proof):
                raise BundleError(f"not a bundle: the proof of {where} is not a list of strings")
            records.append(BundleRecord(row["line"].encode("utf-8"), tuple(proof)))
        return cls(
            obj["origin"], obj["vkey"], obj["tenant"], obj["session"], obj["checkpoint"],
            tuple(records),
        )  # fmt: skip


def _exact_keys(obj: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in obj]
    unknown = sorted(set(obj) - set(keys))
    if missing or unknown:
        raise BundleError(f"not a bundle: {where} lacks {missing} or has unknown keys {unknown}")


def read_bundle(path: str | os.PathLike[str]) -> tuple[Bundle, bytes]:
    """The bundle in a file, and the file's bytes (their sha256 names the bundle)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BundleError(f"cannot read bundle {path}: {exc.strerror or exc}") from None
    return Bundle.from_bytes(data), data


# ---------------------------------------------------------------------------------------------
# Checking a bundle


@dataclass(frozen=True)
class BundleFailure:
    record: int | None  # 1-based position in the bundle, or None for the bundle as a whole
    seq: int | None
    check: str
    message: str


@dataclass
class BundleReport:
    verdict: str
    origin: str
    tenant: str
    session: str
    vkey_source: str  # "auditor", or "bundle" when the key was read from the bundle itself
    error: BundleFailure | None = None
    checkpoint_size: int | None = None
    checkpoint_root: str | None = None
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    first_type: str | None = None
    last_type: str | None = None
    starts_mid_session: bool = False
    redacted: list[int] = field(default_factory=list)
    unlinked: list[tuple[int, int]] = field(default_factory=list)  # (seq before, redacted seq)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == FAIL else 0

    def proves(self) -> list[str]:
        if self.verdict == FAIL:
            return []
        key = "the given key" if self.vkey_source == "auditor" else "the key the bundle names"
        out = [
            f"each of the {self.records} records is, byte for byte, the record at its seq in the "
            f"log {self.origin!r}, whose first {self.checkpoint_size} records {key} signed",
            f"every record belongs to tenant {self.tenant!r}, session {self.session!r}",
        ]
        if not self.unlinked:
            out.append(
                f"no record of the session is missing between seq {self.first_seq} and seq "
                f"{self.last_seq}: each record's prev_seq names the record before it"
            )
        if not self.starts_mid_session:
            out.append(f"the bundle starts where the session was created (seq {self.first_seq})")
        return out

    def cannot_prove(self) -> list[str]:
        if self.verdict == FAIL:
            return []
        out = [
            f"that no record of the session follows seq {self.last_seq}: the log may hold later "
            "records of it, before or after the checkpoint",
            f"anything about records at seq {self.checkpoint_size} or later, which the "
            "checkpoint does not cover",
            "anything about other sessions, whose records the bundle does not hold",
        ]
        if self.starts_mid_session:
            out.append(
                f"anything about the session before seq {self.first_seq}: the bundle starts "
                "mid-session"
            )
        for before, seq in self.unlinked:
            out.append(
                f"that no record is missing between seq {before} and seq {seq}: seq {seq}'s "
                "payload was erased and the bundle holds no restatement of its prev_seq"
            )
        if self.vkey_source != "auditor":
            out.append(
                "that the log is the one you trust: the key came from the bundle itself; "
                "pass the log's vkey"
            )
        return out

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "error": None if self.error is None else vars(self.error).copy(),
            "origin": self.origin,
            "tenant": self.tenant,
            "session": self.session,
            "vkey_source": self.vkey_source,
            "checkpoint": None
            if self.checkpoint_size is None
            else {"size": self.checkpoint_size, "root": self.checkpoint_root},
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_type": self.first_type,
            "last_type": self.last_type,
            "starts_mid_session": self.starts_mid_session,
            "redacted": list(self.redacted),
            "unlinked": [list(pair) for pair in self.unlinked],
            "warnings": list(self.warnings),
            "proves": self.proves(),
            "cannot_prove": self.cannot_prove(),
        }

    def render_text(self) -> str:
        out = [f"{self.verdict}  bundle of {self.tenant}/{self.session} from {self.origin}"]
        if self.error is not None:
            e = self.error
            where = "the bundle" if e.record is None else f"record {e.record}"
            if e.seq is not None:
                where += f" (seq {e.seq})"
            out.append(f"  error: {where}: [{e.check}] {e.message}")
        else:
            out.append(
                f"  records: {self.records}, seq {self.first_seq} ({self.first_type}) .. "
                f"{self.last_seq} ({self.last_type}); checkpoint size {self.checkpoint_size}"
            )
            if self.redacted:
                out.append(f"  redacted (payload erased; pd and h still verified): {self.redacted}")
        for w in self.warnings:
            out.append(f"  warning: {w}")
        for line in self.proves():
            out.append(f"  proves: {line}")
        for line in self.cannot_prove():
            out.append(f"  cannot prove: {line}")
        return "\n".join(out) + "\n"


class _Fail(Exception):
    def __init__(self, record: int | None, seq: int | None, check: str, message: str) -> None:
        super().__init__(message)
        self.failure = BundleFailure(record, seq, check, message)


def verify_bundle(bundle: Bundle, vkey: VerifierKey, vkey_source: str = "auditor") -> BundleReport:
    """Check a bundle alone against the log's vkey. Never raises for what the bundle holds."""
    report = BundleReport(FAIL, bundle.origin, bundle.tenant, bundle.session, vkey_source)
    report.records = len(bundle.records)
    try:
        checked = _check_records(bundle, vkey, report)
        _check_chain(checked, report)
    except _Fail as exc:
        report.error = exc.failure
        return report
    report.verdict = VALID_UNLINKED if report.unlinked else VALID
    return report


def _check_records(bundle: Bundle, vkey: VerifierKey, report: BundleReport) -> list[Record]:
    if bundle.origin != vkey.origin:
        raise _Fail(
            None, None, "bundle.origin",
            f"the bundle is from log {bundle.origin!r}, but the key is for {vkey.origin!r}",
        )  # fmt: skip
    if not is_identifier(bundle.tenant) or bundle.tenant == CONTROL_TENANT:
        raise _Fail(None, None, "bundle.tenant", f"tenant {bundle.tenant!r} is not an event tenant")
    if not is_identifier(bundle.session):
        raise _Fail(
            None, None, "bundle.session", f"session {bundle.session!r} is not an identifier"
        )
    if bundle.vkey != str(vkey):
        report.warnings.append(
            f"the bundle names vkey {bundle.vkey!r}, not the one given; the given key is trusted"
        )
    try:
        cp = parse_checkpoint(bundle.checkpoint, vkey)
    except CheckpointError as exc:
        raise _Fail(None, None, exc.check, f"the bundle's checkpoint: {exc}") from None
    report.checkpoint_size, report.checkpoint_root = cp.size, base64.b64encode(cp.root).decode()
    if not bundle.records:
        raise _Fail(None, None, "bundle.empty", "the bundle holds no records")
    checked: list[Record] = []
    noncanonical = 0
    for index, entry in enumerate(bundle.records, 1):
        try:
            line = check_line(entry.line)
        except LineError as exc:
            raise _Fail(index, _seq_hint(entry.line), exc.check, str(exc)) from None
        record = line.record
        seq = record.seq
        if (record.tenant, record.session) != (bundle.tenant, bundle.session):
            raise _Fail(
                index, seq, "record.session",
                f"the record is of {record.tenant}/{record.session}, not of the bundle's "
                f"{bundle.tenant}/{bundle.session}",
            )  # fmt: skip
        if checked and seq <= checked[-1].seq:
            raise _Fail(
                index, seq, "record.order", f"seq {seq} does not follow seq {checked[-1].seq}"
            )
        if seq >= cp.size:
            raise _Fail(
                index, seq, "record.uncovered",
                f"seq {seq} is not covered by the checkpoint of size {cp.size}",
            )  # fmt: skip
        try:
            path = [decode_hash(h) for h in entry.proof]
        except ValueError:
            raise _Fail(
                index, seq, "record.proof", "a proof hash is not base64 of 32 bytes"
            ) from None
        try:
            verify_inclusion(seq, cp.size, bytes.fromhex(record.h), path, cp.root)
        except InvalidProof as exc:
            raise _Fail(index, seq, "record.inclusion", str(exc)) from None
        if not line.canonical:
            noncanonical += 1
        if record.salt is None:
            report.redacted.append(seq)
        checked.append(record)
    if noncanonical:
        report.warnings.append(
            f"{noncanonical} line(s) differ from the canonical form (key order, whitespace or "
            "escapes); nothing hashes the line's bytes, so they still verify"
        )
    return checked


def _check_chain(checked: list[Record], report: BundleReport) -> None:
    """Each record's prev_seq must name the bundle's previous record (docs/events.md)."""
    restated = restatements(checked)
    first, last = checked[0], checked[-1]
    report.first_seq, report.first_type = first.seq, first.type
    report.last_seq, report.last_type = last.seq, last.type
    for index, record in enumerate(checked, 1):
        prev, known = _prev_seq(index, record, restated)
        if record.type == "session.created":
            if known and prev is not None:
                raise _Fail(
                    index, record.seq, "chain.prev_seq",
                    f"a session.created record with prev_seq {prev}, not null",
                )  # fmt: skip
            if index > 1:
                raise _Fail(
                    index, record.seq, "chain.link",
                    f"a session.created after seq {checked[index - 2].seq}: the bundle mixes "
                    "two incarnations of the session, or holds a record out of place",
                )  # fmt: skip
            continue
        if known and prev is None:
            raise _Fail(
                index, record.seq, "chain.prev_seq",
                f"a {record.type} record with prev_seq null: only session.created starts a chain",
            )  # fmt: skip
        if index == 1:
            report.starts_mid_session = True
            continue
        before = checked[index - 2].seq
        if not known:
            report.unlinked.append((before, record.seq))
        elif prev != before:
            assert prev is not None  # known and null was refused above
            if before < prev < record.seq:
                why = f"record {prev} of the session is missing from the bundle"
            else:
                why = "the bundle's records are not one chain"
            raise _Fail(
                index, record.seq, "chain.link",
                f"prev_seq is {prev}, but the bundle's previous record is seq {before}: {why}",
            )  # fmt: skip


def restatements(records: Iterable[Record]) -> dict[int, dict]:
    """seq -> content-free payload, from the `items.erased` records among `records`.

    An erase keeps a restatement of every payload it redacts (docs/events.md), so a redacted
    record's `prev_seq` (and its structure, for the projection) survives in a record that is
    itself in the bundle and proven.
    """
    found: dict[int, dict] = {}
    for record in records:
        if record.type != "items.erased" or record.salt is None:
            continue
        restate = record.payload.get("restate") if type(record.payload) is dict else None
        if type(restate) is not dict:
            continue
        for key, payload in restate.items():
            if key.isdigit() and int(key) < record.seq and type(payload) is dict:
                found[int(key)] = payload
    return found


def _prev_seq(index: int, record: Record, restated: dict[int, dict]) -> tuple[int | None, bool]:
    """(prev_seq, known). Unknown only for a redacted record without a restatement."""
    payload = record.payload if record.salt is not None else restated.get(record.seq)
    if payload is None:
        return None, False
    if type(payload) is not dict or "prev_seq" not in payload:
        raise _Fail(
            index, record.seq, "chain.prev_seq",
            "the payload has no prev_seq: every session record names its predecessor",
        )  # fmt: skip
    prev = payload["prev_seq"]
    if prev is not None and (type(prev) is not int or not 0 <= prev < record.seq):
        raise _Fail(
            index, record.seq, "chain.prev_seq",
            f"prev_seq {prev!r} is not null or an earlier seq",
        )  # fmt: skip
    return prev, True


def _seq_hint(line: bytes) -> int | None:
    try:
        seq = orjson.loads(line).get("seq")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return seq if type(seq) is int else None


# ---------------------------------------------------------------------------------------------
# Building a bundle from a log directory


def session_lines(
    reader: LogReader,
    session: str,
    tenant: str | None = None,
    advance: Callable[[int], None] | None = None,
) -> dict[str, list[tuple[int, bytes]]]:
    """Tenant -> the (seq, line) of the session's current incarnation, by one scan of the log.

    A session id may be deleted and created again; the current incarnation is the chain that
    ends at the last record of (tenant, session), i.e. everything from its last
    `session.created` on. A scan needs no payloads, so it also finds redacted records, whose
    back-links are gone. Lines are matched on their bytes first (identifiers are never escaped),
    then parsed.
    """
    needle = b',"session":"' + session.encode() + b'","section":"'
    found: dict[str, list[tuple[int, bytes]]] = {}
    count = 0
    for seq, line in reader.lines():
        count += 1
        if advance is not None and count & 0xFFF == 0:
            advance(0x1000)
        if needle not in line:
            continue
        try:
            record = Record.from_line(line)
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise CorruptLog(
                f"seq {seq} in {reader.log_dir} is not a record ({exc}): run ledgermem verify"
            ) from None
        if record.session != session or record.is_control:
            continue
        if tenant is not None and record.tenant != tenant:
            continue
        chain = found.setdefault(record.tenant, [])
        if record.type == "session.created":
            chain.clear()  # an earlier incarnation ended with session.deleted (or erased)
        chain.append((seq, line))
    return found


def build_bundle(
    reader: LogReader,
    tenant: str,
    session: str,
    lines: list[tuple[int, bytes]],
    checkpoint: Checkpoint,
) -> Bundle:
    roots = SubtreeRoots(reader)
    records = []
    for seq, line in lines:
        proof = inclusion_proof(seq, checkpoint.size, roots)
        records.append(BundleRecord(line, tuple(base64.b64encode(h).decode() for h in proof)))
    return Bundle(reader.origin, reader.vkey, tenant, session, checkpoint.text, tuple(records))
