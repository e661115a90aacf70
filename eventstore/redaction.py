"""Redaction over segment files (docs/format.md section 9): reading targets, rewriting a segment.

A redaction record names its targets by seq and pd; once it is durable and a checkpoint covers
it, each target's line is replaced by the same line without `payload` and `salt`, plus
`redacted`. The hash chain does not change, because `h` covers `pd`, not the payload.
"""

from __future__ import annotations

from pathlib import Path

from . import layout, segfile
from .atomic import atomic_file
from .errors import InvalidInput
from .record import Record


def seq_of(line: bytes) -> int:
    """The seq of a line this project wrote, without parsing the whole line."""
    start = line.index(b'"seq":') + 6
    return int(line[start : line.index(b",", start)])


def read_record(log_dir: Path, seq: int, seg_bits: int) -> Record:
    """Read one record by seq from the files (a scan of its segment; the reader has an index)."""
    path = log_dir / layout.segment_name(seq >> seg_bits)
    for _, line in segfile.iter_lines(path):
        if seq_of(line) == seq:
            return Record.from_line(line)
    raise InvalidInput(f"seq {seq} is not in {path.name}")


def target_of(record: Record) -> dict:
    """The redaction payload's entry for `record`; InvalidInput if it cannot be redacted."""
    if record.is_control:
        raise InvalidInput(
            f"seq {record.seq} is a control record ({record.type}); those cannot be redacted"
        )
    if not record.has_payload:
        raise InvalidInput(f"seq {record.seq} is already redacted (by seq {record.redacted})")
    return {"pd": record.pd, "seq": record.seq}


def targets_by_segment(seqs: list[int], redaction_seq: int, seg_bits: int) -> dict:
    """{segment: {target seq: redaction seq}}: the rewrite that a redaction record asks for."""
    by_segment: dict[int, dict[int, int]] = {}
    for seq in seqs:
        by_segment.setdefault(seq >> seg_bits, {})[seq] = redaction_seq
    return by_segment


def rewrite_segment(log_dir: Path, n: int, targets: dict[int, int]) -> None:
    """Write segment `n` with the targets' payloads removed beside the old file, then rename it
    over: a crash leaves either file whole. Always durable, whatever the writer's durability:
    an erasure that a power loss can undo is not one."""
    path = log_dir / layout.segment_name(n)
    with open(path, "rb") as src, atomic_file(path) as dst:
        for line in src:
            seq = seq_of(line)
            if seq in targets:
                line = Record.from_line(line).redacted_line(targets[seq]) + b"\n"
            dst.write(line)
