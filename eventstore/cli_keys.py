"""`ledgermem vkey [--data DIR]`: print the log's verifier key string, one line."""

from __future__ import annotations

import argparse
import sys

from .errors import LedgerError
from .layout import DataDir
from .store import load_or_create_key

DEFAULT_DATA = "./ledgermem-data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=DEFAULT_DATA, help="data directory (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    try:
        info = load_or_create_key(DataDir(args.data), create=False)
    except LedgerError as exc:
        print(f"ledgermem vkey: {exc}", file=sys.stderr)
        return 2
    print(info.key.vkey)
    return 0
