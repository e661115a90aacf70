"""What KAOS stores as an event's content or metadata, as JSON the log keeps, and back
(sections/adapters/kaos.py, docs/adapters/kaos.md "Content").

KAOS's `LocalMemory` keeps any Python value in memory; the log holds JSON. JSON values the log
keeps exactly (str, bool, None, a finite non-integral float, an int within ±(2**53-1), lists,
dicts with string keys) are stored as they are, so every other reader (the REST API, search,
context) sees them plainly. Any other value this encoding knows becomes the object
`{"$kaos": <tag>, "v": <JSON>}` and is read back equal, of the same type: tuple, set,
frozenset, bytes, bytearray, datetime, date, time, timedelta, Decimal, UUID, complex, an int
beyond ±(2**53-1), a float JSON would change (1.0, -0.0, nan, inf), and a dict with keys that
are not strings (or with a `$kaos` key). A str, int or dict subclass is stored as its value.
An object of any other class is refused (InvalidInput): nothing is unpickled from the log.
"""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from eventstore.errors import InvalidInput
from eventstore.jcs import MAX_SAFE_INTEGER

TAG = "$kaos"
_PLAIN_TAGS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    # tag -> (the value from its JSON payload, the payload of the value)
    "bytes": (lambda v: base64.b64decode(v), lambda x: base64.b64encode(x).decode()),
    "bytearray": (lambda v: bytearray(base64.b64decode(v)), lambda x: base64.b64encode(x).decode()),
    "datetime": (datetime.fromisoformat, datetime.isoformat),
    "date": (date.fromisoformat, date.isoformat),
    "time": (time.fromisoformat, time.isoformat),
    "timedelta": (lambda v: timedelta(*v), lambda x: [x.days, x.seconds, x.microseconds]),
    "decimal": (Decimal, str),
    "uuid": (uuid.UUID, str),
    "int": (int, str),
    "float": (float, repr),
}
_TYPES: dict[type, str] = {
    bytes: "bytes", bytearray: "bytearray", datetime: "datetime", date: "date", time: "time",
    timedelta: "timedelta", Decimal: "decimal", uuid.UUID: "uuid",
}  # fmt: skip
_CONTAINERS = {"tuple": tuple, "set": set, "frozenset": frozenset}


def encode_content(value: Any) -> Any:
    """A value KAOS stores, as JSON the log keeps (the `$kaos` form where JSON is not enough);
    InvalidInput for an object of a class this encoding does not know (nothing appended)."""
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, str):
        return str(value)  # a str subclass is its string
    if isinstance(value, int):
        value = int(value)  # an IntEnum is its number
        return value if abs(value) <= MAX_SAFE_INTEGER else {TAG: "int", "v": str(value)}
    if isinstance(value, float):
        value = float(value)
        if math.isfinite(value) and not value.is_integer():
            return value
        return {TAG: "float", "v": repr(value)}  # 1.0, -0.0, nan, inf: JSON would lose them
    if isinstance(value, complex):
        return {TAG: "complex", "v": [encode_content(value.real), encode_content(value.imag)]}
    for cls in type(value).__mro__:
        tag = _TYPES.get(cls)
        if tag is not None:
            return {TAG: tag, "v": _PLAIN_TAGS[tag][1](value)}
    if isinstance(value, list):
        return [encode_content(v) for v in value]
    for tag, container in _CONTAINERS.items():
        if isinstance(value, container):
            return {TAG: tag, "v": [encode_content(v) for v in value]}
    if isinstance(value, Mapping):
        if all(type(k) is str for k in value) and TAG not in value:
            return {k: encode_content(v) for k, v in value.items()}
        return {
            TAG: "dict",
            "v": [[encode_content(k), encode_content(v)] for k, v in value.items()],
        }
    raise InvalidInput(
        f"content of type {type(value).__name__} cannot be stored: JSON values, tuples, sets, "
        "bytes, datetimes, dates, times, timedeltas, Decimals, UUIDs and complex numbers can"
    )


def decode_content(value: Any) -> Any:
    """What `encode_content` stored, as the value it was given (a plain JSON value is itself)."""
    if isinstance(value, list):
        return [decode_content(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get(TAG)
    if set(value) == {TAG, "v"} and isinstance(tag, str):
        payload = value["v"]
        try:
            if tag in _PLAIN_TAGS:
                return _PLAIN_TAGS[tag][0](payload)
            if tag in _CONTAINERS:
                return _CONTAINERS[tag](decode_content(v) for v in payload)
            if tag == "complex":
                return complex(*(decode_content(v) for v in payload))
            if tag == "dict":
                return {decode_content(k): decode_content(v) for k, v in payload}
        except (TypeError, ValueError, ArithmeticError):
            pass  # not this encoding's (written another way): the dict as it is
    return {k: decode_content(v) for k, v in value.items()}
