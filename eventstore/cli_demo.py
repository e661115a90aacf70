"""`ledgermem demo [--data DIR]`: write a few records, read them back, verify the log offline.

Without `--data` the demo works in a temporary directory, removed afterwards: its records are not
memory records (no session was created), and a service later started on `./ledgermem-data`
would otherwise serve them."""

from __future__ import annotations

import argparse
import sys
import tempfile

from .errors import LedgerError
from .layout import DataDir
from .reader import LogReader
from .store import open_log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        help="data directory to write into and keep (default: a temporary one, removed after)",
    )


def run(args: argparse.Namespace) -> int:
    if args.data is not None:
        return _demo(DataDir(args.data))
    with tempfile.TemporaryDirectory(prefix="ledgermem-demo-") as scratch:
        print(
            f"working in the temporary directory {scratch} (removed at the end; --data keeps one)"
        )
        return _demo(DataDir(scratch))


def _demo(data: DataDir) -> int:
    from .verify import verify_log

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
