"""The real app (streams/web/app.py `create_app`) on uvicorn in a thread of the test process, so a
test can look into the service (the hub, the spans it exports) while real clients talk to it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn

from streams.server.service import Service
from streams.server.settings import Settings
from streams.web.app import create_app


class InProcessServer:
    def __init__(
        self, data: Path, wrap: Callable[[Service, object], object] | None = None, **settings
    ) -> None:
        """`wrap(service, app)` may set the service up and return the app to serve (e.g. the
        app under a tracing middleware)."""
        self.settings = Settings(data=str(data), unsafe_no_fsync=True, **settings)
        self.service = Service(self.settings)
        app = create_app(self.settings, self.service)
        if wrap is not None:
            app = wrap(self.service, app)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    def __enter__(self) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "no server"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.service.begin_shutdown_threadsafe()
        self.server.should_exit = True
        self.thread.join(30)
