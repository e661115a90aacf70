"""The verifier's answer: the verdict, the first error, and the report of docs/format.md
section 10 (`Report.to_json`), or text for people (`Report.render_text`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wording import count

FAIL = "FAIL"
VALID_EXTERNAL = "VALID-EXTERNAL"
VALID_LOCAL = "VALID-LOCAL"
INTACT_UNANCHORED = "INTACT-UNANCHORED"


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
    checkpoint_file: bool = True  # whether LOGDIR holds a `checkpoint` file at all

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == FAIL else 0

    @property
    def not_anchored(self) -> str | None:
        """What no signed checkpoint vouches for, and why, or None when every record is anchored
        (or the verdict is FAIL). Records past the anchor are only self-consistent: each links
        to the one before, so a change is seen, but records cut from the end are not."""
        if self.verdict == FAIL or (self.anchor is not None and self.unanchored_records == 0):
            return None
        fix = "--pin FILE with a checkpoint kept from earlier detects that"
        if self.anchor is None:
            what = f"all {count(self.records, 'record')}"
            if self.vkey_source != "auditor":
                why = "no --vkey, and a key read from the files anchors nothing"
                fix = "--vkey, with --pin FILE (a checkpoint kept from earlier), detects that"
            else:
                missing = (
                    "no checkpoint file" if not self.checkpoint_file else "no usable checkpoint"
                )
                why = f"{missing}, none in a segment header and no pin"
        else:
            first, last = self.anchor.size, self.records - 1
            span = f"seq {first}" if first == last else f"seq {first}..{last}"
            what = f"{count(self.unanchored_records, 'record')} after the anchor ({span})"
            source = {"pin": "a pin", "checkpoint": "the checkpoint file"}.get(
                self.anchor.source, "the checkpoint in a segment header"
            )
            why = f"the anchor is {source}, of size {self.anchor.size}"
            if not self.checkpoint_file:
                why += "; no checkpoint file"
        return (
            f"{what}: {why}. The chain alone shows a change but not records cut from its end; "
            f'{fix} (docs/verify.md, "Pins")'
        )

    def to_json(self) -> dict:
        """The report of docs/format.md section 10, as JSON-ready values."""
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
            "not_anchored": self.not_anchored,
            "checkpoint_file": self.checkpoint_file,
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
        out.append(f"  records: {self.records} in {count(self.segments, 'segment file')}")
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
            if self.not_anchored is not None:
                out.append(f"  not anchored: {self.not_anchored}")
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
