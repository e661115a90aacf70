"""`ledgermem demo [--data DIR]`: write a few records, read them back, verify the log offline."""

from __future__ import annotations

import argparse
import sys

from .cli_keys import DEFAULT_DATA
from .errors import LedgerError
from .layout import DataDir
from .reader import LogReader
from .store import open_log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=DEFAULT_DATA, help="data directory (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    from .verify import verify_log

    data = DataDir(args.data)
    try:
        writer, key = open_log(data.root)
    except LedgerError as exc:
        print(f"ledgermem demo: {exc}", file=sys.stderr)
        return 2
    if key.created:
        print(f"created signing key {key.path} (mode 0600); keep it outside any copy you hand out")
    print(f"vkey {key.key.vkey}")
    with writer:
        first = writer.size
        writer.append("default", "demo", "messages", "item.added", {"role": "user", "text": "hi"})
        writer.append_batch(
            [
                (
                    "default",
                    "demo",
                    "findings",
                    "item.added",
                    {"claim": "demo.ran", "confidence": 0.9},
                ),
                ("default", "demo", "messages", "item.added", {"role": "assistant", "text": "ok"}),
            ]
        )
    print(f"appended 3 records to {data.log}; read back:")
    for record in LogReader(data.log).records(after=first - 1):
        print(
            f"  seq {record.seq:>4}  {record.type:<13} {record.section:<9} {record.line[:60].decode()}..."
        )
    report = verify_log(data.log, vkey=key.key.vkey)
    print(report.render_text())
    return report.exit_code
