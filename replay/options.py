"""Arguments the offline commands share: filters, seq and time ranges, and quiet progress bars."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eventstore.errors import InvalidInput
from eventstore.filters import RecordFilter
from eventstore.reader import LogReader
from sections.history import History


def add_filters(parser: argparse.ArgumentParser) -> None:
    for name in ("tenant", "session", "section", "type"):
        parser.add_argument(
            f"--{name}",
            action="append",
            metavar=name.upper(),
            help=f"keep records of this {name} (repeatable)",
        )


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
    seq has its hash (`read_snapshot`), else it is ignored with a warning."""
    reader = open_reader(log_dir)
    snapshots = Path(log_dir).parent / "snapshots"
    use = use_snapshots and snapshots.is_dir()
    return History(reader, snapshots if use else None, leave_checkpoints=False)


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
