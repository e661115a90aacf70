"""Which failures of the I/O layers are worth another try, shared by both clients.

A broken or refused connection, a timeout, a WebSocket closed with any code but those of
`FINAL_CLOSE_CODES` (a graceful shutdown closes with 1001): the call (whose retry is safe,
retry.py) or the subscription (which resumes at its cursor) tries again. A refusal with a status is an `ApiError` and is retried only when its status is one the
policy names (502, 503 and 504 by default). A failed record check (`ChainBroken`) is never retried.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from streams.client.errors import ApiError, ClientError, error_for

# InvalidHandshake covers a service that died mid-handshake; InvalidStatus (a subclass: the
# service answered the upgrade with an HTTP status) is turned into an ApiError first.
# A WebSocket closed cleanly (1000, 1001: the service shutting down) also counts: one that
# closes while the first frame is being sent raises ConnectionClosedOK from `send`.
TRANSIENT: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    ConnectionClosed,
    InvalidHandshake,
    OSError,
    TimeoutError,
    EOFError,
)

# WebSocket close codes after which resuming would be refused the same way again: a bad
# subscription frame or a filter the token may not read (1008), data the service cannot take.
FINAL_CLOSE_CODES = frozenset({1003, 1007, 1008})


class StreamClosed(ClientError):
    """The service closed the WebSocket with a code that resuming would get again."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"the service closed the stream ({code}): {reason}")
        self.code = code
        self.reason = reason


def final_close(exc: ConnectionClosed | None, code: int | None, reason: str | None) -> None:
    """Raise `StreamClosed` when the WebSocket's close (from the service) is one that resuming
    would get again; a close with another code, or none, is left to the retry loop."""
    if exc is not None and exc.rcvd is not None:
        code, reason = exc.rcvd.code, exc.rcvd.reason
    if code in FINAL_CLOSE_CODES:
        raise StreamClosed(code, reason or "") from exc


def lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def handshake_error(exc: InvalidStatus) -> ApiError:
    """A refused WebSocket handshake as the typed error of its status and JSON body."""
    response = exc.response
    return error_for(
        response.status_code, lower_headers(response.headers), bytes(response.body or b"")
    )
