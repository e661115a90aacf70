"""The verifier's hot loop cuts a canonical event line at fixed separators instead of parsing it
into a dict. These tests hold it to one rule: a line it does not fully understand is never
accepted inline; it goes to `linecheck.check_line`, which alone names failures.

Each case rewrites one event line of a real log (written by LogWriter) into a form that is
not the canonical line of a valid record, and asserts that the walk sent that line the full way
(and, for the lines that are still JSON text, that the verdict is not VALID on that line's
account: FAIL, or a non-canonical warning).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore.checkpoint import SigningKey
from eventstore.layout import segment_name
from eventstore.verify import segment_walk, verify_log
from eventstore.writer import Durability, Entry, LogWriter

ORIGIN = "test.ledgermem.local/hot-path"
KEY = SigningKey.from_seed(ORIGIN, bytes(range(32)))
TARGET = 5  # the line (1-based) that each case rewrites


def write_log(log_dir: Path) -> None:
    writer = LogWriter.open(log_dir, KEY, durability=Durability.UNSAFE_NO_FSYNC)
    try:
        writer.append_batch(
            Entry("acme", f"s-{n % 3}", "messages", "item.added", {"n": n, "text": "hi"})
            for n in range(10)
        )
    finally:
        writer.close()


@pytest.fixture
def slow_lines(monkeypatch) -> list[int]:
    """The line numbers the walk sent to check_line."""
    seen: list[int] = []
    original = segment_walk.SegmentWalk._check_line

    def spy(self, body: bytes, line_no: int):
        seen.append(line_no)
        return original(self, body, line_no)

    monkeypatch.setattr(segment_walk.SegmentWalk, "_check_line", spy)
    return seen


def rewrite(log_dir: Path, change) -> bytes:
    path = log_dir / segment_name(0)
    lines = path.read_bytes().split(b"\n")
    lines[TARGET - 1] = change(lines[TARGET - 1])
    path.write_bytes(b"\n".join(lines))
    return lines[TARGET - 1]


def test_an_untouched_log_takes_the_hot_path_for_every_event(tmp_path, slow_lines):
    write_log(tmp_path)
    report = verify_log(tmp_path, str(KEY.vkey))
    assert report.verdict != "FAIL"
    assert slow_lines == [1, 12]  # the control records only: segment.open and log.close


CASES = {
    "ts-leading-zero": lambda line: line.replace(b',"ts":', b',"ts":0', 1),
    "ts-plus": lambda line: line.replace(b',"ts":', b',"ts":+', 1),
    "ts-float": lambda line: line.replace(b',"tenant"', b'.0,"tenant"', 1),
    "ts-space": lambda line: line.replace(b',"ts":', b',"ts": ', 1),
    "seq-wrong": lambda line: line.replace(b'"seq":4,', b'"seq":5,', 1),
    "tenant-escaped": lambda line: line.replace(b'"tenant":"acme"', b'"tenant":"ac\\u006de"', 1),
    "session-empty": lambda line: line.replace(b'"session":"s-0"', b'"session":""', 1),
    "control-tenant": lambda line: line.replace(b'"tenant":"acme"', b'"tenant":"_log"', 1),
    "extra-key-before-prev": lambda line: line.replace(b',"prev"', b',"x":1,"prev"', 1),
    "prev-upper": lambda line: (
        line[: line.index(b'"prev":"') + 8]
        + line[line.index(b'"prev":"') + 8 : line.index(b'"prev":"') + 72].upper()
        + line[line.index(b'"prev":"') + 72 :]
    ),
    "salt-upper": lambda line: line.replace(
        line[line.index(b'"salt":"') + 8 : line.index(b'"salt":"') + 40],
        line[line.index(b'"salt":"') + 8 : line.index(b'"salt":"') + 40].upper(),
        1,
    ),
    "payload-space": lambda line: line.replace(b'"payload":{', b'"payload":{ ', 1),
    "payload-unsorted": lambda line: line.replace(b'{"n":3,"text":"hi"}', b'{"text":"hi","n":3}'),
    "payload-duplicate": lambda line: line.replace(b'{"n":3,', b'{"n":3,"n":4,', 1),
    "payload-float": lambda line: line.replace(b'{"n":3,', b'{"n":4.0,', 1),
    "trailing-key": lambda line: line[:-1] + b',"redacted":1}',
    "no-closing-brace": lambda line: line[:-1] + b" ",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_line_the_hot_path_does_not_fully_understand_goes_the_full_way(
    tmp_path, slow_lines, name
):
    write_log(tmp_path)
    changed = rewrite(tmp_path, CASES[name])
    assert b'"seq":4,' in changed or name == "seq-wrong"
    report = verify_log(tmp_path, str(KEY.vkey))
    assert TARGET in slow_lines
    assert report.verdict == "FAIL" or report.to_json()["warnings"]
