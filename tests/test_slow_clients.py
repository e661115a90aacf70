"""Slow clients cannot pin the service's file descriptors (issue 13, item 2), against a real
`ledgermem serve`: a request's headers and body must arrive within their bounds, long-lived
streams are not cut by them, and connections stop short of RLIMIT_NOFILE so that the writer
always has descriptors for its segment and checkpoint files."""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import select
import selectors
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
from server import Server
from stream_clients import seq_of, sse_records, ws_records

DRIBBLERS = 200


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port  # type: ignore[return-value]


def dribble(url: str, head: bytes, count: int, seconds: float) -> dict[int, tuple[float, bytes]]:
    """`count` connections that send `head`, then one more byte every 0.25 s for `seconds`.

    Returns, for each connection the server closed, when (seconds after the start) and what it
    answered; connections still open at the end are missing."""
    selector = selectors.DefaultSelector()
    socks = []
    for n in range(count):
        sock = socket.create_connection(address(url), timeout=10)
        sock.sendall(head)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, n)
        socks.append(sock)
    start = time.monotonic()
    closed: dict[int, tuple[float, bytes]] = {}
    received: dict[int, bytes] = {}
    next_byte = start
    try:
        while len(closed) < count and time.monotonic() - start < seconds:
            if time.monotonic() >= next_byte:
                next_byte += 0.25
                for n, sock in enumerate(socks):
                    if n not in closed:
                        with contextlib.suppress(OSError):
                            sock.send(b"x")
            for key, _ in selector.select(0.05):
                n = key.data
                try:
                    data = key.fileobj.recv(4096)  # type: ignore[union-attr]
                except (ConnectionResetError, BrokenPipeError):
                    data = b""
                if data:
                    received[n] = received.get(n, b"") + data
                else:
                    closed[n] = (time.monotonic() - start, received.get(n, b""))
                    selector.unregister(key.fileobj)
    finally:
        for sock in socks:
            sock.close()
        selector.close()
    return closed


def test_clients_dribbling_header_bytes_are_closed_within_the_bound(tmp_path):
    with Server(tmp_path / "data", env={"LEDGERMEM_HEADER_TIMEOUT": "2"}) as server:
        head = b"GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        closed = dribble(server.url, head, DRIBBLERS, seconds=12)
        assert len(closed) == DRIBBLERS, f"{DRIBBLERS - len(closed)} connections still open"
        times = sorted(when for when, _ in closed.values())
        assert times[0] > 1.0, "closed before the header bound"
        assert times[-1] < 2 + 4, f"the last one closed after {times[-1]:.1f} s"
        assert all(answer.startswith(b"HTTP/1.1 408 ") for _, answer in closed.values())
        # The service itself never stopped answering.
        assert httpx.get(server.url + "/v1/sessions", timeout=10).status_code == 200


def test_a_body_dribbled_too_slowly_is_cut_off(tmp_path):
    with Server(tmp_path / "data", env={"LEDGERMEM_BODY_TIMEOUT": "2"}) as server:
        head = (
            b"PUT /v1/sessions/slow HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        )
        closed = dribble(server.url, head, 20, seconds=12)
        assert len(closed) == 20, f"{20 - len(closed)} connections still open"
        assert max(when for when, _ in closed.values()) < 2 + 4
        assert httpx.get(server.url + "/v1/sessions/slow", timeout=10).status_code == 404


def test_long_lived_streams_outlive_both_bounds(tmp_path):
    env = {"LEDGERMEM_HEADER_TIMEOUT": "1", "LEDGERMEM_BODY_TIMEOUT": "1"}
    with Server(tmp_path / "data", env=env) as server:

        async def first(records) -> bytes:
            async for record in records:
                if b'"session":"late"' in record:
                    return record
            raise AssertionError("the stream ended")

        async def main() -> list[bytes]:
            streams = [
                asyncio.create_task(first(sse_records(server.url, after=0))),
                asyncio.create_task(first(ws_records(server.url, after=0))),
            ]
            await asyncio.sleep(3.5)  # well past both bounds
            assert not any(s.done() for s in streams), [s for s in streams if s.done()]
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                (await client.put("/v1/sessions/late", json={})).raise_for_status()
            return await asyncio.wait_for(asyncio.gather(*streams), 10)

        sse, ws = asyncio.run(main())
        assert sse == ws and seq_of(sse) >= 1


def test_with_few_descriptors_idle_sockets_cannot_starve_the_writer(tmp_path):
    """RLIMIT_NOFILE 256 and 400 idle connections: the service refuses the connections past its
    budget, and the writer keeps appending and writing checkpoints."""
    limit = 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1000:
        pytest.skip(f"this test needs 1000 descriptors, RLIMIT_NOFILE is {soft}")
    server = Server(
        tmp_path / "data",
        env={"LEDGERMEM_HEADER_TIMEOUT": "120"},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)),
    ).start()
    idle: list[socket.socket] = []
    try:
        client = httpx.Client(base_url=server.url, timeout=20)  # connected before the flood
        client.put("/v1/sessions/s", json={}).raise_for_status()

        def flood() -> None:
            for _ in range(400):
                try:
                    idle.append(socket.create_connection(address(server.url), timeout=5))
                except OSError:
                    return

        # Appends on the connection opened before, all through the flood and two seconds past
        # it (periodic checkpoints are due meanwhile); the connection never idles long enough
        # for keep-alive to close it.
        flooding = threading.Thread(target=flood)
        flooding.start()
        seqs = []
        until = None
        while until is None or time.monotonic() < until:
            response = client.post(
                "/v1/sessions/s/sections/findings/items", json={"content": f"fact {len(seqs)}"}
            )
            assert response.status_code == 201, response.text
            seqs.append(response.json()["record"]["seq"])
            time.sleep(0.2)
            if until is None and not flooding.is_alive():
                until = time.monotonic() + 2
        flooding.join()
        assert len(idle) == 400
        checkpoint = (tmp_path / "data" / "log" / "checkpoint").read_text().splitlines()
        deadline = time.monotonic() + 10
        while int(checkpoint[1]) <= seqs[-1] and time.monotonic() < deadline:
            time.sleep(0.1)
            checkpoint = (tmp_path / "data" / "log" / "checkpoint").read_text().splitlines()
        assert int(checkpoint[1]) > seqs[-1], "no checkpoint covers the appends"
        line = next(line for line in server.output if line.startswith("connections "))
        budget = int(re.search(r"at most (\d+)", line).group(1))
        assert budget < limit - 64
        readable, _, _ = select.select(idle, [], [], 1)
        refused = 0
        for sock in readable:
            with contextlib.suppress(OSError):
                refused += sock.recv(100).startswith(b"HTTP/1.1 503 ")
        assert refused >= len(idle) - budget, (refused, len(idle), budget)
        client.close()
        for sock in idle:
            sock.close()
        with httpx.Client(base_url=server.url, timeout=20) as again:
            assert again.get("/v1/sessions/s").status_code == 200
        assert server.stop() == 0
    finally:
        for sock in idle:
            sock.close()
        server.kill()
