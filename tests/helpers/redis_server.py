"""A `redis-server` of the test's own: Debian's binary on an ephemeral port of 127.0.0.1 with
its own data directory, run as a shared store must be (`appendonly yes`, `appendfsync always`,
no RDB snapshots). Never the machine's Redis on 6379: it keeps nothing on disk.

`RedisServer.kill9()` and `start()` again restart it from its append-only file, as a crash
would. Without the binary (or redis-py) the tests skip with the reason, except under CI, where
they fail: .ci/run installs the `redis-server` package.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"


def server_missing() -> str | None:
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py is not installed: pip install -e '.[test]'"
    if not os.path.exists(BINARY):
        return "no redis-server binary: apt-get install redis-server"
    return None


def require_redis() -> None:
    reason = server_missing()
    if reason is not None:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, data: Path, *, durable: bool = True, extra: tuple[str, ...] = ()) -> None:
        self.data = data
        self.extra = extra
        self.data.mkdir(parents=True, exist_ok=True)
        self.durable = durable
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        fsync = ["--appendonly", "yes", "--appendfsync", "always"]
        if not self.durable:
            fsync = ["--appendonly", "no"]
        args = [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data)]
        args += [*fsync, "--save", "", "--daemonize", "no", "--protected-mode", "yes"]
        args += list(self.extra)
        with open(self.data / "server.log", "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import redis

        deadline = time.monotonic() + 20
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                log = (self.data / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited: {log}")
            try:
                client = redis.Redis(port=self.port, socket_connect_timeout=1)
                client.ping()
                # Still loading the AOF after a restart answers LOADING on other commands.
                if client.info("persistence").get("loading", 0) == 0:
                    client.close()
                    return
                client.close()
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not become ready in 20 s")
            time.sleep(0.02)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    require_redis()
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url
