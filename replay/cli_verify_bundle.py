"""`ledgermem verify-bundle BUNDLE --vkey V [--json]`: check an exported bundle alone.

Exit 0 for VALID and VALID-UNLINKED, 1 for FAIL (naming the record and the check), 2 for bad
input (an unreadable or malformed file, a malformed vkey). The report says what a valid bundle
proves and what it cannot (replay/bundle.py, docs/replay.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from eventstore.checkpoint import VerifierKey
from eventstore.errors import BadKey

from .bundle import read_bundle, verify_bundle


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE", help="a file written by `ledgermem export`")
    parser.add_argument(
        "--vkey",
        required=True,
        metavar="VKEY",
        help="the log's verifier key as the auditor holds it, or @FILE to read it from a file",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def read_vkey(value: str) -> VerifierKey:
    """A vkey string, or @FILE holding one. BadKey (exit 2) if it is not a verifier key."""
    if value.startswith("@"):
        try:
            value = Path(value[1:]).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadKey(f"cannot read the vkey file {value[1:]}: {exc}") from None
    try:
        return VerifierKey.parse(value)
    except BadKey as exc:
        raise BadKey(f"{exc}: pass the line `ledgermem vkey` prints") from None


def run(args: argparse.Namespace) -> int:
    vkey = read_vkey(args.vkey)
    bundle, _ = read_bundle(args.bundle)
    report = verify_bundle(bundle, vkey)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json()) + b"\n")
    else:
        sys.stdout.write(report.render_text())
    sys.stdout.flush()
    return report.exit_code
