"""The `ledgermem` command as a real subprocess, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ledgermem(
    *args: object,
    stdin: bytes | str | None = None,
    text: bool = False,
    cwd: Path | None = None,
    env: dict | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """Run `python -m ledgermem_cli ARGS` with this checkout on the path; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "ledgermem_cli", *map(str, args)],
        capture_output=True,
        input=stdin,
        text=text,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=timeout,
    )
