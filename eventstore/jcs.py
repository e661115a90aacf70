"""Payload rules (docs/format.md section 4): I-JSON checks and JCS (RFC 8785) bytes.

`canonical()` is the writer's path. It type-checks a Python value as a JSON value, then
produces the RFC 8785 bytes. orjson gives the same bytes as JCS for payloads whose floats are
non-integral with a magnitude in [1e-5, 1e16) and whose object keys stay in the Basic
Multilingual Plane (the property tests prove it against `rfc8785`), so those take orjson;
everything else takes `rfc8785`.

Input is also held to a nesting limit, `MAX_DEPTH`, that the log's format does not have: every
payload a caller gives (`check_value`, `canonical`) and every JSON text that arrives from outside
(`loads_strict`: HTTP bodies, WebSocket frames) is refused with `TooDeep` beyond it. Only the
verifier and recovery, which must accept any line already written, pass `max_depth=None`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, cast

import orjson
import rfc8785

from .errors import InvalidPayload

# Arrays and objects nested in one another, the outermost counting as 1. Everything that carries
# a payload wraps it in a few more levels (the line: 2, a snapshot: 9, an HTTP answer: 4-7) and
# orjson refuses to encode or decode beyond 255, so 128 leaves every later path more than 100
# levels to spare; Python code that recurses over a payload stays far from its recursion limit.
MAX_DEPTH = 128
MAX_SAFE_INTEGER = 2**53 - 1
_JCS_INTEGER_LIMIT = 1e21  # at or above this JCS switches to exponent form
# Non-integral doubles with a magnitude in [1e-5, 1e16) come out of orjson and JCS alike: the
# shortest round-trip digits in plain decimal notation. Outside, their exponent forms differ.
_ORJSON_FLOAT_MIN, _ORJSON_FLOAT_MAX = 1e-5, 1e16
_UTF8_BOM = b"\xef\xbb\xbf"

# A Python value that `check_value` accepted: JSON's types, as `rfc8785` takes them.
JsonValue: TypeAlias = (
    None | bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
)


class TooDeep(InvalidPayload):
    """JSON nested deeper than the limit (`MAX_DEPTH` unless the caller gave another)."""

    def __init__(self, where: str, limit: int) -> None:
        super().__init__(
            f"{where}: nested deeper than the limit of {limit} levels of arrays and objects"
        )
        self.limit = limit


def check_value(value: object, *, max_depth: int | None = MAX_DEPTH) -> bool:
    """Raise InvalidPayload unless `value` is an I-JSON value; return whether orjson is exact.

    orjson is exact when the value holds no object key outside the BMP (key order then agrees
    between UTF-16 code units and code points) and every float is non-integral with a
    magnitude in [1e-5, 1e16). Nesting beyond `max_depth` raises `TooDeep` (None: no limit, for
    checking lines already in a log).
    """
    try:
        return _check(value, -1 if max_depth is None else max_depth)
    except _Fault as fault:
        path = "payload" + "".join(reversed(fault.steps))
        if fault.message is None:  # nested too deep
            assert max_depth is not None  # without a limit the walk never runs out of depth
            raise TooDeep(path if len(path) <= 60 else path[:60] + "...", max_depth) from None
        raise InvalidPayload(f"{path}: {fault.message}") from None


class _Fault(Exception):
    """What `_check` found, with the path to it collected while unwinding (".key", "[3]"):
    paths are only built for a value that fails, not for every value checked."""

    def __init__(self, message: str | None) -> None:  # None: nested deeper than the limit
        self.message = message
        self.steps: list[str] = []


def _check(value: Any, depth_left: int) -> bool:
    # `value` is any Python object. Its type is read once into `kind` (this walk runs over every
    # payload appended), and mypy cannot narrow `value` through that variable: hence Any.
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return True
        raise _Fault(f"integer {value} is outside ±(2**53-1); put such values in strings")
    if kind is float:
        if not math.isfinite(value):
            raise _Fault(f"{value} is not a finite number")
        if value.is_integer():
            if 2**53 <= abs(value) < _JCS_INTEGER_LIMIT:
                raise _Fault(
                    f"{value!r} is an integral double of 2**53 or more; put it in a string"
                )
            return False  # JCS writes 1.0 as 1 and -0.0 as 0; orjson keeps them
        return _ORJSON_FLOAT_MIN <= abs(value) < _ORJSON_FLOAT_MAX
    is_object = kind is dict
    if not is_object and kind is not list:
        raise _Fault(f"{kind.__name__} is not a JSON value")
    if depth_left == 0:
        raise _Fault(None)
    depth_left -= 1
    fast = True
    for key, item in value.items() if is_object else enumerate(value):
        if is_object:
            if type(key) is not str:
                raise _Fault(f"object key {key!r} is not a string")
            if not key.isascii() and max(key) > "\uffff":
                fast = False
        item_kind = type(item)
        if item_kind is str or item is None or item_kind is bool:
            continue  # the common leaves, without a call
        try:
            if not _check(item, depth_left):
                fast = False
        except _Fault as fault:
            fault.steps.append(f".{key}" if is_object else f"[{key}]")
            raise
    return fast


def canonical(value: object) -> bytes:
    """The JCS bytes of an I-JSON value, or InvalidPayload."""
    orjson_is_exact = check_value(value)
    try:
        if orjson_is_exact:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        return rfc8785.dumps(cast(JsonValue, value))  # checked above
    except (TypeError, ValueError, UnicodeError, rfc8785.CanonicalizationError) as exc:
        # Lone surrogates are the only thing left that the walk above lets through.
        raise InvalidPayload(f"payload: {exc}") from None


def jcs_reference(value: object) -> bytes:
    """True JCS through `rfc8785`, for verifiers that must not trust a shortcut."""
    try:
        return rfc8785.dumps(cast(JsonValue, value))  # rfc8785 refuses what is not JSON
    except (TypeError, ValueError, UnicodeError, rfc8785.CanonicalizationError) as exc:
        raise InvalidPayload(f"payload: {exc}") from None


def _refuse_constant(token: str) -> object:
    raise InvalidPayload(f"{token} is not JSON")


def _unique_object(pairs: list[tuple[str, object]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidPayload(f"duplicate object key {key!r}")
            seen.add(key)
    return result


def loads_strict(data: bytes | str, *, max_depth: int | None = MAX_DEPTH) -> object:
    """Parse JSON text, refusing duplicate keys, NaN/Infinity tokens and non-I-JSON values.

    orjson silently keeps the last of duplicate keys, so untrusted text (HTTP bodies, WebSocket
    frames, lines under verification) is parsed here. The text is UTF-8 with no byte order mark
    (RFC 8259 section 8.1): `json.loads` would also take UTF-16, UTF-32 and a BOM. Nesting beyond
    `max_depth` raises `TooDeep` (None: no limit, for lines already in a log). Raises
    InvalidPayload.
    """
    text = _utf8_text(data)
    try:
        value = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_refuse_constant)
    except InvalidPayload:
        raise
    except RecursionError:
        # Python's parser gives up far beyond any limit we set (around 1,000 levels). Without a
        # limit the caller decides (the verifier names it `record.depth`).
        if max_depth is None:
            raise
        raise TooDeep("JSON text", max_depth) from None
    except (ValueError, UnicodeError) as exc:
        raise InvalidPayload(f"not JSON: {exc}") from None
    try:
        check_value(value, max_depth=max_depth)
    except TooDeep:
        assert max_depth is not None  # only a limit makes check_value raise TooDeep
        raise TooDeep("JSON text", max_depth) from None
    _check_strings(value)
    return value


def _utf8_text(data: bytes | str) -> str:
    if isinstance(data, str):
        if data.startswith("\ufeff"):
            raise InvalidPayload("JSON text must not start with a byte order mark (U+FEFF)")
        return data
    if data.startswith(_UTF8_BOM):
        raise InvalidPayload("JSON text must be UTF-8 without a byte order mark")
    # No JSON text holds a NUL byte (not even inside a string), but UTF-16 and UTF-32 ones do.
    if b"\x00" in data[:4] or data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidPayload("JSON text must be UTF-8: this looks like UTF-16 or UTF-32")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidPayload(f"JSON text must be UTF-8: {exc.reason} at byte {exc.start}") from None


def _check_strings(value: object) -> None:
    """Reject lone surrogates, which json.loads accepts from `\\ud800` escapes."""
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPayload("a string holds a lone surrogate") from None
    elif type(value) is dict:
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif type(value) is list:
        for item in value:
            _check_strings(item)
