"""JSON responses through orjson, and the record as raw JSON inside them; `send_json` answers a
lean (raw ASGI) route without a `Response` object."""

from __future__ import annotations

import orjson
from starlette.responses import Response
from starlette.types import Send

from eventstore.record import Record


class RawJSON:
    """Bytes that are already JSON, spliced into a response without re-encoding."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _default(value: object) -> object:
    if isinstance(value, RawJSON):
        return orjson.Fragment(value.data)
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(content: object) -> bytes:
    return orjson.dumps(content, default=_default)


def json_response(content: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(dumps(content), status, headers, media_type="application/json")


def record_json(record: Record) -> RawJSON:
    """The record exactly as its line in the segment file: a client can check `h` itself."""
    return RawJSON(record.line)


JSON_CONTENT_TYPE = (b"content-type", b"application/json")


async def send_json(
    send: Send, body: bytes, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """`json_response(...)` sent straight as its two ASGI messages, for the lean routes: the same
    status, headers (the given ones, then content-length and content-type, in Starlette's order)
    and body, without building a `Response`."""
    raw = [*headers] if headers else []
    raw.append((b"content-length", b"%d" % len(body)))
    raw.append(JSON_CONTENT_TYPE)
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
