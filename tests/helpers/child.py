"""A child process whose stdout lines are collected by a thread as they come, for the kill -9
tests: the lines printed before the kill are the acknowledgements to check."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field


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
