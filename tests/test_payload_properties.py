"""Property tests: the writer's payload bytes are RFC 8785 bytes, and read-back is what was written."""

from __future__ import annotations

import datetime
import math

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import jcs
from eventstore.checkpoint import SigningKey
from eventstore.errors import InvalidPayload
from eventstore.reader import LogReader
from eventstore.writer import LogWriter

SAFE = 2**53 - 1


def _is_i_json_float(value: float) -> bool:
    return math.isfinite(value) and not (value.is_integer() and 2**53 <= abs(value) < 1e21)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False).filter(_is_i_json_float)
    | st.text()
)
# Keys mix ASCII, BMP and astral-plane characters so UTF-16 ordering is exercised.
keys = st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(
    ["a", "ﬁ", "😀", "é", "Z", ""]
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)


@given(json_values)
@settings(max_examples=400)
def test_canonical_bytes_equal_rfc8785(value):
    assert jcs.canonical(value) == rfc8785.dumps(value)


@given(json_values)
@settings(max_examples=200)
def test_strict_parse_of_canonical_bytes_gives_back_an_equal_value(value):
    assert jcs.loads_strict(jcs.canonical(value)) == value


@pytest.fixture(scope="module")
def writer(tmp_path_factory):
    log = LogWriter.open(
        tmp_path_factory.mktemp("props") / "log",
        SigningKey.generate("test.local/props"),
        seg_bits=4,
    )
    yield log
    log.close()


@given(payload=json_values)
@settings(
    max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_durable_record_reads_back_equal_with_rfc8785_payload_bytes(writer, payload):
    written = writer.append("t", "s", "findings", "item.added", payload)
    read = LogReader(writer.log_dir).get(written.seq)
    assert read.line == written.line
    assert read.payload == payload
    payload_bytes = read.line[read.line.index(b',"payload":') + len(b',"payload":') : -1]
    assert payload_bytes == rfc8785.dumps(payload)
    assert orjson.loads(payload_bytes) == payload


bad_leaves = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        2**53,
        -(2**53),
        10**30,
        1e20,
        float(2**53),
        "\ud800",
        datetime.datetime(2026, 1, 1),
        (1, 2),
        b"bytes",
        {1: "int key"},
    ]
)


@given(bad=bad_leaves, depth=st.integers(0, 3))
def test_non_i_json_anywhere_is_refused(bad, depth):
    value: object = bad
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    with pytest.raises(InvalidPayload):
        jcs.canonical(value)


def test_strict_parse_refuses_duplicate_keys_and_non_json_tokens():
    for text in (
        b'{"a":1,"a":2}',
        b'{"x":{"b":1,"b":1}}',
        b"NaN",
        b"[Infinity]",
        b'"\\ud800"',
        b"1e400",
        b"9007199254740993",
    ):
        with pytest.raises(InvalidPayload):
            jcs.loads_strict(text)


# The orjson fast path takes non-integral doubles in [1e-5, 1e16): probe both edges hard.
edge_floats = st.builds(
    lambda mantissa, exponent, sign: sign * mantissa * 10.0**exponent,
    st.floats(1.0, 10.0, exclude_max=True),
    st.integers(-8, 18),
    st.sampled_from([1.0, -1.0]),
).filter(_is_i_json_float)


@given(edge_floats)
@settings(max_examples=2000)
def test_canonical_float_bytes_equal_rfc8785_around_the_orjson_range(value):
    assert jcs.canonical({"x": value, "y": [value]}) == rfc8785.dumps({"x": value, "y": [value]})
