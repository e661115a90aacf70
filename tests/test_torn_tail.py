"""Torn tails (docs/format.md sections 8 and 10): recovery takes back exactly the crash leftover.

The crash images are real: a writer appends with fsync, and the directory is copied while it is
still open (never closed), so the copy is what a crash at that moment leaves. Each case then
damages the last segment the way a crash can (cut at a byte, or NUL bytes from a power loss),
reopens it with LogWriter and checks what recovery did, byte by byte.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.crashlog import (
    KEY,
    assert_valid_local,
    file_bytes,
    quarantine,
    records,
    verdict_of,
    verify,
    write_files,
)

from eventstore import layout
from eventstore.checkpoint import parse_checkpoint
from eventstore.errors import CorruptLog
from eventstore.writer import LogWriter

SEG_BITS = 4  # S = 16: two segments hold the whole image


@dataclass
class CrashImage:
    files: dict[str, bytes]  # every file of the log directory, LOCK aside
    number: int  # the last segment
    first_seq: int  # its first seq
    checkpoint_size: int  # the newest checkpoint (the file or the embedded one)
    covered_end: int  # byte offset in the last segment where uncovered records start

    @property
    def segment(self) -> str:
        return layout.segment_name(self.number)

    @property
    def tail(self) -> bytes:
        return self.files[self.segment]

    def line_starts(self) -> list[int]:
        """Offsets of the lines of the last segment, and its end."""
        starts = [0]
        for i, byte in enumerate(self.tail):
            if byte == 0x0A:
                starts.append(i + 1)
        return starts

    def with_tail(self, tail: bytes) -> dict[str, bytes]:
        files = dict(self.files)
        files[self.segment] = tail
        return files


def _event(i: int) -> tuple:
    # Multi-byte UTF-8 so that some cuts split a character; lengths differ line to line.
    return ("acme", f"s-{i % 3}", "messages", "item.added", {"i": i, "text": "Zoë 𝄞" * (i % 3)})


def _crash_image(live: Path, events_before: int, events_after: int, mid_checkpoint: bool):
    """Append, optionally checkpoint, append more, then copy the files of the open writer."""
    writer = LogWriter.open(live, KEY, seg_bits=SEG_BITS, checkpoint_interval=3600)
    try:
        for i in range(events_before):
            writer.append(*_event(i))
        if mid_checkpoint:
            writer.checkpoint()
        for i in range(events_after):
            writer.append(*_event(events_before + i))
        files = file_bytes(live)  # the crash image: the writer is still open
    finally:
        writer.close()
    number = max(layout.segment_number(name) or 0 for name in files if name.startswith("seg-"))
    first_seq = number << SEG_BITS
    checkpoint_size = parse_checkpoint(files["checkpoint"].decode(), KEY.vkey).size
    tail = files[layout.segment_name(number)]
    covered_lines = max(0, checkpoint_size - first_seq)
    covered_end = 0
    for _ in range(covered_lines):
        covered_end = tail.index(b"\n", covered_end) + 1
    return CrashImage(files, number, first_seq, checkpoint_size, covered_end)


@pytest.fixture(scope="module")
def image_mid_segment(tmp_path_factory) -> CrashImage:
    """A checkpoint inside the last segment and three records beyond it."""
    image = _crash_image(tmp_path_factory.mktemp("mid") / "log", 20, 3, mid_checkpoint=True)
    assert image.number == 1 and image.first_seq < image.checkpoint_size
    assert image.tail.count(b"\n") - (image.checkpoint_size - image.first_seq) == 3
    return image


@pytest.fixture(scope="module")
def image_after_rotation(tmp_path_factory) -> CrashImage:
    """The newest checkpoint is the one taken at rotation: the whole last segment is beyond it,
    its segment.open line included."""
    image = _crash_image(tmp_path_factory.mktemp("rot") / "log", 15, 0, mid_checkpoint=False)
    assert image.number == 1 and image.checkpoint_size == image.first_seq
    assert image.covered_end == 0 and image.tail.count(b"\n") == 2
    return image


def _recover(work: Path, files: dict[str, bytes]) -> dict:
    write_files(work, files)
    writer = LogWriter.open(work, KEY)
    resume = writer.last_resume
    writer.close()
    return resume


def _assert_recovered_exactly(image: CrashImage, work: Path, damaged: bytes, leftover: int):
    """Recovery from the last segment `damaged`, whose crash leftover starts at `leftover`."""
    fragment = damaged[leftover:]
    files = image.with_tail(damaged)
    write_files(work, files)
    crashed = verify(work)
    assert verdict_of(crashed) == "VALID-LOCAL", crashed.error
    assert crashed.torn_bytes == len(fragment), "the verifier sees the same leftover"

    resume = _recover(work, files)

    expected_resume = {
        "checkpoint_size": image.checkpoint_size,
        "clean": False,
        "fragment_sha256": hashlib.sha256(fragment).hexdigest() if fragment else None,
        "torn_bytes": len(fragment),
    }
    assert resume == expected_resume
    name = f"seg-{image.number:012d}.{leftover}.torn"
    assert quarantine(work) == ({name: fragment} if fragment else {})
    after = (work / image.segment).read_bytes()
    assert after.startswith(damaged[:leftover]), "every complete record before the cut survives"

    surviving = image.first_seq + damaged[:leftover].count(b"\n")
    log = records(work)
    resumes = [r for r in log if r.type == "log.resume"]
    assert len(resumes) == 1 and resumes[0].payload == expected_resume
    # Straight after the survivors, unless the segment.open itself was torn and is rewritten.
    assert resumes[0].seq == surviving + (1 if surviving == image.first_seq else 0)
    assert log[-1].type == "log.close"
    for other, line in image.files.items():
        if other.startswith("seg-") and other != image.segment:
            assert (work / other).read_bytes() == line, f"{other} is untouched"

    report = assert_valid_local(work)
    assert report.torn_bytes == 0
    assert [(r.seq, r.clean, r.torn_bytes) for r in report.restarts] == [
        (resumes[0].seq, False, len(fragment))
    ]


def _leftover_of_cut(tail: bytes, cut: int) -> int:
    return tail.rfind(b"\n", 0, cut) + 1


def _sample_of_cuts(image: CrashImage, lo: int, hi: int, stride: int) -> list[int]:
    """Every `stride`-th offset in [lo, hi), plus each line boundary and the bytes around it."""
    cuts = set(range(lo, hi, stride))
    for start in image.line_starts():
        cuts |= {start - 1, start, start + 1}
    return sorted(c for c in cuts if lo <= c < hi)


# ---- cuts at every byte beyond the newest checkpoint -----------------------------------------


def test_a_cut_at_any_byte_beyond_the_checkpoint_is_quarantined_exactly(
    image_mid_segment, tmp_path
):
    image = image_mid_segment
    tail = image.tail
    for cut in range(image.covered_end, len(tail) + 1):
        _assert_recovered_exactly(image, tmp_path / "work", tail[:cut], _leftover_of_cut(tail, cut))


def test_a_cut_anywhere_in_an_uncovered_last_segment_recovers_its_segment_open(
    image_after_rotation, tmp_path
):
    # The byte-by-byte sweep is the test above; here every 5th byte and the line boundaries.
    image = image_after_rotation
    tail = image.tail
    for cut in _sample_of_cuts(image, 0, len(tail) + 1, 5):
        _assert_recovered_exactly(image, tmp_path / "work", tail[:cut], _leftover_of_cut(tail, cut))


def test_a_second_crash_at_the_same_offset_keeps_both_fragments(image_mid_segment, tmp_path):
    image = image_mid_segment
    work = tmp_path / "work"
    starts = image.line_starts()
    cut = starts[-2] + 7  # inside the last record
    first = image.tail[starts[-2] : cut]
    _recover(work, image.with_tail(image.tail[:cut]))
    # Crash again while recovery's log.resume line was being written at that same offset: the
    # line is torn and the checkpoint is still the crash image's.
    recovered = file_bytes(work)
    data = recovered[image.segment]
    assert data[starts[-2] :].startswith(b'{"v":1,"seq":%d,' % (image.first_seq + len(starts) - 2))
    recovered[image.segment] = data[: starts[-2] + 5]
    recovered["checkpoint"] = image.files["checkpoint"]
    write_files(work, recovered)
    writer = LogWriter.open(work, KEY)
    resume = writer.last_resume
    writer.close()
    base = f"seg-{image.number:012d}.{starts[-2]}.torn"
    second = data[starts[-2] : starts[-2] + 5]
    assert quarantine(work) == {base: first, base + ".1": second}
    assert resume["torn_bytes"] == len(second)
    assert resume["clean"] is False
    assert_valid_local(work)


def test_a_crash_inside_recovery_is_recovered_again(image_mid_segment, tmp_path):
    image = image_mid_segment
    starts = image.line_starts()
    cut = starts[-2] + 11
    fragment = image.tail[starts[-2] : cut]
    name = f"seg-{image.number:012d}.{starts[-2]}.torn"
    # Recovery copied the fragment to quarantine/, then died before cutting the segment.
    copied = image.with_tail(image.tail[:cut])
    copied[f"quarantine/{name}"] = fragment
    # ...or cut the segment too, then died before log.resume.
    truncated = image.with_tail(image.tail[: starts[-2]])
    truncated[f"quarantine/{name}"] = fragment
    for state, files, torn in (("copied", copied, fragment), ("truncated", truncated, b"")):
        work = tmp_path / state
        resume = _recover(work, files)
        assert resume["clean"] is False, state
        assert resume["torn_bytes"] == len(torn), state
        expected = {name: fragment}
        if torn:
            expected[name + ".1"] = torn  # the second copy never overwrites the first
        assert quarantine(work) == expected, state
        assert (work / image.segment).read_bytes().startswith(image.tail[: starts[-2]])
        assert_valid_local(work)


# ---- NUL bytes from a power loss -------------------------------------------------------------


def _nul_cases(image: CrashImage) -> list[tuple[str, bytes, int]]:
    """(name, damaged last segment, where its leftover starts) for the shapes a power loss
    leaves: the file grew but its new blocks read as zeros."""
    tail = image.tail
    starts = image.line_starts()
    end = len(tail)
    uncovered = [s for s in starts[:-1] if s >= image.covered_end]
    cases = [
        ("nul-block-appended", tail + b"\0" * 4096, end),
        ("nul-line-appended-with-newline", tail + b"\0" * 100 + b"\n", end),
        ("nul-lines-appended", tail + (b"\0" * 30 + b"\n") * 3, end),
        (
            "partial-record-then-nul",
            tail + tail[uncovered[0] : uncovered[0] + 40] + b"\0" * 60,
            end,
        ),
    ]
    for k, start in enumerate(reversed(uncovered), start=1):
        cases += [
            (f"last-{k}-lines-nul-no-newline", tail[:start] + b"\0" * (end - start), start),
            (
                f"last-{k}-lines-nul-trailing-newline",
                tail[:start] + b"\0" * (end - start - 1) + b"\n",
                start,
            ),
            (
                f"last-{k}-lines-nul-each-keeps-newline",
                tail[:start] + bytes(b if b == 0x0A else 0 for b in tail[start:]),
                start,
            ),
        ]
    return cases


def test_nul_tails_beyond_the_checkpoint_are_recovered_like_cuts(image_mid_segment, tmp_path):
    image = image_mid_segment
    cases = _nul_cases(image)
    assert len(cases) == 4 + 3 * 3  # three uncovered records
    for name, damaged, leftover in cases:
        try:
            _assert_recovered_exactly(image, tmp_path / "work", damaged, leftover)
        except AssertionError as exc:
            raise AssertionError(f"case {name}: {exc}") from exc


def test_nul_tail_of_a_segment_whose_open_is_uncovered_is_recovered(image_after_rotation, tmp_path):
    image = image_after_rotation
    for name, damaged, leftover in _nul_cases(image):
        try:
            _assert_recovered_exactly(image, tmp_path / "work", damaged, leftover)
        except AssertionError as exc:
            raise AssertionError(f"case {name}: {exc}") from exc


# ---- damage a checkpoint covers: refused, and nothing is touched ------------------------------


def _assert_refused_untouched(image: CrashImage, work: Path, files: dict[str, bytes], names: str):
    write_files(work, files)
    before = file_bytes(work)
    with pytest.raises(CorruptLog) as refused:
        LogWriter.open(work, KEY)
    assert names in str(refused.value), refused.value
    assert file_bytes(work) == before, "a refused open changes no file"
    # The lock is free again: a refused open must not leave it held.
    with pytest.raises(CorruptLog):
        LogWriter.open(work, KEY)


def test_a_cut_into_records_a_checkpoint_covers_is_refused_and_leaves_the_files(
    image_mid_segment, tmp_path
):
    image = image_mid_segment
    for cut in _sample_of_cuts(image, 0, image.covered_end, 3):
        _assert_refused_untouched(
            image, tmp_path / "work", image.with_tail(image.tail[:cut]), image.segment
        )


def test_a_cut_into_a_sealed_segment_is_refused_and_leaves_the_files(image_mid_segment, tmp_path):
    image = image_mid_segment
    sealed = layout.segment_name(0)
    data = image.files[sealed]
    for cut in range(0, len(data), 17):
        files = dict(image.files)
        files[sealed] = data[:cut]
        _assert_refused_untouched(image, tmp_path / "work", files, sealed)


def test_a_refused_open_keeps_temporary_files_as_evidence(image_mid_segment, tmp_path):
    image = image_mid_segment
    files = image.with_tail(image.tail[: image.covered_end - 1])
    files["checkpoint.tmp"] = image.files["checkpoint"]
    files[image.segment + ".tmp"] = image.tail[:100]
    _assert_refused_untouched(image, tmp_path / "work", files, image.segment)


def test_nul_bytes_over_records_a_checkpoint_covers_are_refused(image_mid_segment, tmp_path):
    image = image_mid_segment
    tail = image.tail
    covered = [s for s in image.line_starts() if s < image.covered_end]
    for start in covered:
        damaged = tail[:start] + b"\0" * (len(tail) - start)
        _assert_refused_untouched(image, tmp_path / "work", image.with_tail(damaged), image.segment)


def test_a_nul_line_followed_by_a_valid_record_is_not_a_crash_leftover(image_mid_segment, tmp_path):
    image = image_mid_segment
    tail = image.tail
    starts = [s for s in image.line_starts() if s >= image.covered_end]
    a, b = starts[0], starts[1]
    damaged = tail[:a] + b"\0" * (b - a - 1) + b"\n" + tail[b:]
    _assert_refused_untouched(image, tmp_path / "work", image.with_tail(damaged), image.segment)


# ---- segment 0 without a complete header ------------------------------------------------------


def test_a_crash_while_creating_the_log_is_recovered_by_creating_it_again(tmp_path):
    live = tmp_path / "live"
    LogWriter.open(live, KEY, seg_bits=SEG_BITS).close()
    header = (live / layout.segment_name(0)).read_bytes().split(b"\n")[0] + b"\n"
    for cut in (0, 1, len(header) // 2, len(header) - 1):
        work = tmp_path / f"work-{cut}"
        # What a crash before the first checkpoint leaves: a torn header, no checkpoint yet.
        write_files(work, {layout.segment_name(0): header[:cut], "checkpoint.tmp": b"x"})
        writer = LogWriter.open(work, KEY, seg_bits=SEG_BITS)
        writer.close()
        assert quarantine(work) == ({"seg-000000000000.0.torn": header[:cut]} if cut else {})
        assert not (work / "checkpoint.tmp").exists()
        assert [r.type for r in records(work)] == ["segment.open", "log.close"]
        assert_valid_local(work)


def test_a_torn_header_under_a_checkpoint_is_refused_not_recreated(tmp_path):
    live = tmp_path / "live"
    with LogWriter.open(live, KEY) as writer:  # one segment holds everything
        for i in range(5):
            writer.append(*_event(i))
    files = file_bytes(live)
    segment = layout.segment_name(0)
    header_end = files[segment].index(b"\n") + 1
    for cut in (0, 1, header_end // 2, header_end - 1):
        damaged = dict(files)
        damaged[segment] = files[segment][:cut]
        image = CrashImage(damaged, 0, 0, 7, 0)
        _assert_refused_untouched(image, tmp_path / "work", damaged, segment)


def test_a_torn_line_of_megabytes_is_quarantined_whole(tmp_path):
    live = tmp_path / "live"
    writer = LogWriter.open(live, KEY, seg_bits=SEG_BITS, checkpoint_interval=3600)
    try:
        writer.append(*_event(0))
        big = writer.append("acme", "s", "documents", "item.added", {"doc": "Zoë 𝄞 " * 150_000})
        files = file_bytes(live)
    finally:
        writer.close()
    segment = layout.segment_name(0)
    data = files[segment]
    start = data.index(b'{"v":1,"seq":%d,' % big.seq)
    cut = start + (len(data) - start) * 3 // 4
    files[segment] = data[:cut]
    newest = parse_checkpoint(files["checkpoint"].decode(), KEY.vkey).size
    assert newest <= big.seq
    image = CrashImage(files, 0, 0, newest, start)
    _assert_recovered_exactly(image, tmp_path / "work", data[:cut], start)
    assert len(quarantine(tmp_path / "work")[f"seg-000000000000.{start}.torn"]) > 1_000_000
