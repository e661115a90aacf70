"""The background verifier: checks each new record as it lands, and each new checkpoint.

It walks the log from seq 0 at start-up and then follows the head, with the format core's full
per-line check (`eventstore.linecheck.check_line`: strict parse, keys, types, identifiers,
seq, prev, pd, h, segment positions), the same as crash recovery and `ledgermem verify` run;
it keeps its own Merkle
compact range, and checks every checkpoint it sees (signature and root) once it has verified
the records the checkpoint covers. It reads the files only, like an auditor would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from eventstore import layout
from eventstore.checkpoint import Checkpoint, CheckpointError, VerifierKey, parse_checkpoint
from eventstore.linecheck import LineError, check_line
from eventstore.merkle import CompactRange
from eventstore.reader import LogReader
from eventstore.record import genesis


@dataclass
class Verdict:
    state: str = "catching_up"  # then "ok", or "failed"
    verified_through: int = -1
    checkpoint_verified: int = 0
    error: str | None = None
    checked_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state,
            "verified_through": self.verified_through,
            "checkpoint_verified": self.checkpoint_verified,
            "error": self.error,
        }


class BackgroundVerifier:
    def __init__(
        self, log_dir: Path, vkey: VerifierKey, head: Callable[[], int], interval: float = 0.5
    ) -> None:
        self.log_dir = log_dir
        self.vkey = vkey
        self.head = head  # the durable head seq, from the writer
        self.interval = interval
        self.verdict = Verdict()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgermem-verifier", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        reader = LogReader(self.log_dir)
        prev = genesis(reader.origin)
        tree = CompactRange()
        seq = -1
        while not self._stop.is_set():
            try:
                checkpoint = self._checkpoint()
                target = self.head()
                for at, line in reader.lines(seq, target + 1):
                    h = check_line(line, seq=at, prev=prev, seg_bits=reader.seg_bits).h
                    tree.append(h)
                    prev, seq = h, at
                    if checkpoint is not None and tree.size == checkpoint.size:
                        self._check_root(checkpoint, tree)
                    if self._stop.is_set():
                        return
                # A checkpoint written just after this tick's reads ended lands exactly here.
                if (
                    checkpoint is not None
                    and tree.size == checkpoint.size > self.verdict.checkpoint_verified
                ):
                    self._check_root(checkpoint, tree)
                self.verdict.verified_through = seq
                self.verdict.checked_at = time.time()
                self.verdict.error = None  # a read error of an earlier tick is over
                if self.verdict.state == "catching_up" and seq >= target:
                    self.verdict.state = "ok"
            except LineError as exc:
                self.verdict.state = "failed"
                self.verdict.error = f"seq {seq + 1}: [{exc.check}] {exc}"
                return
            except (ValueError, KeyError, TypeError, CheckpointError) as exc:
                self.verdict.state = "failed"
                self.verdict.error = f"seq {seq + 1}: {exc}"
                return
            except (
                OSError
            ) as exc:  # e.g. a segment renamed over by a redaction: look again next tick
                self.verdict.error = f"reading the files: {exc} (retrying)"
            self._stop.wait(self.interval)

    def _checkpoint(self) -> Checkpoint | None:
        try:
            text = (self.log_dir / layout.CHECKPOINT).read_text("utf-8")
        except FileNotFoundError:
            return None
        return parse_checkpoint(text, self.vkey)

    def _check_root(self, checkpoint: Checkpoint, tree: CompactRange) -> None:
        if tree.root() != checkpoint.root:
            raise ValueError(
                f"checkpoint of size {checkpoint.size} does not match the records' Merkle root"
            )
        self.verdict.checkpoint_verified = checkpoint.size
