"""A request body read, size-limited, parsed once (with orjson when it can), then given to its model.

`read_json` reads a Starlette `Request`'s body; `read_body` is the same size rules without one,
straight from the ASGI `receive` (the lean item POST, and the leader-forwarding middleware for
the bodies it forwards): the declared length checked against the limit before anything is
read, then the running total. `parse_model` hands the parsed object to the pydantic model that
documents the body (`parse_fields` to its TypedDict form, for the hot item POST); what the model
refuses is answered by streams/web/errors.py `invalid_input`.

`parse_object` gives exactly what `eventstore.jcs.loads_strict` gives (the same value, or the
same error), faster: orjson parses the bytes, and one walk over the result confirms that
`loads_strict` would have accepted them unchanged. Anything the walk cannot vouch for goes to
`loads_strict` itself, so every refusal is still its refusal, with its message:

- duplicate object keys, which orjson silently merges (last wins): every member of an object in
  the text has exactly one `:` outside strings, and a `:` byte appears nowhere else but inside
  strings, so when the text holds no `\\u003a` escape, "colons in the text minus colons in the
  parsed strings" equals the number of members parsed exactly when no key was dropped;
- integers beyond ±(2**53-1) (refused), and integral floats of 2**53 or more (orjson turns
  integers beyond 64 bits into floats, which would pass as such);
- nesting beyond `MAX_DEPTH`;
- everything orjson refuses (NaN and Infinity tokens, lone surrogates, a byte order mark, text
  that is not UTF-8, nesting beyond its own limit).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope

from eventstore.jcs import MAX_DEPTH, MAX_SAFE_INTEGER, loads_strict
from streams.apidoc.models import as_typed_dict
from streams.web.errors import ApiError, invalid_input

M = TypeVar("M", bound=BaseModel)

_TWO_53 = float(2**53)


def declared_length(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value  # the first, as Headers.get
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole body, refused with 413 beyond `limit` bytes (declared or sent); 400
    `client_gone` when the client leaves before it is in (an answer no one will read)."""
    declared = declared_length(scope)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            413, "body_too_large", f"the body is {int(declared)} bytes; the limit is {limit}"
        )
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body = message.get("body", b"")  # the usual case: the whole body in one message
        if len(body) > limit:
            raise ApiError(413, "body_too_large", f"the body exceeds the limit of {limit} bytes")
        return body
    chunks, size = [], 0
    while True:
        if message["type"] == "http.disconnect":
            raise ApiError(400, "client_gone", "the client went away while sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()


async def read_json(request: Request, limit: int, required: bool = True) -> dict:
    """The request body as a JSON object: size-limited, strictly parsed (no duplicate keys).
    Without `required`, no body at all is `{}`: the model's defaults."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    request.state.body_bytes = size
    if not body.strip():
        if required:
            raise ApiError(400, "invalid_input", "a JSON object body is required")
        if body:  # no body is zero bytes; blanks are no JSON text
            raise ApiError(400, "invalid_input", "a blank body: send a JSON object, or no body")
        return {}
    return json_object(body)


def json_object(body: bytes) -> dict:
    value = parse_object(body)  # loads_strict's answer, through orjson when it is the same
    if type(value) is not dict:
        raise ApiError(400, "invalid_input", "the body must be a JSON object")
    return value


def parse_model(model: type[M], value: dict) -> M:
    """`value`, a body's JSON object, as the model that documents it: what the handler is given."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise invalid_input(exc, model) from None


def parse_fields(model: type[BaseModel], value: dict) -> dict:
    """`value` as `model` parses it, given as the plain dict of its fields (the model's TypedDict
    form, streams/apidoc/models.py `as_typed_dict`): for a core that takes dicts, on a hot path."""
    try:
        return _plain_validator(model)(value)
    except ValidationError as exc:
        raise invalid_input(exc, model) from None


@functools.cache
def _plain_validator(model: type[BaseModel]) -> Callable[[object], dict]:
    # the adapter's validator itself: without the adapter's own Python call around it
    return TypeAdapter(as_typed_dict(model)).validator.validate_python


def parse_object(body: bytes) -> object:
    """`loads_strict(body)`, through orjson when the result shows it is the same."""
    if b"\\u003" not in body:  # an escaped `:` (\u003a) would upset the colon count
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            counts = [0, 0]  # members, colons inside parsed strings
            if _clean(value, MAX_DEPTH, counts) and body.count(b":") - counts[1] == counts[0]:
                return value
    return loads_strict(body)


def _clean(value: object, depth_left: int, counts: list[int]) -> bool:
    """Whether `loads_strict` accepts `value` as it is (see the module's docstring); counts the
    object members and the colons in strings along the way."""
    if type(value) is dict:
        if depth_left == 0:
            return False
        counts[0] += len(value)
        for key, item in value.items():  # keys and string values in place (one call fewer)
            if ":" in key:
                counts[1] += key.count(":")
            if type(item) is str:
                if ":" in item:
                    counts[1] += item.count(":")
            elif not _clean(item, depth_left - 1, counts):
                return False
        return True
    if type(value) is list:
        return depth_left != 0 and _clean_all(value, depth_left - 1, counts)
    if type(value) is str:
        counts[1] += value.count(":")
        return True
    if type(value) is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if type(value) is float:
        return not (value.is_integer() and abs(value) >= _TWO_53)
    return value is None or type(value) is bool


def _clean_all(values: Iterable[object], depth_left: int, counts: list[int]) -> bool:
    """`_clean` of each value; strings, most values, are counted in place (one call fewer)."""
    for item in values:
        if type(item) is str:
            if ":" in item:
                counts[1] += item.count(":")
        elif not _clean(item, depth_left, counts):
            return False
    return True
