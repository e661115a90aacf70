"""Stitching segment results together, in order, and the checks that span segments: chain
links across files, seal roots, `prev_segment_root`, embedded checkpoints, the `checkpoint`
file, pins and redactions."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
from collections.abc import Generator, Iterator

import orjson

from ..layout import segment_name, segment_number
from ..merkle import CompactRange
from ..record import CONTROL_TENANT
from .inputs import DirectoryScan, HeldCheckpoint
from .plan import Plan
from .report import (
    FAIL,
    INTACT_UNANCHORED,
    VALID_EXTERNAL,
    VALID_LOCAL,
    Anchor,
    RedactionFact,
    Report,
    Restart,
    TsDecrease,
    VerifyError,
)
from .segment_walk import SegmentResult, walk_segment


class Stitcher:
    def __init__(
        self,
        plan: Plan,
        held_file: HeldCheckpoint,
        pins: list[HeldCheckpoint],
        report: Report,
        scan: DirectoryScan,
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
        with contextlib.closing(segment_results(tasks, jobs)) as results:
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

    def _take(self, r: SegmentResult) -> bool:
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

    def _root_at(self, m: int, r: SegmentResult) -> bytes:
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

    def _gather(self, r: SegmentResult, upto: int | None) -> None:
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

    def _check_held(self, held: HeldCheckpoint, rank: tuple, file: str, records: int) -> None:
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
        for t_seq, tenant, pd in read_records(self.plan, sorted(lookups)):
            for r_seq, name, line, t_pd in lookups[t_seq]:
                if tenant == CONTROL_TENANT:
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
        report.checkpoint_file = self.held_file.present
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
            assert self.noncanonical_first is not None  # set with the first one counted
            name, line = self.noncanonical_first
            out.append(
                f"{self.noncanonical} non-canonical line(s), first {name} line {line}: key order, "
                "whitespace or escapes differ from the writer's bytes (nothing hashes the line, so "
                "they still verify)"
            )
        if self.unknown:
            assert self.unknown_first is not None  # set with the first one counted
            name, line = self.unknown_first
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


def segment_results(
    tasks: list[tuple[Plan, int]], jobs: int
) -> Generator[SegmentResult, None, None]:
    """Segment results in order; in worker processes when jobs > 1."""
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield walk_segment(task)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with context.Pool(min(jobs, len(tasks))) as pool:
        yield from pool.imap(walk_segment, tasks)
        # Leaving the block terminates the workers, also when the caller stops early on a FAIL.


def read_records(plan: Plan, seqs: list[int]) -> Iterator[tuple[int, str, str]]:
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
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        obj = json.loads(raw)
                    yield seq, obj["tenant"], obj["pd"]
                    wanted.discard(seq)
                    if not wanted:
                        break
