"""kill -9 of a real writer process loses no acknowledged record (docs/format.md sections 7 and 8).

A writer subprocess (tests/helpers/crash_writer.py) appends durably from three threads, a
thread of batches and an asyncio task, and prints one line per acknowledged record; a fourth
thread redacts some of those records, so kills also land inside a segment rewrite. After a
random short delay the test sends SIGKILL, reopens the directory with LogWriter (recovery),
and checks that every printed record is there with the same payload, that recovery appended
log.resume with clean=false, and that the log verifies against the key. Rounds share a log in
chains, so recovery also runs over earlier recoveries; small seg_bits put many kills inside a
rotation. Some kills are sent without waiting for the writer to be ready, so they can land
inside the child's own recovery of the previous crash.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from helpers.child import start_child
from helpers.crashlog import (
    CRASH_WRITER,
    KEY,
    ORIGIN,
    SEED,
    assert_valid_local,
    files_containing,
    quarantine,
    records,
    records_by_seq,
    sha256_hex,
    verdict_of,
    verify,
)

from eventstore.writer import LogWriter

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# About 0.35 s a round on a 2-core box. LEDGERMEM_KILL9_ROUNDS=500 for a long hunt.
ROUNDS = int(os.environ.get("LEDGERMEM_KILL9_ROUNDS", 60 if IN_CI else 24))
CHAIN = 5  # rounds that share one log directory
SEG_BITS = (3, 2, 16, 4, 5)  # one per chain, in turn: S = 8, 4, 65536, 16, 32 records
THREADS = 3
MAX_DELAY = 0.25  # seconds between "ready" and the kill


@dataclass
class Round:
    acked: dict[int, dict] = field(default_factory=dict)  # seq -> payload the child was told
    ready: bool = False
    refused: list[bytes] = field(default_factory=list)  # appends that raised in the child
    redacted: dict[int, int] = field(default_factory=dict)  # target seq -> redaction seq
    returncode: int | None = None
    stderr: bytes = b""


def _run_until_killed(log_dir: Path, seg_bits: int, tag: str, delay: float, wait_ready: bool):
    """Start the writer, kill -9 it `delay` seconds after it is ready (or after it started)."""
    round_ = Round()
    child = start_child(
        [sys.executable, str(CRASH_WRITER), str(log_dir), SEED.hex(), ORIGIN, str(seg_bits),
         str(THREADS), tag]
    )  # fmt: skip
    proc, lines, ready, reader = child.proc, child.lines, child.ready, child.reader
    try:
        if wait_ready:
            assert ready.wait(20), f"the writer never got ready: {proc.stderr.read()!r}"  # type: ignore[union-attr]
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join()
    round_.returncode = proc.returncode
    round_.stderr = proc.stderr.read()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    for line in lines:
        assert line.endswith(b"\n"), f"a torn acknowledgement line: {line!r}"
        head, _, rest = line.partition(b" ")
        if head == b"ready":
            round_.ready = True
            continue
        if head == b"refused":
            round_.refused.append(line)
            continue
        if head == b"redacted":
            target, redaction = map(int, rest.split())
            round_.redacted[target] = redaction
            continue
        seq = int(head)
        assert seq not in round_.acked, f"seq {seq} acknowledged twice"
        round_.acked[seq] = orjson.loads(rest)
    return round_


def _last_event_is_close(log_dir: Path) -> bool:
    """From the files: was the last record (seal/open aside) a log.close?"""
    for record in reversed(records(log_dir)):
        if record.type not in ("segment.open", "segment.seal"):
            return record.type == "log.close"
    return False


def _killed_inside_a_rotation(log_dir: Path) -> bool:
    """The crash image ends with a segment.seal, or with a segment still without its open."""
    last = sorted(log_dir.glob("seg-*.jsonl"))[-1].read_bytes()
    complete = last[: last.rfind(b"\n") + 1]
    return not complete or complete.rsplit(b"\n", 2)[-2].find(b'"type":"segment.seal"') > 0


def _reopen(log_dir: Path) -> dict:
    writer = LogWriter.open(log_dir, KEY)
    resume = writer.last_resume
    writer.close()
    assert resume is not None, "recovery appended no log.resume"
    return resume


def _check_after_recovery(
    log_dir: Path, acked: dict[int, dict], redacted: dict[int, int], resume: dict, clean: bool
):
    assert resume["clean"] is clean
    if resume["torn_bytes"]:
        fragments = {sha256_hex(data): len(data) for data in quarantine(log_dir).values()}
        assert fragments.get(resume["fragment_sha256"]) == resume["torn_bytes"]
    else:
        assert resume["fragment_sha256"] is None

    by_seq = records_by_seq(log_dir)
    report = assert_valid_local(log_dir)
    # A redaction in flight at the kill may have erased a payload without telling anyone;
    # then a durable redaction record names it, and the verifier checked that it does.
    authorized = {t for r in report.redactions for t in r.payload_removed}
    for seq, payload in acked.items():
        record = by_seq.get(seq)
        assert record is not None, f"acknowledged seq {seq} is gone after kill -9"
        if seq in redacted:
            assert not record.has_payload, f"seq {seq} was erased, and is back"
            assert record.redacted is not None
            quoted_id = orjson.dumps(payload["id"])  # quoted: ".../5" is inside ".../50"
            assert files_containing(log_dir, quoted_id) == [], payload["id"]
        elif record.has_payload:
            assert record.payload == payload, f"seq {seq} holds another payload"
        else:
            assert seq in authorized, f"seq {seq} lost its payload without a redaction"
    ids = [r.payload["id"] for r in by_seq.values() if r.tenant == "acme" and r.has_payload]
    assert len(ids) == len(set(ids)), "an append landed twice"

    assert report.torn_bytes == 0, "recovery left a torn tail behind"
    last = report.restarts[-1]
    assert (last.clean, last.torn_bytes) == (clean, resume["torn_bytes"])
    return report


def test_kill9_never_loses_an_acknowledged_record(tmp_path):
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    started = time.monotonic()
    stats = {"acked": 0, "redacted": 0, "torn": 0, "in_rotation": 0, "killed_before_ready": 0}
    acked: dict[int, dict] = {}
    redacted: dict[int, int] = {}
    log_dir = tmp_path / "log-0"
    for n in range(ROUNDS):
        position = n % CHAIN
        if position == 0:
            log_dir = tmp_path / f"log-{n // CHAIN}"
            acked, redacted = {}, {}
        seg_bits = SEG_BITS[(n // CHAIN) % len(SEG_BITS)]
        # Every third round after the first of a chain: kill at a random moment from the
        # start, which may fall inside the child's recovery of the previous round's crash.
        wait_ready = position == 0 or position % 3 != 2
        delay = rng.uniform(0.0, MAX_DELAY) if wait_ready else rng.uniform(0.05, 0.4)
        round_ = _run_until_killed(log_dir, seg_bits, f"r{n}", delay, wait_ready)
        context = f"round {n} (seg_bits {seg_bits}, delay {delay:.3f}, ready {round_.ready})"
        assert round_.returncode == -signal.SIGKILL, f"{context}: {round_.stderr.decode()}"
        assert b"Traceback" not in round_.stderr, f"{context}: {round_.stderr.decode()}"
        assert not round_.refused, f"{context}: appends failed before the kill {round_.refused}"
        if not (log_dir / "seg-000000000000.jsonl").exists():
            assert not round_.ready and not round_.acked  # killed before it created the log
            stats["killed_before_ready"] += 1
            continue

        clean = False if round_.ready else _last_event_is_close(log_dir)
        stats["in_rotation"] += _killed_inside_a_rotation(log_dir)
        acked.update(round_.acked)
        redacted.update(round_.redacted)
        crashed = verify(log_dir)  # the crash image itself, before recovery touches it
        assert verdict_of(crashed) == "VALID-LOCAL", f"{context}: {crashed.error}"
        resume = _reopen(log_dir)
        assert resume["torn_bytes"] == crashed.torn_bytes, f"{context}: {resume}"
        try:
            _check_after_recovery(log_dir, acked, redacted, resume, clean)
        except AssertionError as exc:
            raise AssertionError(f"{context}: {exc}") from exc
        stats["acked"] += len(round_.acked)
        stats["redacted"] += len(round_.redacted)
        stats["torn"] += bool(resume["torn_bytes"])
        stats["killed_before_ready"] += not round_.ready

    elapsed = time.monotonic() - started
    print(f"kill -9: {ROUNDS} rounds in {elapsed:.1f}s, {stats}")
    assert stats["acked"] > ROUNDS * 10, f"the writers acknowledged too little to test: {stats}"
