"""What a subscriber checks of each record as it arrives, with the format core's own functions.

Pure. `ChainCheck.check(line)` runs, in this order:

1. `record.*`: `eventstore.linecheck.check_line` on the line alone: a well-formed record (v,
   seq, ts, identifiers, hex fields), its `pd` recomputed from its salt and its payload's JCS
   bytes (skipped for a redacted line, which has none), and its `h` recomputed from `prev`,
   seq, ts, the four identifiers and `pd`. A record whose bytes were changed fails here,
   whatever the filter.
2. `stream.order`: its seq is above the previous record's.
3. `stream.prev`: when its seq is the previous record's plus one, its `prev` is that record's
   `h`. This holds on every stream, filtered or not: two records adjacent in the log that both
   match the filter must link.
4. `stream.gap`: on a contiguous stream (every record of the log: no filter, no tenant forced
   by a token), its seq is the previous one's plus one; with 3 this makes the records seen an
   unbroken hash chain.
5. `stream.genesis`: seq 0's `prev` is the genesis hash of the log's origin: the `origin` the
   caller pinned, else the one its own `segment.open` payload names (which proves only that
   the record agrees with itself; pin the origin to check it against the log you expect).

The "previous record" of the first record is the caller's: `after` and `after_h` (the seq and
`h` of the last record it saw, e.g. kept from an earlier subscription). Without `after_h` the
first record's link is not checked; from then on, across reconnects, every link is.

What is not checked here: that the records are the log's (that needs a signed checkpoint and an
inclusion proof, `ledgermem proof`), and, on a filtered stream, that no matching record was left
out between two non-adjacent seqs (the filter hides the records that would link them).
"""

from __future__ import annotations

from eventstore.linecheck import CheckedLine, LineError, check_line
from eventstore.record import SEGMENT_OPEN, genesis
from streams.client.errors import ChainBroken


class ChainCheck:
    def __init__(
        self,
        *,
        contiguous: bool,
        after: int = -1,
        after_h: str | None = None,
        origin: str | None = None,
    ) -> None:
        self.contiguous = contiguous
        self.seq = after  # -1: nothing seen yet
        self.h = after_h
        self.origin = origin

    def check(self, line: bytes) -> CheckedLine:
        try:
            checked = check_line(line)
        except LineError as exc:
            raise ChainBroken(
                exc.check, f"a streamed record fails {exc.check}: {exc}", line
            ) from exc
        record = checked.obj
        seq = record["seq"]
        if seq <= self.seq:
            raise ChainBroken("stream.order", f"record {seq} arrived after record {self.seq}", line)
        if seq == self.seq + 1 and self.h is not None and record["prev"] != self.h:
            raise ChainBroken(
                "stream.prev",
                f"record {seq} does not link to record {self.seq}: its prev is "
                f"{record['prev']}, record {self.seq}'s h is {self.h}",
                line,
            )
        if self.contiguous and seq != self.seq + 1:
            raise ChainBroken(
                "stream.gap", f"record {seq} follows record {self.seq}: the stream has a gap", line
            )
        if seq == 0:
            self._check_genesis(record, line)
        self.seq, self.h = seq, record["h"]
        return checked

    def _check_genesis(self, record: dict, line: bytes) -> None:
        origin = self.origin
        if origin is None and record["type"] == SEGMENT_OPEN:
            payload = record.get("payload")
            origin = payload.get("origin") if isinstance(payload, dict) else None
        if origin is None:
            return
        if record["prev"] != genesis(origin).hex():
            raise ChainBroken(
                "stream.genesis", f"record 0 does not start the log of origin {origin!r}", line
            )
