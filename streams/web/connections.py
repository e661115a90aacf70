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
- `ConnectionBudget`, which derives the most connections from `RLIMIT_NOFILE`: the soft limit
  (raised to the hard one first) less the descriptors already open, less `fd_reserve` kept for
  the log's files and the reader threads, less the listen backlog (connections the event loop
  may accept in one go before it can refuse any). Past it a new connection gets `TOO_MANY` (503)
  and is closed at once.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from eventstore.errors import InvalidInput

MIN_CONNECTIONS = 16
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
