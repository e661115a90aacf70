"""The REST routes served by a real uvicorn, in a thread of the test process, over a `Memory` the
test itself holds: so a test can drive one memory through its sync API, its async API and HTTP,
and check the same invariants whichever way a command came in."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette

from sections.runtime.memory import Memory
from streams.routes import api, capture_api, facts_api, search_api
from streams.seeds import agentops_api
from streams.server.service import Service
from streams.server.settings import Settings
from streams.web.errors import EXCEPTION_HANDLERS


class ServiceOverMemory(Service):
    """The real `Service`, except that the memory is the test's: it neither opens nor closes it
    (the test may reopen it; assign the new one to `memory`). No hub, no background verifier."""

    def __init__(self, memory: Memory) -> None:
        super().__init__(Settings(data=str(memory.data.root)))
        self.memory = memory

    async def startup(self) -> None:
        self.closing = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.accepting = self.ready = True

    async def shutdown(self) -> None:
        self.accepting = self.ready = False


class LiveApi:
    def __init__(self, memory: Memory) -> None:
        self.service = ServiceOverMemory(memory)

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette):
            await self.service.startup()
            yield
            await self.service.shutdown()

        app = Starlette(
            routes=api.routes(self.service)
            + search_api.routes(self.service)
            + facts_api.routes(self.service)
            + agentops_api.routes(self.service)
            + capture_api.routes(self.service),
            exception_handlers=EXCEPTION_HANDLERS,
            lifespan=lifespan,
        )
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> LiveApi:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the in-process API server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
