"""Payload rules (log-format.md section 4): I-JSON checks and JCS (RFC 8785) bytes.

`canonical()` is the writer's path. It type-checks a Python value as a JSON value, then
produces the RFC 8785 bytes. orjson gives the same bytes as JCS for payloads whose floats are
non-integral with a magnitude in [1e-5, 1e16) and whose object keys stay in the Basic
Multilingual Plane (the property tests prove it against `rfc8785`), so those take orjson;
everything else takes `rfc8785`.
"""

from __future__ import annotations

import json
import math

import orjson
import rfc8785

from .errors import InvalidPayload

MAX_SAFE_INTEGER = 2**53 - 1
_JCS_INTEGER_LIMIT = 1e21  # at or above this JCS switches to exponent form
# Non-integral doubles with a magnitude in [1e-5, 1e16) come out of orjson and JCS alike: the
# shortest round-trip digits in plain decimal notation. Outside, their exponent forms differ.
_ORJSON_FLOAT_MIN, _ORJSON_FLOAT_MAX = 1e-5, 1e16


def check_value(value: object) -> bool:
    """Raise InvalidPayload unless `value` is an I-JSON value; return whether orjson is exact.

    orjson is exact when the value holds no object key outside the BMP (key order then agrees
    between UTF-16 code units and code points) and every float is non-integral with a
    magnitude in [1e-5, 1e16).
    """
    return _check(value, "payload")


def _check(value: object, path: str) -> bool:
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:  # type: ignore[operator]
            return True
        raise InvalidPayload(
            f"{path}: integer {value} is outside ±(2**53-1); put such values in strings"
        )
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise InvalidPayload(f"{path}: {value} is not a finite number")
        if value.is_integer():  # type: ignore[union-attr]
            if 2**53 <= abs(value) < _JCS_INTEGER_LIMIT:  # type: ignore[arg-type]
                raise InvalidPayload(
                    f"{path}: {value!r} is an integral double of 2**53 or more; put it in a string"
                )
            return False  # JCS writes 1.0 as 1 and -0.0 as 0; orjson keeps them
        return _ORJSON_FLOAT_MIN <= abs(value) < _ORJSON_FLOAT_MAX  # type: ignore[arg-type]
    if kind is dict:
        fast = True
        for key, item in value.items():  # type: ignore[union-attr]
            if type(key) is not str:
                raise InvalidPayload(f"{path}: object key {key!r} is not a string")
            if not key.isascii() and max(key) > "\uffff":
                fast = False
            if not _check(item, f"{path}.{key}"):
                fast = False
        return fast
    if kind is list:
        fast = True
        for index, item in enumerate(value):  # type: ignore[arg-type]
            if not _check(item, f"{path}[{index}]"):
                fast = False
        return fast
    raise InvalidPayload(f"{path}: {kind.__name__} is not a JSON value")


def canonical(value: object) -> bytes:
    """The JCS bytes of an I-JSON value, or InvalidPayload."""
    orjson_is_exact = check_value(value)
    try:
        if orjson_is_exact:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        return rfc8785.dumps(value)
    except (TypeError, ValueError, UnicodeError, rfc8785.CanonicalizationError) as exc:
        # Lone surrogates are the only thing left that the walk above lets through.
        raise InvalidPayload(f"payload: {exc}") from None


def jcs_reference(value: object) -> bytes:
    """True JCS through `rfc8785`, for verifiers that must not trust a shortcut."""
    try:
        return rfc8785.dumps(value)
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


def loads_strict(data: bytes | str) -> object:
    """Parse JSON text, refusing duplicate keys, NaN/Infinity tokens and non-I-JSON values.

    orjson silently keeps the last of duplicate keys, so untrusted text (HTTP bodies, lines
    under verification) is parsed here. Raises InvalidPayload.
    """
    try:
        value = json.loads(data, object_pairs_hook=_unique_object, parse_constant=_refuse_constant)
    except InvalidPayload:
        raise
    except (ValueError, UnicodeError) as exc:
        raise InvalidPayload(f"not JSON: {exc}") from None
    check_value(value)
    _check_strings(value)
    return value


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
