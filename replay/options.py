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
