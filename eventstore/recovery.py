"""Crash recovery decisions (docs/format.md sections 8 and 10), as pure functions over bytes.

`scan_tail` walks the last segment's bytes, checks every complete line, and says where the
valid records end and which suffix, if any, is a crash leftover. The writer does the file work
(quarantine, truncate, fsync) around it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .checkpoint import CheckpointError, VerifierKey, parse_checkpoint
from .errors import CorruptLog
from .linecheck import LineError, NotJsonText, check_line, is_json_text
from .record import CONTROL_TENANT, SEGMENT_OPEN, SEGMENT_SEAL


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


def scan_tail(data: bytes, first_seq: int, prev: bytes, seg_bits: int, file_name: str) -> TailScan:
    """Validate the last segment and find its crash leftover, if any (section 10's rules).

    Raises CorruptLog for anything that is not a crash leftover: a complete line that parses as
    JSON but fails a check (a `NaN` or `1e400` included: a torn write never leaves a complete
    line holding one), or a non-JSON line followed by a line that parses. Every line goes
    through the same `linecheck.check_line` as the offline verifier's.
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
            checked = check_line(line, seq=seq, prev=prev, seg_bits=seg_bits)
        except NotJsonText:
            if _any_json_after(data, newline + 1):
                raise CorruptLog(
                    f"{file_name} at byte {offset} (seq {seq}): a complete line that is not a "
                    "JSON text, with records after it; this is not a crash leftover"
                ) from None
            scan.leftover_offset = offset  # (b) a non-JSON line, and nothing parses after it
            break
        except LineError as exc:
            raise CorruptLog(
                f"{file_name} at byte {offset} (line for seq {seq}): [{exc.check}] {exc}"
            ) from None
        obj = checked.obj
        scan.leaves.append(checked.h)
        if scan.first is None:
            scan.first = obj
        scan.last = obj
        if not (obj["tenant"] == CONTROL_TENANT and obj["type"] in (SEGMENT_OPEN, SEGMENT_SEAL)):
            scan.last_event = obj
        prev, seq = checked.h, seq + 1
        offset = newline + 1
        scan.valid_end = offset
    return scan


def _any_json_after(data: bytes, offset: int) -> bool:
    return any(is_json_text(line) for line in data[offset:].split(b"\n")[:-1])


def newest_checkpoint(
    texts: Iterable[tuple[str, str]],
    vkey: VerifierKey,
    held: int,
    held_where: str,
    root_at: Callable[[int], bytes],
) -> int:
    """The size of the newest of the checkpoints `texts` ((source, text) pairs), after checking
    each against the records that survive: it must verify, cover no more than the `held`
    records (`held_where` says where they are, for the message) and sign their Merkle root.
    CorruptLog otherwise: a log whose records contradict its own signatures is never resumed."""
    newest = 0
    for source, text in texts:
        try:
            cp = parse_checkpoint(text, vkey)
        except CheckpointError as exc:
            raise CorruptLog(f"{source} does not verify: {exc}") from None
        if cp.size > held:
            raise CorruptLog(
                f"{source} covers {cp.size} records but {held_where}: "
                "records behind a checkpoint are missing"
            )
        if root_at(cp.size) != cp.root:
            raise CorruptLog(f"{source} (size {cp.size}) disagrees with the records' Merkle root")
        newest = max(newest, cp.size)
    return newest
