"""`ledgermem vkey [--data DIR]`: print the log's verifier key string, one line.

With `--store URL [--partition N]`: the vkey a shared store recorded for partition N (its log
signs under `<origin>/p<N>`), read from the store, so an auditor needs no replica's files.
"""

from __future__ import annotations

import argparse
import sys

from .errors import LedgerError
from .layout import DataDir
from .store import load_or_create_key

DEFAULT_DATA = "./ledgermem-data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=DEFAULT_DATA, help="data directory (default %(default)s)")
    parser.add_argument("--store", metavar="URL", help="a shared store's database instead")
    parser.add_argument("--partition", type=int, default=0, metavar="N", help="with --store")


def run(args: argparse.Namespace) -> int:
    try:
        if args.store is not None:
            from .stores import open_engine

            vkey = open_engine(args.store).store_vkey(args.partition)
        else:
            vkey = str(load_or_create_key(DataDir(args.data), create=False).key.vkey)
    except LedgerError as exc:
        print(f"ledgermem vkey: {exc}", file=sys.stderr)
        return 2
    print(vkey)
    return 0
