"""Connections that cannot pin the service's file descriptors: read deadlines and a budget.

uvicorn reads a request's headers before the app sees anything, with no time limit, and accepts
connections until the process runs out of file descriptors. A client that dribbles header bytes
holds its descriptor for ever, and enough of them make the *writer* the one that gets EMFILE when
it opens its next segment or checkpoint file: a failed write, which stops the memory. So the
server's HTTP protocol (streams/web/library_overrides.py, `http_protocol`) keeps:

- two deadlines per request: the headers must be in within `header_timeout` of the connection
  (or, on a kept-alive one, of the request's first byte), the body within `body_timeout` of the
  headers. A late client gets `TOO_SLOW` (408) and its connection is closed. Only the request is
  timed: a response may stream for as long as it likes (SSE, JSONL, long-poll), and a WebSocket
  leaves the HTTP protocol at its upgrade; such streams are bounded by
  `max_subscribers_per_client` instead.
- bounds on a request's head (issue 30, item 3): its request line and header lines at most
  `MAX_HEAD_BYTES` bytes and `MAX_HEADER_LINES` header lines, counted as they arrive, before
  the parser buffers them (httptools keeps a header's value whole until its line ends, and
  uvicorn every header until the head ends). Past either a client gets `HEAD_TOO_LARGE` or
  `TOO_MANY_HEADERS` (431, with the JSON error body every refusal has) and its connection is
  closed; whatever it sends after is dropped unread.
- `ConnectionBudget`, which derives the most connections from `RLIMIT_NOFILE`: the soft limit
  (raised to the hard one first) less the descriptors already open, less `fd_reserve` kept for
  the log's files and the reader threads, less the listen backlog (connections the event loop
  may accept in one go before it can refuse any). Past it a new connection gets `TOO_MANY` (503)
  and is closed at once.
"""

from __future__ import annotations

import json
import os
import resource
from dataclasses import dataclass

from eventstore.errors import InvalidInput

MIN_CONNECTIONS = 16
MAX_HEAD_BYTES = 64 * 1024  # a request's line and header lines, their CRLFs included
MAX_HEADER_LINES = 100
REFUSED_LINGER = 1.0  # seconds a refused connection stays open for its answer to be read
MAX_BACKLOG = 2048


@dataclass(frozen=True)
class ConnectionBudget:
    fd_limit: int  # RLIMIT_NOFILE's soft limit, after raising it to the hard one
    in_use: int  # descriptors open at start-up
    reserve: int  # kept for the log and the reader threads
    backlog: int  # the listen backlog
    max_connections: int

    @classmethod
    def from_rlimit(cls, reserve: int) -> ConnectionBudget:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass  # keep the soft limit we were given
        in_use = _open_descriptors()
        free = soft - in_use - reserve
        backlog = max(8, min(MAX_BACKLOG, free // 8))
        budget = cls(soft, in_use, reserve, backlog, free - backlog)
        if budget.max_connections < MIN_CONNECTIONS:
            raise InvalidInput(
                f"RLIMIT_NOFILE is {soft} with {in_use} descriptors open and fd_reserve {reserve}: "
                f"room for {budget.max_connections} connections, fewer than {MIN_CONNECTIONS}; "
                "raise it (ulimit -n 4096) or lower fd_reserve"
            )
        return budget

    def describe(self) -> str:
        return (
            f"at most {self.max_connections} (RLIMIT_NOFILE {self.fd_limit}: {self.in_use} open, "
            f"{self.reserve} kept for the log, backlog {self.backlog})"
        )


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: count what is open the slow way
        count = 0
        for fd in range(min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)):
            try:
                os.fstat(fd)
                count += 1
            except OSError:
                pass
        return count


def _plain_response(status: bytes, message: bytes) -> bytes:
    return b"".join(
        [
            b"HTTP/1.1 " + status + b"\r\n",
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(message),
            b"connection: close\r\n\r\n",
            message,
        ]
    )


TOO_MANY = _plain_response(b"503 Service Unavailable", b"too many connections; retry later\n")
TOO_SLOW = _plain_response(b"408 Request Timeout", b"the request took too long to arrive\n")


def _json_error(status: bytes, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return b"".join(
        [
            b"HTTP/1.1 " + status + b"\r\n",
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


HEAD_TOO_LARGE = _json_error(
    b"431 Request Header Fields Too Large",
    "headers_too_large",
    f"a request's line and headers are at most {MAX_HEAD_BYTES} bytes",
)
TOO_MANY_HEADERS = _json_error(
    b"431 Request Header Fields Too Large",
    "headers_too_large",
    f"a request has at most {MAX_HEADER_LINES} header lines",
)
