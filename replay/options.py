"""Arguments the offline commands share: filters, seq and time ranges, and quiet progress bars."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from eventstore import layout
from eventstore.errors import InvalidInput
from eventstore.filters import RecordFilter
from eventstore.reader import LogReader
from sections.runtime.history import History
from sections.runtime.snapshot import snapshot_paths


def add_filters(parser: argparse.ArgumentParser) -> None:
    for name in ("tenant", "session", "section", "type"):
        parser.add_argument(
            f"--{name}",
            action="append",
            metavar=name.upper(),
            help=f"keep records of this {name} (repeatable)",
        )


# The range vocabulary of every offline command (docs/replay.md, "Points and ranges"): a point is
# a seq, a time or `head`; `--at P` is one point, `--from A --to B` a range with both ends
# included, `--after N` starts after seq N as a stream cursor does. Old spellings stay aliases.
HEAD = "head"


def add_seq_range(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        "--from-seq",
        dest="from_seq",
        metavar="A",
        help="first seq (default 0)",
    )
    parser.add_argument(
        "--to", "--to-seq", dest="to_seq", metavar="B", help="last seq, inclusive, or `head`"
    )
    parser.add_argument(
        "--after", metavar="N", help="start after seq N, as a stream cursor (= --from N+1)"
    )


def seq_of(text: str, flag: str, head: int) -> int:
    """A seq given on the command line: digits, -1 (before the first record), or `head`."""
    if text.strip().lower() == HEAD:
        return head
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(f"{flag} {text!r} is not a seq or `head`") from None


def seq_range(args: argparse.Namespace, head: int) -> tuple[int, int | None]:
    """(the seq the range starts after, the seq it stops before or None) from the range flags."""
    if args.from_seq is not None and args.after is not None:
        raise InvalidInput("give --from or --after, not both")
    if args.after is not None:
        after = seq_of(args.after, "--after", head)
    elif args.from_seq is not None:
        after = seq_of(args.from_seq, "--from", head) - 1
    else:
        after = -1
    end = None if args.to_seq is None else seq_of(args.to_seq, "--to", head) + 1
    return max(after, -1), end


def record_filter(args: argparse.Namespace) -> RecordFilter:
    return RecordFilter.of(args.tenant, args.session, args.section, args.type)


def open_reader(log_dir: str) -> LogReader:
    path = Path(log_dir)
    if not path.is_dir():
        raise InvalidInput(f"{log_dir}: no such log directory")
    return LogReader(path)


def add_snapshot_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-snapshots",
        action="store_true",
        help="fold the log from seq 0; by default a valid snapshot of the data directory the log "
        "is in (LOGDIR/../snapshots) is the starting point",
    )


def open_history(log_dir: str, use_snapshots: bool = True) -> History:
    """The log's history for one question: no time-travel checkpoints left behind, and the
    snapshots of the data directory LOGDIR is in (`DATA/log` beside `DATA/snapshots`) as
    starting points. A snapshot is used only if it is for this log and the log's record at its
    seq has its hash (`read_snapshot`), else it is ignored with a warning; and only if no
    redaction after it erased what it may hold (an erase purges the snapshots, but a crash
    between its redaction and the purge leaves them: `erasure_floor`)."""
    reader = open_reader(log_dir)
    snapshots = Path(log_dir).parent / "snapshots"
    seqs = [int(p.stem[5:]) for p in snapshot_paths(snapshots) if p.stem[5:].isdigit()]
    if not (use_snapshots and seqs):
        return History(reader, leave_checkpoints=False)
    floor = erasure_floor(reader, min(seqs))
    return History(reader, snapshots, leave_checkpoints=False, snapshot_floor=floor)


# The envelope of a `redaction` record, as the writer lays it out.
REDACTION_MARK = b'"tenant":"_log","session":"_log","section":"_log","type":"redaction"'
# `session.erased@<first>..<last>`: sessions erased together by retention (sections/specs/erase_flow.py)
_ERASE_REQUEST = re.compile(
    r"(?:items|session)\.erased@(\d+)(?:\.\.\d+)?"
)  # sections/runtime/memory.py


def erased_from(redaction: dict) -> int:
    """The first seq whose projection state no longer holds what this redaction erased."""
    match = _ERASE_REQUEST.fullmatch(redaction["payload"].get("request") or "")
    if match is not None and int(match.group(1)) < redaction["seq"]:
        return int(match.group(1))
    return redaction["seq"] + 1


def erasure_floor(reader: LogReader, after: int) -> int:
    """The first seq a snapshot may be taken at and hold nothing that the redactions after
    `after` erased (0 when there are none). Searches the segments' bytes for the redaction
    envelope and parses only the lines that hold it."""
    floor = 0
    for n, path in layout.list_segments(reader.log_dir):
        if (n + 1) << reader.seg_bits <= after + 1:
            continue  # every record of this segment is at or before `after`
        data = path.read_bytes()
        at = data.find(REDACTION_MARK)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            if end < 0:
                break  # a line being appended
            record = orjson.loads(data[start:end])
            if record.get("type") == "redaction" and "payload" in record and record["seq"] > after:
                floor = max(floor, erased_from(record))
            at = data.find(REDACTION_MARK, end)
    return floor


@contextmanager
def progress(total: int, label: str) -> Iterator:
    """A rich progress bar on a terminal; nothing when stderr is piped. Yields advance(n)."""
    if not sys.stderr.isatty() or total < 50_000:
        yield lambda n=1: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)
