"""`streams.web.json_body.parse_object` (orjson plus a check) answers exactly as `loads_strict` does:
the same value, or the same refusal with the same message, for every body."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.errors import InvalidPayload
from eventstore.jcs import MAX_DEPTH, loads_strict
from streams.web.json_body import parse_object


def _outcome(parse, body: bytes):
    try:
        value = parse(body)
    except InvalidPayload as exc:
        return ("refused", type(exc).__name__, str(exc))
    return ("value", json.dumps(value, sort_keys=True), _types(value))


def _types(value) -> str:
    """The exact types inside (1 and 1.0 compare equal, and json.dumps could hide the kind)."""
    if type(value) is dict:
        return "{" + ",".join(f"{k}:{_types(v)}" for k, v in sorted(value.items())) + "}"
    if type(value) is list:
        return "[" + ",".join(_types(v) for v in value) + "]"
    return type(value).__name__


def _same(body: bytes) -> None:
    assert _outcome(parse_object, body) == _outcome(loads_strict, body), body[:200]


CASES = [
    b'{"content": "x"}',
    b'{"content":1,"content":2}',
    b'{"a": {"b": 1, "b": 2}}',
    b'{"a": [{"k": 1}, {"k": 1, "k": 1}]}',
    b'{"a:b": "c:d", "a:b": "e"}',  # colons inside strings, and a duplicate
    b'{"a:b": "c:d", "e": ":::"}',
    b'{"\\u003a": 1, ":": 2}',  # an escaped colon key equal to a plain one
    b'{"\\u003A": ":"}',
    b'{"a": "\\u00e9\\u003a"}',
    b'{"\\u0061": 1, "a": 2}',  # duplicate only once the escape is decoded
    b'{"content": NaN}',
    b'{"content": Infinity}',
    b'{"content": -Infinity}',
    b'{"content": 1e400}',
    b'{"content": 9007199254740991}',
    b'{"content": 9007199254740992}',
    b'{"content": -9007199254740992}',
    b'{"content": 9223372036854775808}',
    b'{"content": 18446744073709551616}',
    b'{"content": 100000000000000000000000}',  # beyond 64 bits: orjson would give a float
    b'{"content": 1e22}',
    b'{"content": 1e21}',
    b'{"content": 9007199254740992.0}',
    b'{"content": 1.5}',
    b'{"content": -0}',
    b'{"content": -0.0}',
    b'{"content": 1E5}',
    b'{"content": "\\ud800"}',  # a lone surrogate
    b'{"content": "\\ud83d\\ude00"}',
    b'\xef\xbb\xbf{"content": "bom"}',
    b'{"content": "\xed\xa0\x80"}',  # a surrogate encoded in UTF-8
    b'{"content": "\xff"}',
    b"\xff\xfe{\x00}\x00",
    b'{"content": "x\ty"}',
    b'{"content": "x"} ',
    b' \n{"content": "x"}\r\n',
    b'{"content": "x"}\x0c',
    b'{"content": "x"}{}',
    b'{"a":1,}',
    b"[1, 2, 3]",
    b'"a string"',
    b"null",
    b"",
    b"{not json",
    b"{'a': 1}",
    b'{"a": true, "b": false, "c": null, "d": [], "e": {}}',
    b"[" * MAX_DEPTH + b"]" * MAX_DEPTH,
    b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
    b'{"a":' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH,
    b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1),
    b"[" * 2000 + b"]" * 2000,
]


@pytest.mark.parametrize("body", CASES)
def test_the_same_answer_as_loads_strict(body):
    _same(body)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab:"\\é\u2028\U0001f600 '), max_size=6)
)
_keys = st.text(alphabet=st.sampled_from("ab:é"), max_size=3)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.lists(st.tuples(_keys, inner), max_size=4)
    ),  # pairs: keys may repeat
    max_leaves=12,
)


def _text(value, ascii_only: bool) -> str:
    """JSON text of `value`, where a list of pairs is an object whose keys may repeat."""
    if type(value) is list and value and all(type(p) is tuple for p in value):
        members = (
            f"{json.dumps(k, ensure_ascii=ascii_only)}:{_text(v, ascii_only)}" for k, v in value
        )
        return "{" + ",".join(members) + "}"
    if type(value) is list:
        return "[" + ",".join(_text(v, ascii_only) for v in value) + "]"
    if type(value) is tuple:
        return _text([value], ascii_only)
    return json.dumps(value, ensure_ascii=ascii_only)


@settings(max_examples=400, deadline=None)
@given(value=_values, ascii_only=st.booleans(), wrap=st.booleans())
def test_any_text_gets_the_same_answer(value, ascii_only, wrap):
    text = _text(value, ascii_only)
    if wrap:
        text = '{"content":' + text + "}"
    _same(text.encode("utf-8", "surrogatepass"))
