"""A request's head is bounded and its host is the service's (issue 30: item 3 and the `Host`
check), against a real `ledgermem serve` over raw sockets: a head of several MiB, or with too
many header lines, is refused with 431 before the server buffers it, and an empty `Host`, two
`Host` lines and an absolute-form target naming another host are forged hosts (421)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from server import Server

MIB = 1024 * 1024


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port  # type: ignore[return-value]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def exchange(url: str, request: bytes, timeout: float = 30, until_close: bool = False) -> bytes:
    """Send `request` (from a thread, so a server that stops reading cannot block us) and read
    the answer until the server closes the connection or `timeout`."""
    sock = socket.create_connection(address(url), timeout=timeout)

    def send() -> None:
        with contextlib.suppress(OSError):  # refused part-way: the answer is what counts
            sock.sendall(request)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
            if (
                not until_close
                and b"\r\n\r\n" in answer
                and b"connection: close" not in answer.lower()
            ):
                head, _, body = answer.partition(b"\r\n\r\n")
                length = [
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                ]
                if length and len(body) >= length[0]:
                    break
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        sock.close()
        sender.join(5)
    return answer


def status_and_error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body).get("error", {}) if body.startswith(b"{") else {}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("heads") / "data") as running:
        yield running


def test_a_head_of_several_mib_is_refused_quickly_without_being_buffered(server):
    host = address(server.url)[0].encode()
    before = rss_kib(server.proc.pid)
    start = time.monotonic()
    answers: list[bytes] = []

    def one() -> None:
        request = b"GET /v1/sessions HTTP/1.1\r\nHost: " + host + b"\r\nX-Big: " + b"a" * (8 * MIB)
        answers.append(exchange(server.url, request + b"\r\n\r\n"))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    elapsed = time.monotonic() - start
    grown_mib = (rss_kib(server.proc.pid) - before) / 1024
    assert len(answers) == 8
    for answer in answers:
        status, error = status_and_error(answer)
        assert status == 431, answer[:200]
        assert error["code"] == "headers_too_large"
    assert elapsed < 10, f"{elapsed:.1f} s"
    # Eight heads of 8 MiB held whole would be 64 MiB and more; refused at 64 KiB, a few.
    assert grown_mib < 16, f"the server grew by {grown_mib:.0f} MiB"
    # A head within the bound is still served.
    ok = httpx.get(server.url + "/v1/sessions", headers={"X-Big": "a" * 30000}, timeout=10)
    assert ok.status_code == 200


def test_a_long_request_line_is_refused(server):
    host = address(server.url)[0].encode()
    target = b"/v1/sessions?q=" + b"a" * (4 * MIB)
    answer = exchange(server.url, b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    assert status_and_error(answer)[0] == 431


def test_too_many_header_lines_are_refused(server):
    host = address(server.url)[0].encode()
    lines = b"".join(b"X-H%d: v\r\n" % n for n in range(1000))
    answer = exchange(
        server.url, b"GET /v1/sessions HTTP/1.1\r\nHost: " + host + b"\r\n" + lines + b"\r\n"
    )
    status, error = status_and_error(answer)
    assert status == 431, answer[:200]
    assert error["code"] == "headers_too_large"
    # The refusal appended nothing and the service goes on.
    assert httpx.get(server.url + "/v1/sessions", timeout=10).status_code == 200


def raw_get(server: Server, head: bytes) -> tuple[int, dict]:
    return status_and_error(exchange(server.url, head + b"Connection: close\r\n\r\n"))


def test_an_empty_host_is_a_forged_host(server):
    status, error = raw_get(server, b"GET /v1/sessions HTTP/1.1\r\nHost: \r\n")
    assert (status, error.get("code")) == (421, "unknown_host")


def test_two_host_lines_are_a_forged_host(server):
    host = address(server.url)[0].encode()
    for first, last in ((b"evil.example", host), (host, b"evil.example"), (host, host)):
        head = b"GET /v1/sessions HTTP/1.1\r\nHost: " + first + b"\r\nHost: " + last + b"\r\n"
        status, error = raw_get(server, head)
        assert (status, error.get("code")) == (421, "unknown_host"), (first, last)


def test_an_absolute_form_target_names_the_host(server):
    host, port = address(server.url)
    own = b"%s:%d" % (host.encode(), port)
    forged = b"GET http://evil.example/v1/sessions HTTP/1.1\r\nHost: " + own + b"\r\n"
    status, error = raw_get(server, forged)
    assert (status, error.get("code")) == (421, "unknown_host")
    # Absolute form naming the service itself is still served (RFC 9112, 3.2.2).
    absolute = b"GET http://" + own + b"/v1/sessions HTTP/1.1\r\nHost: " + own + b"\r\n"
    assert raw_get(server, absolute)[0] == 200
    # As is the ordinary origin form.
    assert raw_get(server, b"GET /v1/sessions HTTP/1.1\r\nHost: " + own + b"\r\n")[0] == 200


def test_the_bound_is_per_head_not_per_connection(server):
    """Pipelined requests whose heads together are far past the bound, and a body past it sent
    with its head in one write, are all served: only one head is counted at a time."""
    host = address(server.url)[0].encode()
    one = b"GET /v1/sessions HTTP/1.1\r\nHost: " + host + b"\r\nX-Pad: " + b"p" * 4000 + b"\r\n\r\n"
    last = one.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    answer = exchange(server.url, one * 49 + last, until_close=True)
    assert answer.count(b"HTTP/1.1 200 OK") == 50
    body = b'{"metadata": {"pad": "' + b"b" * 200_000 + b'"}}'
    put = (
        b"PUT /v1/sessions/big HTTP/1.1\r\nHost: "
        + host
        + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    )
    status = status_and_error(exchange(server.url, put + body))[0]
    assert status in (201, 400), status  # served (or judged by its content), never 431
