"""JSON responses through orjson, and the record as raw JSON inside them."""

from __future__ import annotations

import orjson
from starlette.responses import Response

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
