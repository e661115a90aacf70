"""`verify_log`: check the inputs, walk the segments, stitch the results, return the report."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..checkpoint import VerifierKey
from ..layout import WHAT_TO_PASS, segment_name
from .inputs import (
    VerifyInputError,
    parse_vkey,
    read_checkpoint_file,
    read_header,
    read_pin,
    scan_directory,
)
from .plan import Plan
from .report import FAIL, Report, VerifyError
from .stitch import Stitcher


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
    pin_paths = [Path(p) for p in pins]
    if not log_dir.is_dir():
        raise VerifyInputError(
            f"log directory {str(log_dir)!r} does not exist or is not a directory"
        )
    if jobs < 1:
        raise VerifyInputError(f"jobs must be 1 or more, not {jobs}")
    auditor_key = parse_vkey(vkey) if vkey is not None else None
    if auditor_key is not None and origin is not None and origin != auditor_key.origin:
        raise VerifyInputError(
            f"origin {origin!r} does not match the vkey's origin {auditor_key.origin!r}: "
            "pass the vkey of this log"
        )
    scan = scan_directory(log_dir)
    if not scan.numbers:
        raise VerifyInputError(
            f"{log_dir} holds no segment files (seg-<12 digits>.jsonl); {WHAT_TO_PASS}"
        )
    header = read_header(log_dir)
    if auditor_key is not None and header.own_genesis and header.origin != auditor_key.origin:
        # Another log's key, not a tampered one: every record would fail from the genesis on.
        raise VerifyInputError(
            f"this key belongs to another origin: the vkey is for {auditor_key.origin!r}, "
            f"and {log_dir} is the log of {header.origin!r}; pass this log's vkey "
            "(`ledgermem vkey --data DIR` prints it)"
        )
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
        if pin_paths:
            raise VerifyInputError(
                "cannot check the pins: no --vkey, and segment 0's header has none"
            )
        report.error = header.error or VerifyError(
            segment_name(0), 1, 0, "segment.open.vkey",
            "segment 0's header names no verifier key, and no --vkey was given",
        )  # fmt: skip
        return report
    pinned = [read_pin(p, key) for p in pin_paths]  # bad pins are input errors, before any verdict
    if header.error is not None or header.seg_bits is None:
        report.error = header.error
        return report
    if auditor_key is None:
        scan.warnings.append(
            "no vkey given: checked with the key named in segment 0's header, which proves "
            "nothing against someone who could rewrite the files; pass --vkey for a VALID verdict"
        )
    held_file = read_checkpoint_file(log_dir, key)
    plan = Plan(
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
    Stitcher(plan, held_file, pinned, report, scan).run(jobs, scan.numbers)
    return report
