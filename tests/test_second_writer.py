"""One writer per log directory (docs/format.md section 7): a second one gets LockHeld, naming
the holder, whether it is in this process or another, and touches no file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.child import readline_within
from helpers.crashlog import (
    CRASH_WRITER,
    KEY,
    ORIGIN,
    SEED,
    assert_valid_local,
    file_bytes,
)

from eventstore.errors import LockHeld
from eventstore.store import open_log
from eventstore.writer import LogWriter

_TRY_TO_OPEN = textwrap.dedent(
    """
    import json, sys
    from eventstore.checkpoint import SigningKey
    from eventstore.writer import LogWriter

    key = SigningKey.from_seed(sys.argv[2], bytes.fromhex(sys.argv[3]))
    try:
        LogWriter.open(sys.argv[1], key).close()
        print(json.dumps({"opened": True}))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    """
)


def _open_in_another_process(log: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _TRY_TO_OPEN, str(log), ORIGIN, SEED.hex()],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def _event(i: int) -> tuple:
    return ("acme", "s", "messages", "item.added", {"i": i})


def test_a_second_writer_in_this_process_gets_lock_held_naming_this_pid(tmp_path):
    log = tmp_path / "log"
    first = LogWriter.open(log, KEY, seg_bits=3, checkpoint_interval=3600)
    try:
        first.append(*_event(1))
        before = file_bytes(log, skip_lock=False)
        with pytest.raises(LockHeld) as refused:
            LogWriter.open(log, KEY)
        assert f"pid={os.getpid()}" in str(refused.value)
        assert file_bytes(log, skip_lock=False) == before, "the refused writer touched a file"
        assert first.append(*_event(2)).seq == first.size - 1, "the holder goes on appending"
    finally:
        first.close()
    LogWriter.open(log, KEY).close()  # released on close
    assert_valid_local(log)


def test_a_second_data_directory_opener_gets_lock_held(tmp_path):
    writer, _ = open_log(tmp_path / "data")
    try:
        with pytest.raises(LockHeld, match=f"pid={os.getpid()}"):
            open_log(tmp_path / "data")
    finally:
        writer.close()


def test_a_writer_in_another_process_gets_lock_held_naming_this_pid(tmp_path):
    log = tmp_path / "log"
    with LogWriter.open(log, KEY, seg_bits=3, checkpoint_interval=3600) as writer:
        writer.append(*_event(1))
        before = file_bytes(log, skip_lock=False)
        outcome = _open_in_another_process(log)
        assert outcome["error"] == "LockHeld", outcome
        assert f"pid={os.getpid()}" in outcome["message"]
        assert file_bytes(log, skip_lock=False) == before
        writer.append(*_event(2))
    assert _open_in_another_process(log) == {"opened": True}


def test_a_writer_process_holds_the_lock_until_it_dies_even_by_kill9(tmp_path):
    log = tmp_path / "log"
    LogWriter.open(log, KEY, seg_bits=4).close()
    proc = subprocess.Popen(
        [sys.executable, str(CRASH_WRITER), str(log), SEED.hex(), ORIGIN, "4", "1", "holder"],
        stdout=subprocess.PIPE,
    )
    try:
        assert readline_within(proc.stdout, 60, "the lock holder").startswith(b"ready ")
        with pytest.raises(LockHeld) as refused:
            LogWriter.open(log, KEY)
        assert f"pid={proc.pid}" in str(refused.value)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    writer = LogWriter.open(log, KEY)  # the kernel dropped the flock with the process
    try:
        assert writer.last_resume["clean"] is False
    finally:
        writer.close()
    assert_valid_local(log)
