"""kill -9 of a process using the memory API: acknowledged adds survive, and a retry of any
idempotency key after the crash returns the first record instead of adding twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from sections.runtime.memory import Memory
from tests.helpers.child import readline_within

HELPERS = Path(__file__).parent / "helpers"
ROOT = Path(__file__).parent.parent
ROUNDS = 5


def _run_and_kill(data_dir: Path, rng: random.Random) -> list[tuple[str, str, str]]:
    proc = subprocess.Popen(
        [sys.executable, str(HELPERS / "memory_worker.py"), str(data_dir), "6", "400"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert readline_within(proc.stdout, 60, "the memory worker").strip() == b"ready"
    time.sleep(rng.uniform(0.05, 0.4))
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    acks = []
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 3:  # a line cut by the kill is not an acknowledgement
            acks.append((parts[0], parts[1], parts[2]))
    return acks


def test_acknowledged_adds_survive_kill9_and_retries_are_recognised(tmp_path):
    rng = random.Random(7)
    data_dir = tmp_path / "data"
    acked: dict[str, tuple[str, str]] = {}
    for _ in range(ROUNDS):
        for key, session, item in _run_and_kill(data_dir, rng):
            acked[key] = (session, item)
        with Memory.open(data_dir, seg_bits=5) as mem:
            held = mem.read(
                lambda memory_state: {
                    (sid, item.id): item.content
                    for (_, sid), state in memory_state.sessions.items()
                    for item in state.sections["findings"].items.values()
                }
            )
            for key, (session, item) in acked.items():
                assert held.get((session, item)) == f"finding {key}", f"acknowledged {key} was lost"
            contents = list(held.values())
            assert len(contents) == len(set(contents)), "an item was added twice"
            # Retry every acknowledged key: nothing new may be appended.
            before = mem.writer.next_seq
            for key, (session, item) in list(acked.items())[:200]:
                again = mem.session(session).add("findings", f"finding {key}", idempotency_key=key)
                assert again.id == item
            assert mem.writer.next_seq == before
            assert mem.rebuild(use_snapshots=False).state_hash() == mem.state_hash()
    assert len(acked) > 100, "the rounds should acknowledge a good number of adds"
