"""Writes the log refuses (docs/format.md sections 2, 4 and 7): a typed error, and the files are
byte-identical before and after."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import enum
import threading
import uuid

import pytest
from helpers.crashlog import KEY, assert_valid_local, file_bytes, records

from eventstore.errors import InvalidIdentifier, InvalidPayload, StalePosition
from eventstore.writer import LogWriter


class _Colour(enum.Enum):
    RED = "red"


BAD_PAYLOADS = {
    "NaN": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "2**53": 2**53,
    "-(2**53)": -(2**53),
    "2**64": 2**64,
    "1e20 float": 1e20,
    "2.0**53 float": 2.0**53,
    "lone surrogate": "\ud800",
    "lone surrogate key": {"\udc00": 1},
    "datetime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    "date": datetime.date(2026, 1, 1),
    "tuple": (1, 2),
    "non-str key": {1: "a"},
    "None key": {None: "a"},
    "bytes": b"x",
    "set": {1},
    "uuid": uuid.UUID(int=1),
    "enum": _Colour.RED,
    "decimal": decimal.Decimal("1.5"),
    "NaN nested deep": {"a": [1, {"b": [float("nan")]}]},
    "tuple nested": {"a": [(1,)]},
}

BAD_IDENTIFIERS = {
    "empty": "",
    "129 chars": "a" * 129,
    "space": "a b",
    "newline at the end": "abc\n",
    "tab": "a\tb",
    "non-ascii": "zoë",
    "not a string": 7,
}


@pytest.fixture
def writer(tmp_path):
    log = LogWriter.open(tmp_path / "log", KEY, seg_bits=3, checkpoint_interval=3600)
    log.append("acme", "s", "messages", "item.added", {"i": 0})
    yield log
    if not log.closed:
        log.close()


def _assert_refused(writer: LogWriter, error: type[Exception], attempt) -> None:
    before, size = file_bytes(writer.log_dir, skip_lock=False), writer.size
    with pytest.raises(error):
        attempt()
    assert writer.size == size
    assert file_bytes(writer.log_dir, skip_lock=False) == before, "the files changed"


@pytest.mark.parametrize("name", BAD_PAYLOADS)
def test_a_payload_that_is_not_i_json_is_refused_and_nothing_is_written(writer, name):
    bad = BAD_PAYLOADS[name]
    event = ("acme", "s", "messages", "item.added")
    _assert_refused(writer, InvalidPayload, lambda: writer.append(*event, bad))
    _assert_refused(writer, InvalidPayload, lambda: writer.append(*event, {"nested": [bad]}))
    _assert_refused(
        writer,
        InvalidPayload,
        lambda: writer.append_batch([(*event, {"ok": 1}), (*event, bad), (*event, {"ok": 2})]),
    )
    # The asyncio way in is refused the same, in the caller, before anything is queued.
    _assert_refused(
        writer, InvalidPayload, lambda: asyncio.run(writer.submit([(*event, bad)]).wait_async())
    )


@pytest.mark.parametrize("position", range(4))
@pytest.mark.parametrize("name", BAD_IDENTIFIERS)
def test_an_invalid_identifier_is_refused_and_nothing_is_written(writer, name, position):
    fields = ["acme", "s", "messages", "item.added"]
    fields[position] = BAD_IDENTIFIERS[name]
    _assert_refused(writer, InvalidIdentifier, lambda: writer.append(*fields, {"i": 1}))
    _assert_refused(
        writer,
        InvalidIdentifier,
        lambda: writer.append_batch([("acme", "s", "m", "t", {}), (*fields, {"i": 1})]),
    )


def test_the_control_tenant_is_refused_for_events(writer):
    for type_ in ("item.added", "log.close", "redaction", "segment.open"):
        _assert_refused(
            writer, InvalidIdentifier, lambda t=type_: writer.append("_log", "_log", "_log", t, {})
        )


def test_identifiers_of_exactly_128_allowed_characters_are_accepted(writer):
    name = ("Az09._:@/+-" * 12)[:128]
    record = writer.append(name, name, name, name, {"i": 1})
    assert (record.tenant, record.type) == (name, name)


def test_a_stale_expected_size_raises_stale_position_and_nothing_is_written(writer):
    size = writer.size
    event = ("acme", "s", "messages", "item.added", {"i": 1})
    for stale in (size - 1, size + 1, 0):
        _assert_refused(
            writer, StalePosition, lambda s=stale: writer.append(*event, expected_size=s)
        )
        _assert_refused(
            writer, StalePosition, lambda s=stale: writer.append_batch([event], expected_size=s)
        )
        _assert_refused(
            writer,
            StalePosition,
            lambda s=stale: asyncio.run(writer.submit([event], expected_size=s).wait_async()),
        )
    with pytest.raises(StalePosition) as refused:
        writer.append(*event, expected_size=size - 1)
    assert (refused.value.expected, refused.value.actual) == (size - 1, size)
    assert writer.append(*event, expected_size=size).seq == size


def test_expected_size_is_a_compare_and_set_between_racing_threads(writer):
    won: list[tuple[int, int]] = []
    lost = [0]
    lock = threading.Lock()

    def racer(n: int) -> None:
        for i in range(25):
            while True:
                size = writer.size
                try:
                    record = writer.append("acme", f"r-{n}", "m", "t", {"i": i}, expected_size=size)
                except StalePosition:
                    with lock:
                        lost[0] += 1
                    continue
                with lock:
                    won.append((size, record.seq))
                break

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    # Each success landed exactly at the size its caller saw (a seal/open may precede it).
    for size, seq in won:
        assert seq == size or (seq == size + 2 and seq & 7 == 1), (size, seq)
    events = [r for r in records(writer.log_dir) if r.tenant == "acme" and r.session != "s"]
    assert len(events) == 6 * 25
    assert_valid_local(writer.log_dir)
