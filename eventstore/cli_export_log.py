"""`ledgermem export-log --store URL --partition N OUT`: a partition as a spec log directory.

The records as the store (PostgreSQL or Redis) holds them, incrementally
(eventstore/shared/export.py); then
`ledgermem verify OUT --vkey "$(ledgermem vkey --store URL --partition N)"`.
"""

from __future__ import annotations

import argparse
import sys

from .errors import LedgerError
from .stores import open_engine
from .wording import count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", required=True, metavar="URL", help="the store: postgresql://... or redis://..."
    )
    parser.add_argument("--partition", type=int, default=0, metavar="N", help="default 0")
    parser.add_argument("out", metavar="OUT", help="the directory to write (or continue)")


def run(args: argparse.Namespace) -> int:
    try:
        done = open_engine(args.store).export_log(args.partition, args.out)
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
