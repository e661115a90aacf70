"""`ledgermem export-log --store URL --partition N OUT`: a partition as a spec log directory.

The rows as the table holds them, incrementally (eventstore/pg/export.py); then
`ledgermem verify OUT --vkey "$(ledgermem vkey --store URL --partition N)"`.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import LedgerError
from ..wording import count
from .export import export_log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", required=True, metavar="URL", help="the store's database")
    parser.add_argument("--partition", type=int, default=0, metavar="N", help="default 0")
    parser.add_argument("out", metavar="OUT", help="the directory to write (or continue)")


def run(args: argparse.Namespace) -> int:
    try:
        done = export_log(args.store, args.partition, args.out)
    except (LedgerError, OSError) as exc:
        print(f"ledgermem export-log: {exc}", file=sys.stderr)
        return 2
    covered = (
        "no checkpoint yet"
        if done.checkpoint_size is None
        else (f"checkpoint {done.checkpoint_size}")
    )
    print(
        f"partition {done.partition}: {count(done.size - done.first, 'new record')} copied to "
        f"{args.out} ({done.size} in all, {covered}, {count(done.redactions, 'redaction')} this run)"
    )
    return 0
