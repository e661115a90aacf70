"""The format core (eventstore/record.py and eventstore/linecheck.py) on its own.

Encoding and checking agree (a line the writer's encoder makes passes the per-line check with
the same hash), the spec's vectors pass it, every single-line check can be reached by a line
broken in that one way, and segment positions follow seg_bits.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from eventstore import jcs, linecheck, record
from eventstore.linecheck import LineError, NotJsonText, check_line, is_json_text
from eventstore.record import SEGMENT_OPEN, SEGMENT_SEAL, new_record, segment_position

VECTORS = json.loads((Path(__file__).parent / "vectors" / "vectors.json").read_text("utf-8"))
ORIGIN = VECTORS["origin"]
SALT = bytes(range(16))
PREV = record.genesis(ORIGIN)


def event(seq: int = 1, payload: object = None, prev: bytes = PREV, **names: str):
    """(record, line without newline, h) of an event record made by the writer's encoder."""
    payload = {"text": "hello", "n": 3} if payload is None else payload
    ids = {"tenant": "acme", "session": "s1", "section": "messages", "type_": "item.added"}
    ids.update(names)
    rec, line, h = new_record(
        prev, seq, 1_700_000_000_000, ids["tenant"], ids["session"], ids["section"],
        ids["type_"], SALT, payload, jcs.canonical(payload),
    )  # fmt: skip
    return rec, line[:-1], h


def line_of(obj: dict) -> bytes:
    """A line holding `obj` with the writer's key order (no canonical rebuild)."""
    return orjson.dumps(obj)


def event_obj(**changes: object) -> dict:
    _, line, _ = event()
    obj = orjson.loads(line)
    obj.update(changes)
    return obj


def control_line(seq: int, type_: str, session: str = "_log", payload: object = None) -> bytes:
    return event(seq, payload or {"k": 1}, tenant="_log", session=session, section="_log",
                 type_=type_)[1]  # fmt: skip


# ---- encode, then check ------------------------------------------------------------------------


def test_a_line_the_encoder_makes_passes_the_check_with_the_same_hash():
    rec, line, h = event(seq=5)
    checked = check_line(line, seq=5, prev=PREV, seg_bits=2)
    assert checked.h == h
    assert checked.canonical
    assert checked.record == rec
    assert checked.payload_jcs == jcs.canonical(rec.payload)


def test_a_redacted_line_passes_and_keeps_its_hash():
    rec, line, h = event(seq=5)
    redacted = rec.redacted_line(7)
    checked = check_line(redacted, seq=5, prev=PREV)
    assert checked.h == h and checked.payload_jcs is None and checked.canonical


@pytest.mark.parametrize("vector", VECTORS["records"], ids=lambda v: f"seq{v['seq']}")
def test_each_vector_line_passes_the_check_with_its_hash(vector):
    checked = check_line(
        vector["line"].encode().removesuffix(b"\n"),
        seq=vector["seq"],
        prev=bytes.fromhex(vector["prev"]),
        seg_bits=VECTORS["seg_bits"],
    )
    assert checked.h.hex() == vector["h"]
    assert checked.canonical


def test_a_non_canonical_line_passes_but_is_reported_non_canonical():
    _, line, h = event()
    spaced = line.replace(b'","', b'", "', 1)
    checked = check_line(spaced)
    assert checked.h == h and not checked.canonical


def test_unknown_keys_pass_only_when_not_strict():
    line = line_of(event_obj(extra=1))
    with pytest.raises(LineError) as failed:
        check_line(line)
    assert failed.value.check == "record.unknown_key"
    assert check_line(line, strict=False).unknown_keys == {"extra"}


# ---- every single-line check is reachable ----------------------------------------------------


def _redacted_control_line() -> bytes:
    pd = record.payload_digest(SALT, b"{}")
    h = record.record_hash(PREV, 1, 0, "_log", "_log", "_log", "log.resume", pd)
    return record.encode_line(
        1, 0, "_log", "_log", "_log", "log.resume", PREV.hex(), h.hex(), pd.hex(), None, None, 2
    )


def _line_with_payload_text(text: bytes) -> bytes:
    _, line, _ = event()
    head = line[: line.index(b'"payload":') + len(b'"payload":')]
    return head + text + b"}"


BROKEN = {
    "record.too_long": lambda: b" " * (record.MAX_LINE_BYTES + 1),
    "record.not_json": lambda: b'{"v":1,"seq":',
    "record.json": lambda: _line_with_payload_text(b"NaN"),
    "record.not_object": lambda: b"[1,2]",
    "payload.ijson": lambda: _line_with_payload_text(orjson.dumps({"big": 1e20})),
    "record.depth": lambda: _line_with_payload_text(b"[" * 100_000 + b"]" * 100_000),
    "record.missing_key": lambda: line_of({k: v for k, v in event_obj().items() if k != "h"}),
    "record.unknown_key": lambda: line_of(event_obj(extra=1)),
    "record.v": lambda: line_of(event_obj(v=2)),
    "record.seq": lambda: line_of(event_obj(seq=-1)),
    "record.ts": lambda: line_of(event_obj(ts=2**53)),
    "record.identifier": lambda: line_of(event_obj(section="no spaces")),
    "record.prev": lambda: line_of(event_obj(prev="AB" * 32)),
    "record.payload_salt": lambda: line_of({k: v for k, v in event_obj().items() if k != "salt"}),
    "record.salt": lambda: line_of(event_obj(salt="00")),
    "record.pd": lambda: line_of(event_obj(payload={"text": "edited", "n": 3})),
    "control.payload_removed": _redacted_control_line,
    "record.redacted": lambda: (
        event()[0].redacted_line(7).replace(b'"redacted":7', b'"redacted":"7"')
    ),
    "record.h": lambda: line_of(event_obj(ts=1)),
    "control.kind": lambda: control_line(1, "log.resume", session="other"),
}


@pytest.mark.parametrize("check", sorted(BROKEN))
def test_each_single_line_check_names_its_fault(check):
    with pytest.raises(LineError) as failed:
        check_line(BROKEN[check]())
    assert failed.value.check == check, failed.value


def test_every_check_the_line_check_names_is_reachable():
    context_checks = {"record.seq", "record.prev", "control.position"}
    assert set(BROKEN) | context_checks == linecheck.CHECKS


def test_a_line_that_is_not_json_text_is_told_apart():
    with pytest.raises(NotJsonText) as failed:
        check_line(b"\x00\x00\x00")
    assert failed.value.check == "record.not_json"


@pytest.mark.parametrize(
    ("check", "line", "kwargs"),
    [
        ("record.seq", lambda: event(seq=2)[1], {"seq": 1}),
        ("record.prev", lambda: event(seq=1)[1], {"prev": bytes(32)}),
        ("control.position", lambda: control_line(1, SEGMENT_OPEN), {"seg_bits": 2}),
        ("control.position", lambda: event(seq=3)[1], {"seg_bits": 2}),
        ("control.position", lambda: event(seq=4)[1], {"seg_bits": 2}),
    ],
    ids=["seq", "prev", "open-away", "not-sealed", "not-opened"],
)
def test_each_context_check_names_its_fault(check, line, kwargs):
    with pytest.raises(LineError) as failed:
        check_line(line(), **kwargs)
    assert failed.value.check == check, failed.value


def test_a_seq_fault_names_the_line_within_its_segment():
    with pytest.raises(LineError) as failed:
        check_line(event(seq=6)[1], seq=5, seg_bits=2)
    assert str(failed.value) == "line 2 holds seq 6 where 5 is expected"


# ---- JSON text, for the crash-leftover rule --------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [b"NaN", b'{"a":Infinity}', b'{"a":1e400}', b'{"a":"\\ud800"}', b"[" * 10_000 + b"]" * 10_000],
)
def test_json_that_fails_the_checks_is_still_json_text(line):
    assert is_json_text(line)
    assert is_json_text(line + b"\n")


@pytest.mark.parametrize("line", [b'{"v":1,"seq":', b"\x00" * 10, b"\xef\xbb\xbf{}", b""])
def test_torn_or_binary_bytes_are_not_json_text(line):
    assert not is_json_text(line)


# ---- segment positions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seq", "seg_bits", "place"),
    [
        (0, 2, SEGMENT_OPEN),
        (1, 2, None),
        (2, 2, None),
        (3, 2, SEGMENT_SEAL),
        (4, 2, SEGMENT_OPEN),
        (65_535, 16, SEGMENT_SEAL),
        (65_536, 16, SEGMENT_OPEN),
        (65_537, 16, None),
        (2**40 - 1, 40, SEGMENT_SEAL),
        (2**40, 40, SEGMENT_OPEN),
    ],
)
def test_segment_positions_follow_seg_bits(seq, seg_bits, place):
    assert segment_position(seq, seg_bits) == place
    assert linecheck.line_number(seq, seg_bits) == seq % (1 << seg_bits) + 1
