"""What every segment walk of one verification is given: fixed before the walks start.

Its own module because both the walk (segment_walk.py) and the control-record rules it applies
(control.py) read it, and the walk imports those rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Plan:
    """Everything a segment walk needs, fixed before the walk (picklable for worker processes)."""

    log_dir: Path
    seg_bits: int
    origin: str
    vkey: str
    auditor_vkey: str | None
    strict: bool
    last: int  # number of the last segment file present
    queries: list[int]  # tree sizes whose roots the stitcher needs (checkpoint file, pins)
    covered: int  # records covered by the checkpoint file and pins: they rule out leftovers
