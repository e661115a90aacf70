"""Offline verification of a log directory (docs/format.md section 10).

The verifier reads files only: it never takes `LOCK` and never writes. It streams every segment
line by line, so its memory does not grow with the log: it keeps a Merkle compact range, a few
facts per segment boundary, and one entry per redaction, removed payload, restart and `ts`
decrease.

Shape:
- `inputs`: the vkey, the directory listing, segment 0's header, the `checkpoint` file, pins.
- `plan`: what each segment walk is given (`Plan`), fixed before the walks.
- `segment_walk`: one segment file checked on its own: every line through the format core
  (`eventstore.linecheck`, with an inline hot path for the common line), the chain within the
  file and the control rules (`control`). What it cannot know alone (the previous segment's
  last `h`, the Merkle roots of the records before it) it returns as claims.
- `stitch`: the segment results in order, checking the claims: chain links across files, seal
  roots, `prev_segment_root`, embedded checkpoints, the `checkpoint` file and pins; then the
  redactions, with a second, targeted read for targets whose payload is still present.
- `report`: the verdict and the report of section 10.
- `run`: `verify_log`, which ties them together.

With `jobs > 1` the segment walks run in worker processes and the stitcher stays in this one.
Both paths run the same two pieces of code, so they give the same report.
"""

from .inputs import VerifyInputError
from .report import (
    FAIL,
    INTACT_UNANCHORED,
    VALID_EXTERNAL,
    VALID_LOCAL,
    Anchor,
    RedactionFact,
    Report,
    Restart,
    TsDecrease,
    VerifyError,
)
from .run import verify_log

__all__ = [
    "FAIL",
    "INTACT_UNANCHORED",
    "VALID_EXTERNAL",
    "VALID_LOCAL",
    "Anchor",
    "RedactionFact",
    "Report",
    "Restart",
    "TsDecrease",
    "VerifyError",
    "VerifyInputError",
    "verify_log",
]
