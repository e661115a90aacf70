"""A fixed clock and counted salts: the sequencer's inputs that make a log's bytes reproducible."""

from __future__ import annotations

import hashlib

FIXED_NS = 1_767_225_600_123_456_789  # a fixed clock, in nanoseconds


class CountingSalts:
    """Salts from a counter: reproducible, and distinct for every record."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> bytes:
        self.n += 1
        return hashlib.sha256(b"salt %d" % self.n).digest()[:16]
