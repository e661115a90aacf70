"""A write that fails for real (docs/format.md section 7): the segment is cut back to the last
durable line, nothing after it is acknowledged, the writer refuses appends until it is reopened,
and reopening recovers a log that verifies.

The failure is the kernel's, not a mock: the writer subprocess runs under RLIMIT_FSIZE, so the
write that crosses the limit comes back short and the next one fails with EFBIG.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import orjson
from helpers.crashlog import (
    CRASH_WRITER,
    KEY,
    ORIGIN,
    SEED,
    assert_valid_local,
    quarantine,
    records_by_seq,
)

from eventstore import layout
from eventstore.writer import LogWriter

LIMIT = 48 * 1024  # bytes any file of the writer process may reach


def test_a_write_that_fails_midway_is_cut_back_and_nothing_after_it_is_acknowledged(tmp_path):
    log = tmp_path / "log"
    done = subprocess.run(
        [sys.executable, str(CRASH_WRITER), str(log), SEED.hex(), ORIGIN, "16", "3", "efbig",
         str(LIMIT)],
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.splitlines()
    assert lines[0].startswith(b"ready ") and lines[-1] == b"closed"
    refused = [line for line in lines if line.startswith(b"refused ")]
    assert len(refused) >= 5, "all five appenders were refused"
    assert set(refused) == {b"refused WriterClosed"}, "by a typed error"
    acked = {}
    for line in lines[1:-1]:
        head, _, rest = line.partition(b" ")
        if head not in (b"refused", b"redacted"):
            acked[int(head)] = orjson.loads(rest)
    assert len(acked) > 20

    segment = (log / layout.segment_name(0)).read_bytes()
    assert segment.endswith(b"\n"), "the failed line was cut back: no partial line remains"
    assert len(segment) < LIMIT
    by_seq = records_by_seq(log)
    for seq, payload in acked.items():
        record = by_seq[seq]
        assert record.payload == payload or not record.has_payload, f"seq {seq} is missing"
    assert by_seq[max(by_seq)].type != "log.close", "a failed writer appends nothing more"
    assert max(acked) <= max(by_seq)

    writer = LogWriter.open(log, KEY)
    try:
        resume = writer.last_resume
    finally:
        writer.close()
    assert (resume["clean"], resume["torn_bytes"]) == (False, 0)
    assert quarantine(log) == {}
    assert_valid_local(log)


_WAIT_ON_A_FAILING_WRITE = textwrap.dedent(
    """
    import os, resource, signal, sys, threading
    from eventstore.checkpoint import SigningKey
    from eventstore.writer import LogWriter

    key = SigningKey.from_seed(sys.argv[2], bytes.fromhex(sys.argv[3]))
    writer = LogWriter.open(sys.argv[1], key)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[4]), resource.RLIM_INFINITY))
    threading.Timer(10, lambda: (print("hung", flush=True), os._exit(2))).start()
    # Records in flight that the write crossing the limit will never make durable.
    pending = writer.submit([("acme", "s", "m", "t", {"text": "x" * 1000})] * 100)
    last = pending.records[-1].seq
    for name, call in (
        ("wait_for", lambda: writer.wait_for(last)),
        ("redact", lambda: writer.redact([last], "erasure")),
        ("wait", pending.wait),
    ):
        try:
            call()
            print(name, "returned", flush=True)
        except Exception as exc:
            print(name, type(exc).__name__, flush=True)
    os._exit(0)
    """
)


def test_waiting_for_records_a_failed_write_dropped_raises_instead_of_hanging(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _WAIT_ON_A_FAILING_WRITE, str(tmp_path / "log"), ORIGIN,
         SEED.hex(), str(LIMIT)],
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr.decode())
    assert done.stdout.decode().splitlines() == [
        "wait_for WriterClosed",
        "redact WriterClosed",
        "wait WriterClosed",
    ]
