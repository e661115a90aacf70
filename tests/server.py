"""A real `ledgermem serve` subprocess on 127.0.0.1 with an ephemeral port, for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).parent.parent


class Server:
    def __init__(
        self, data_dir: Path, *args: str, env: dict | None = None, preexec_fn=None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.args = args
        self.env = env or {}
        self.preexec_fn = preexec_fn  # e.g. to lower the server's RLIMIT_NOFILE
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.output: list[str] = []

    def start(self, timeout: float = 30) -> Server:
        command = [
            sys.executable,
            "-m",
            "ledgermem_cli",
            "serve",
            "--data",
            str(self.data_dir),
            "--port",
            "0",
            *self.args,
        ]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **self.env},
            preexec_fn=self.preexec_fn,
        )
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.output.append(line.rstrip("\n"))
                if line.startswith("listening on "):
                    self.url = line.split()[-1]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or not self.url:
            self.kill()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.output))
        return self

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM: graceful shutdown; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Server:
        # `with Server(...).start() as s:` started it already: a second start would leave the
        # first process running, unowned, after the test.
        if self.proc is not None and self.proc.poll() is None:
            return self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
