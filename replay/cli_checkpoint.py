"""`ledgermem checkpoint LOGDIR [--vkey V]`: print the log's newest signed checkpoint.

That is the `checkpoint` file; when it is missing, the note embedded in the newest
`segment.open`, and stderr says so. With `--vkey` the note's signature is checked first.
"""

from __future__ import annotations

import argparse
import sys

from eventstore import layout
from eventstore.checkpoint import parse_checkpoint

from .bundle import newest_checkpoint
from .cli_verify_bundle import read_vkey
from .options import open_reader


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR", help="the directory holding seg-*.jsonl")
    parser.add_argument(
        "--vkey", metavar="VKEY", help="check the signature with this key (or @FILE) first"
    )


def run(args: argparse.Namespace) -> int:
    reader = open_reader(args.logdir)
    text, source = newest_checkpoint(reader)
    if args.vkey is not None:
        parse_checkpoint(text, read_vkey(args.vkey))  # CheckpointError: one line, exit 2
    if source != layout.CHECKPOINT:
        print(
            f"ledgermem checkpoint: {args.logdir} has no checkpoint file; printing the one "
            f"embedded in the {source}",
            file=sys.stderr,
        )
    sys.stdout.write(text)
    return 0
