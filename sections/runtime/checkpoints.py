"""Time travel's checkpoints: the projection at regular seqs, kept in memory, bounded by bytes.

Snapshots are few (the newest two, every SNAPSHOT_EVERY records), so a `state_at` before the
newest one used to replay the log from zero on every call. A replay for time travel leaves a
checkpoint behind every `EVERY` records (at seqs that are multiples of it, so overlapping
replays share them); the next call starts from the nearest checkpoint or snapshot at or before
its seq and replays at most `EVERY` records.

A checkpoint is the state's JSON (the snapshot format's `sections` projection), so loading one
gives a fresh state that the caller may change. They may hold content that an erase later
redacts from the log: `forget` drops them all, and a replay that began before the `forget`
stores nothing (`generation`).
"""

from __future__ import annotations

import bisect
import threading

import orjson

EVERY = 2048  # records between checkpoints: the most a cached `state_at` replays
MAX_BYTES = 64 * 1024 * 1024


class Checkpoints:
    def __init__(self, every: int = EVERY, max_bytes: int = MAX_BYTES) -> None:
        self.every = every
        self.max_bytes = max_bytes
        self.generation = 0
        self._lock = threading.Lock()
        self._seqs: list[int] = []  # sorted
        self._states: dict[int, bytes] = {}  # seq -> state JSON, least recently used first
        self._bytes = 0

    def nearest(self, at: int) -> tuple[int, bytes] | None:
        """The checkpoint with the greatest seq <= `at`, as (seq, state JSON)."""
        with self._lock:
            i = bisect.bisect_right(self._seqs, at)
            if i == 0:
                return None
            seq = self._seqs[i - 1]
            state = self._states.pop(seq)
            self._states[seq] = state  # most recently used: evicted last
            return seq, state

    def put(self, seq: int, state_json: dict, generation: int) -> None:
        data = orjson.dumps(state_json)
        with self._lock:
            if generation != self.generation or seq in self._states:
                return  # an erase happened since this replay began, or another replay was first
            if len(data) > self.max_bytes:
                return
            while self._bytes + len(data) > self.max_bytes:
                oldest = next(iter(self._states))
                self._bytes -= len(self._states.pop(oldest))
                self._seqs.remove(oldest)
            self._states[seq] = data
            bisect.insort(self._seqs, seq)
            self._bytes += len(data)

    def forget(self) -> None:
        """Drop every checkpoint (an erase redacted records they may quote)."""
        with self._lock:
            self.generation += 1
            self._seqs.clear()
            self._states.clear()
            self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes
