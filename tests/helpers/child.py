"""A child process whose stdout lines are collected by a thread as they come, for the kill -9
tests: the lines printed before the kill are the acknowledgements to check; and the next line
of a child's pipe, or a failure naming what did not come (`readline_within`)."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from typing import IO, AnyStr

import pytest


@dataclass
class Child:
    proc: subprocess.Popen
    lines: list[bytes] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)  # a "ready ..." line came
    reader: threading.Thread | None = None


def start_child(argv: list[str], env: dict | None = None) -> Child:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    child = Child(proc)

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            child.lines.append(line)
            if line.startswith(b"ready "):
                child.ready.set()

    child.reader = threading.Thread(target=pump)
    child.reader.start()
    return child


def readline_within(stream: IO[AnyStr] | None, seconds: float, what: str) -> AnyStr:
    """The next line of a child's `stream`; the test fails, naming `what` it waited for, when
    none comes within `seconds` (a hung child would otherwise stall the run until the suite's
    timeout). The line is read on a thread, which a killed child's closed pipe ends."""
    assert stream is not None, "start the child with this stream piped"
    lines: list[AnyStr] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    if not lines:
        pytest.fail(f"no line from {what} within {seconds:g} s")
    return lines[0]
