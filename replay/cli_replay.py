"""`ledgermem replay LOGDIR [filters]`: the records as JSONL, exactly the file lines, for `jq`.

`--pretty` prints one readable line per record instead; `--follow` keeps tailing a log that a
live writer is appending to (only complete lines are ever printed).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

import orjson

from eventstore.record import Record
from eventstore.timestamps import parse_time

from .options import add_filters, add_seq_range, open_reader, progress, record_filter, seq_range


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR")
    add_seq_range(parser)
    parser.add_argument("--since", metavar="TIME", help="records with ts >= TIME (µs or ISO-8601)")
    parser.add_argument("--until", metavar="TIME", help="records with ts <= TIME (µs or ISO-8601)")
    add_filters(parser)
    parser.add_argument("--follow", action="store_true", help="keep tailing the log as it grows")
    parser.add_argument("--pretty", action="store_true", help="one readable line per record")


def pretty(record: Record) -> str:
    when = datetime.fromtimestamp(record.ts / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    body = (
        orjson.dumps(record.payload).decode()
        if record.has_payload
        else f"(redacted by {record.redacted})"
    )
    if len(body) > 100:
        body = body[:97] + "..."
    who = record.tenant if record.is_control else f"{record.tenant}/{record.session}"
    return f"{record.seq:>8}  {when}  {who:<28} {record.section:<14} {record.type:<18} {body}"


class _Envelope:
    __slots__ = ("ts", "tenant", "session", "section", "type")
    ts: int
    tenant: str
    session: str
    section: str
    type: str


def envelope_of(line: bytes) -> _Envelope:
    """The fields filters look at, parsed from the start of the line only (they precede "prev").

    Falls back to the whole line for one laid out otherwise (a non-canonical copy of a log)."""
    cut = line.find(b',"prev":')
    obj = orjson.loads(line[:cut] + b"}") if cut > 0 else orjson.loads(line)
    envelope = _Envelope()
    envelope.ts, envelope.tenant, envelope.session = obj["ts"], obj["tenant"], obj["session"]
    envelope.section, envelope.type = obj["section"], obj["type"]
    return envelope


def run(args: argparse.Namespace) -> int:
    reader = open_reader(args.logdir)
    where = record_filter(args)
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    plain = where.is_empty and since is None and until is None and not args.pretty
    out = sys.stdout.buffer
    after, end = seq_range(args, reader.head())
    if args.follow:
        for record in reader.follow(after, where, stop=None):
            if end is not None and record.seq >= end:
                return 0
            if (since is None or record.ts >= since) and (until is None or record.ts <= until):
                out.write(pretty(record).encode() + b"\n" if args.pretty else record.line + b"\n")
                out.flush()
        return 0
    total = (end if end is not None else reader.head() + 1) - (after + 1)
    with progress(total, "replay") as advance:
        if plain:  # the file lines, untouched
            for _, line in reader.lines(after, end):
                out.write(line + b"\n")
                advance()
            return 0
        for _, line in reader.lines(after, end):
            advance()
            envelope = envelope_of(line)
            if not where.matches(envelope):
                continue
            if (since is not None and envelope.ts < since) or (
                until is not None and envelope.ts > until
            ):
                continue
            out.write(
                pretty(Record.from_line(line)).encode() + b"\n" if args.pretty else line + b"\n"
            )
    return 0
