"""`ledgermem diff LOGDIR --from A --to B [--session S]`: what changed in memory between two points."""

from __future__ import annotations

import argparse
import sys

import orjson

from eventstore.errors import InvalidInput

from .cli_state import resolve_at
from .diff import diff
from .options import add_snapshot_option, open_history


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR")
    parser.add_argument(
        "--from", dest="start", required=True, metavar="A", help="a seq, a time or `head`"
    )
    parser.add_argument(
        "--to", dest="end", default="head", metavar="B", help="a seq, a time or `head` (default)"
    )
    parser.add_argument("--tenant", help="only this tenant")
    parser.add_argument("--session", help="only this session")
    add_snapshot_option(parser)


def run(args: argparse.Namespace) -> int:
    history = open_history(args.logdir, not args.no_snapshots)
    start = resolve_at(history, args.start, False)
    end = resolve_at(history, args.end, False)
    if end < start:
        raise InvalidInput(f"--to ({end}) is before --from ({start})")

    def wanted(tenant: str, session: str) -> bool:
        return (args.tenant is None or tenant == args.tenant) and (
            args.session is None or session == args.session
        )

    before, after = history.states_at([start, end])  # one fold
    window = history.reader.records(after=start, until=end + 1)
    report = diff(before, after, window, history.payload_of, wanted)
    out = {"from": start, "to": end, "sessions": report}
    sys.stdout.buffer.write(
        orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )
    return 0
