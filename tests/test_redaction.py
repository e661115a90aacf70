"""Redaction (docs/format.md section 9): the payload is gone from every file, the log still
verifies, and a crash at any step of the rewrite leaves a log that opens and verifies.

What the writer does after a crash at each step (checked below):
- (a) the redaction record is durable but no segment was rewritten, with or without the
  checkpoint refresh: the crash image verifies, with the redaction reported as pending. Opening
  the log finishes the erase: nothing is appended after a redaction record until its rewrite is
  done, so an unfinished one is always the last record, and recovery rewrites its targets.
- (b) `seg-N.jsonl.tmp` is half-written beside the old segment: the same as (a); the open
  removes the half-written file, then finishes the erase.
- (c) the rename is done: the erase is complete.
In every case a second redact() of the target is then refused as already redacted.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

import pytest
from helpers.crashlog import (
    KEY,
    assert_valid_local,
    file_bytes,
    files_containing,
    records_by_seq,
    verdict_of,
    verify,
    write_files,
)

from eventstore import layout
from eventstore.errors import InvalidInput
from eventstore.layout import DataDir
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.store import open_log
from eventstore.writer import LogWriter

SEG_BITS = 3  # S = 8: segments seal every few records


def _secret(label: str) -> str:
    return f"SECRET-{label}-{secrets.token_hex(8)}"


def _personal(secret: str) -> dict:
    return {"text": f"my address is {secret}", "tags": ["contact", secret], "n": 1.5}


def _filler(i: int) -> tuple:
    return ("acme", "s-1", "messages", "item.added", {"i": i, "text": "nothing personal"})


class _Appenders:
    """Threads appending for as long as the test runs, pausable."""

    def __init__(self, writer: LogWriter, count: int = 2) -> None:
        self.writer = writer
        self.stop = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.idle = [threading.Event() for _ in range(count)]
        self.threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(count)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            if not self.go.is_set():
                self.idle[n].set()
                self.go.wait()
                self.idle[n].clear()
                continue
            self.writer.append(*_filler(n * 1_000_000 + i))
            i += 1

    def pause(self) -> None:
        self.go.clear()
        for idle in self.idle:
            assert idle.wait(10)

    def resume(self) -> None:
        self.go.set()

    def finish(self) -> None:
        self.stop.set()
        self.go.set()
        for thread in self.threads:
            thread.join()


def _make_quarantine(data: Path) -> None:
    """Leave a crash leftover in the data directory, so the search below walks quarantine/."""
    writer, _ = open_log(data, seg_bits=SEG_BITS)
    for i in range(3):
        writer.append(*_filler(i))
    writer.close()
    last = layout.list_segments(data / "log")[-1][1]
    with open(last, "ab") as f:
        f.write(b'{"v":1,"seq":')


def test_redaction_while_appending_erases_the_text_from_every_file_in_the_data_directory(
    tmp_path,
):
    data = DataDir(tmp_path / "data")
    _make_quarantine(data.root)
    writer, info = open_log(data.root, seg_bits=SEG_BITS)
    sealed_secret, active_secret = _secret("sealed"), _secret("active")
    appenders = _Appenders(writer)
    try:
        sealed = writer.append("acme", "s-2", "findings", "item.added", _personal(sealed_secret))
        while writer.size < ((sealed.seq >> SEG_BITS) + 2) << SEG_BITS:
            writer.wait_for(writer.size, timeout=1)  # the appenders move on past its segment
        # Readers save sparse indexes of the full segments they seek into, under DATA/index.
        _seek_every_segment(LogReader(data.log, index_dir=data.root / "index"))
        redact_sealed = writer.redact([sealed.seq], "erasure request", request="req-1")

        # A target in the active segment, with the redaction record in that same segment.
        appenders.pause()
        while not 1 <= writer.size & 7 <= 4:
            writer.append(*_filler(-1))
        active = writer.append("acme", "s-3", "messages", "item.added", _personal(active_secret))
        redact_active = writer.redact([active.seq], "erasure request", request="req-2")
        after = writer.append(*_filler(-2))
        appenders.resume()
        while writer.size < (redact_active.seq | 7) + 10:
            writer.wait_for(writer.size, timeout=1)
    finally:
        appenders.finish()
        writer.close()
    assert redact_active.seq == active.seq + 1
    assert after.seq >> SEG_BITS == active.seq >> SEG_BITS, "appends went on in the rewritten file"
    _seek_every_segment(LogReader(data.log, index_dir=data.root / "index"))

    report = assert_valid_local(data.log, info.key.vkey)
    facts = {r.seq: (r.targets, r.payload_removed, r.pending, r.covered) for r in report.redactions}
    assert facts == {
        redact_sealed.seq: ([sealed.seq], [sealed.seq], [], True),
        redact_active.seq: ([active.seq], [active.seq], [], True),
    }
    by_seq = records_by_seq(data.log)
    for target, redaction in ((sealed, redact_sealed), (active, redact_active)):
        erased = by_seq[target.seq]
        assert not erased.has_payload and erased.payload is None
        assert erased.redacted == redaction.seq
        assert (erased.h, erased.pd, erased.prev) == (target.h, target.pd, target.prev)
    assert by_seq[after.seq].payload == _filler(-2)[4]

    assert (data.log / layout.QUARANTINE).is_dir() and any((data.root / "index").iterdir())
    for needle in (sealed_secret, active_secret, sealed.salt, active.salt):
        assert files_containing(data.root, needle.encode()) == [], needle


# ---- a crash at each step of the rewrite -----------------------------------------------------


def _line_of(data: bytes, seq: int) -> bytes:
    prefix = b'{"v":1,"seq":%d,' % seq
    return next(line for line in data.split(b"\n") if line.startswith(prefix))


def _with_line(data: bytes, seq: int, line: bytes) -> bytes:
    """`data` with record `seq`'s line replaced by `line`."""
    old = _line_of(data, seq)
    assert data.count(old) == 1
    return data.replace(old, line)


def _crash_images(live: Path, target_in_active: bool, secret: str):
    """Crash images of one redaction: before it (`pre`) and after it completed (`post`), taken
    while the writer is open, and the states in between built from the two."""
    writer = LogWriter.open(live, KEY, seg_bits=SEG_BITS, checkpoint_interval=3600)
    try:
        writer.append_batch([_filler(i) for i in range(10)])
        while not 1 <= writer.size & 7 <= 4:
            writer.append(*_filler(1))
        target = writer.append("acme", "s-2", "findings", "item.added", _personal(secret))
        if not target_in_active:
            while writer.size & 7 != 2:  # past its segment, with room for the redaction record
                writer.append(*_filler(2))
        assert 1 <= writer.size & 7 <= 5, "the redaction record must not rotate"
        pre = file_bytes(live)
        redaction = writer.redact([target.seq], "erasure request")
        post = file_bytes(live)
    finally:
        writer.close()
    name = layout.segment_name(target.seq >> SEG_BITS)
    assert (name == layout.segment_name(redaction.seq >> SEG_BITS)) is target_in_active
    original = _line_of(pre[name], target.seq)
    not_rewritten = dict(post)
    not_rewritten[name] = _with_line(post[name], target.seq, original)
    before_checkpoint = dict(not_rewritten)
    before_checkpoint["checkpoint"] = pre["checkpoint"]
    half_written = dict(not_rewritten)
    half_written[name + ".tmp"] = post[name][: len(post[name]) // 2]
    images = {
        "a0-redaction-durable-checkpoint-not-refreshed": before_checkpoint,
        "a-redaction-durable-segment-not-rewritten": not_rewritten,
        "b-tmp-half-written-beside-the-old-segment": half_written,
        "c-after-the-rename": post,
    }
    return images, target, redaction


@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_crash_at_any_step_of_the_rewrite_leaves_a_log_that_opens_verifies_and_can_erase(
    tmp_path, where
):
    secret = _secret(where)
    images, target, redaction = _crash_images(tmp_path / "live", where == "active", secret)
    for step, files in images.items():
        work = tmp_path / step
        write_files(work, files)
        complete = step.startswith("c-")

        crashed = verify(work)
        assert verdict_of(crashed) == "VALID-LOCAL", (step, crashed.error)
        (fact,) = crashed.redactions
        assert fact.seq == redaction.seq
        assert fact.pending == ([] if complete else [target.seq]), step
        assert fact.covered is not step.startswith("a0-"), step

        writer = LogWriter.open(work, KEY)
        try:
            assert writer.last_resume["clean"] is False
            assert not list(work.glob("*.tmp")), f"{step}: the half-written file is removed"
            assert files_containing(work, secret.encode()) == [], (
                f"{step}: the open finishes the erase"
            )
            with pytest.raises(InvalidInput, match="already redacted"):
                writer.redact([target.seq], "retry")
        finally:
            writer.close()

        report = assert_valid_local(work)
        assert {r.seq: r.payload_removed for r in report.redactions} == {
            redaction.seq: [target.seq]
        }, step
        assert all(not r.pending for r in report.redactions), step
        erased = records_by_seq(work)[target.seq]
        assert not erased.has_payload
        assert erased.redacted == redaction.seq
        for needle in (secret, target.salt):
            assert files_containing(work, needle.encode()) == [], (step, needle)


# ---- refused redactions ----------------------------------------------------------------------


def test_refused_redactions_raise_a_typed_error_and_append_nothing(tmp_path):
    log = tmp_path / "log"
    secret = _secret("kept")
    writer = LogWriter.open(log, KEY, seg_bits=SEG_BITS, checkpoint_interval=3600)
    try:
        kept: Record = writer.append("acme", "s", "x", "item.added", _personal(secret))
        gone = writer.append("acme", "s", "x", "item.added", _personal(_secret("gone")))
        writer.redact([gone.seq], "erasure")
        writer.append_batch([_filler(i) for i in range(8)])
        control = next(r for r in records_by_seq(log).values() if r.type == "segment.seal")
        before = file_bytes(log)
        refused = {
            "segment.seal": [control.seq],
            "segment.open": [0],
            "unknown seq": [writer.size],
            "far unknown seq": [writer.size + 1000],
            "negative seq": [-1],
            "already redacted": [gone.seq],
            "no target": [],
            "a good seq beside a control record": [kept.seq, control.seq],
            "a good seq beside an unknown one": [kept.seq, writer.size + 5],
        }
        for case, seqs in refused.items():
            size = writer.size
            with pytest.raises(InvalidInput):
                writer.redact(seqs, "erasure")
            assert writer.size == size, case
            assert file_bytes(log) == before, f"{case}: the files changed"
        assert records_by_seq(log)[kept.seq].payload == _personal(secret)
        after = writer.append(*_filler(2))  # the writer still takes appends
        assert after.seq == size
    finally:
        writer.close()
    assert_valid_local(log)


def test_concurrent_redactions_of_one_record_erase_it_once(tmp_path):
    log = tmp_path / "log"
    writer = LogWriter.open(log, KEY, seg_bits=SEG_BITS, checkpoint_interval=3600)
    outcomes: list[object] = []
    try:
        for round_ in range(5):
            target = writer.append("acme", "s", "x", "item.added", _personal(_secret("twice")))
            start = threading.Barrier(4)

            def redact(target_seq: int = target.seq, start=start) -> None:
                start.wait()
                try:
                    outcomes.append(writer.redact([target_seq], "erasure").seq)
                except InvalidInput as exc:
                    outcomes.append(exc)

            threads = [threading.Thread(target=redact) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            done = [o for o in outcomes[-4:] if isinstance(o, int)]
            assert len(done) == 1, f"round {round_}: {outcomes[-4:]}"
            assert all("already redacted" in str(o) for o in outcomes[-4:] if o not in done)
    finally:
        writer.close()
    redactions = [r for r in records_by_seq(log).values() if r.type == "redaction"]
    assert len(redactions) == 5, "one redaction record per erased record"
    assert_valid_local(log)


def _seek_every_segment(reader: LogReader) -> None:
    """A read from the middle of each segment, which is what builds (and saves) its seek index."""
    for seq in range(1, reader.head(), 1 << reader.seg_bits):
        next(reader.lines(seq), None)
