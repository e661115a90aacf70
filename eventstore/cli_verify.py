"""`ledgermem verify LOGDIR`: offline verification (docs/format.md section 10, docs/wire.md).

A thin layer over `eventstore.verify`: it reads the arguments, prints the report and maps the
verdict to the exit status (0 for every verdict but FAIL, 1 for FAIL, 2 for bad input, and 3
for a verdict no checkpoint anchors when `--require-anchor` asked for one).
It imports nothing outside `eventstore`, so it starts fast and runs without the service.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

from .errors import LedgerError
from .verify import INTACT_UNANCHORED, verify_log

EXIT_BAD_INPUT = 2
EXIT_NOT_ANCHORED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR", help="the directory holding seg-*.jsonl")
    parser.add_argument(
        "--vkey",
        metavar="VKEY",
        help="the log's verifier key, or @FILE to read it from a file; without it the key in "
        "segment 0's header is used and the verdict is at most INTACT-UNANCHORED",
    )
    parser.add_argument("--origin", metavar="O", help="the log's expected origin")
    parser.add_argument(
        "--pin",
        metavar="FILE",
        action="append",
        default=[],
        help="a checkpoint kept from earlier (repeatable): anchors a VALID-EXTERNAL verdict, and "
        "records cut from the log's end behind it are a FAIL",
    )
    parser.add_argument(
        "--require-anchor",
        action="store_true",
        help="exit 3 when no signed checkpoint anchors the log (INTACT-UNANCHORED) instead of 0",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="verify segments in N processes; `all` for one per usable core",
    )
    parser.add_argument(
        "--non-strict",
        action="store_true",
        help="report unknown top-level keys as warnings instead of failing",
    )


def run(args: argparse.Namespace) -> int:
    try:
        vkey = _read_vkey(args.vkey) if args.vkey is not None else None
        report = verify_log(
            args.logdir,
            vkey=vkey,
            origin=args.origin,
            pins=args.pin,
            strict=not args.non_strict,
            jobs=args.jobs,
        )
    except (LedgerError, OSError) as exc:
        print(f"ledgermem verify: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_json()).decode() + "\n")
    else:
        sys.stdout.write(report.render_text())
    sys.stdout.flush()
    if args.require_anchor and report.verdict == INTACT_UNANCHORED:
        print(
            "ledgermem verify: INTACT-UNANCHORED and --require-anchor: no signed checkpoint "
            "anchors the log",
            file=sys.stderr,
        )
        return EXIT_NOT_ANCHORED
    return report.exit_code


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), not merely the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity on this platform
        return os.cpu_count() or 1


def _read_vkey(value: str) -> str:
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise OSError(f"cannot read the vkey file {path}: {exc}") from None


def _jobs(text: str) -> int:
    if text == "all":
        return usable_cores()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value
