"""`ledgermem state LOGDIR --at SEQ|TIME [--session S] [--section X] [--context]`: the memory
projection at that point, as JSON, rebuilt from the files alone.

`--at TIME` (ISO-8601 or µs): `ts` is the writer's clock and can go backwards, so the state at a
time is the state after the longest prefix of the log whose records all carry `ts` <= TIME, i.e.
what the log held when its clock first passed TIME (docs/replay.md).
"""

from __future__ import annotations

import argparse
import sys

import orjson

from eventstore.errors import InvalidInput
from eventstore.timestamps import parse_time
from sections.runtime.history import History

from .cli_replay import envelope_of
from .options import HEAD, add_snapshot_option, open_history


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR")
    parser.add_argument(
        "--at",
        default=HEAD,
        metavar="SEQ|TIME|head",
        help="a seq, a time (ISO-8601, or µs with --time), or `head` (the default)",
    )
    parser.add_argument(
        "--time", action="store_true", help="read an all-digit --at as µs since the epoch"
    )
    parser.add_argument("--tenant", help="only this tenant's sessions")
    parser.add_argument("--session", help="only this session")
    parser.add_argument("--section", help="only this section (with --session)")
    parser.add_argument(
        "--context",
        action="store_true",
        help="the context exactly as last assembled (with --session)",
    )
    add_snapshot_option(parser)


def resolve_at(history: History, at: str, as_time: bool) -> int:
    head = history.reader.head()
    if at.strip().lower() == HEAD:
        return head
    seq = int(at) if at.isdigit() and not as_time else history.seq_at_time(parse_time(at))
    if not -1 <= seq <= head:
        raise InvalidInput(f"seq {seq} is beyond the log's head {head}")
    return seq


def run(args: argparse.Namespace) -> int:
    history = open_history(args.logdir, not args.no_snapshots)
    seq = resolve_at(history, args.at, args.time)
    if (args.section or args.context) and not args.session:
        raise InvalidInput("--section and --context need --session")
    if args.context:
        return _context(history, seq, args)
    state = history.state_at(seq)
    sessions = [
        s.to_json()
        for (tenant, sid), s in sorted(state.sessions.items())
        if (args.tenant is None or tenant == args.tenant)
        and (args.session is None or sid == args.session)
    ]
    if args.session and not sessions:
        raise InvalidInput(f"session {args.session!r} did not exist at seq {seq}")
    if args.section:
        for session in sessions:
            if args.section not in session["sections"]:
                raise InvalidInput(
                    f"session {session['session']!r} had no section {args.section!r} at seq {seq}"
                )
            session["sections"] = {args.section: session["sections"][args.section]}
    sys.stdout.buffer.write(
        orjson.dumps({"at": seq, "sessions": sessions}, option=orjson.OPT_INDENT_2) + b"\n"
    )
    return 0


def _context(history: History, seq: int, args: argparse.Namespace) -> int:
    last = None
    for at, line in history.reader.lines(until=seq + 1):  # the envelope alone: no Record per line
        record = envelope_of(line)
        if (
            record.type == "context.assembled"
            and record.session == args.session
            and (args.tenant is None or record.tenant == args.tenant)
        ):
            last = at
    if last is None:
        raise InvalidInput(f"session {args.session!r} assembled no context at or before seq {seq}")
    messages = history.context_at(last)
    out = {"at": seq, "context_seq": last, "messages": messages}
    sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    return 0
