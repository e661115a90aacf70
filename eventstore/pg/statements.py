"""Every statement that writes the log's tables, in one place (docs/scale-out-log.md: the service writes the
log only through the append, takeover, renew and redaction statements, never ad hoc).

A reviewer who wants to know how a replica can change the store reads this module and nothing
else: lease.py, sink.py and recovery.py import these strings and never build writing SQL of
their own. Each write is fenced on the head row of its partition (lm_head): it changes the log
only while (epoch, owner) still name the writer and, for appends, while the head still holds the
batch's predecessor (last_seq, last_h). A fenced statement changes nothing and says so by the
rows it returns.

Reads (the head, rows, checkpoints, segment roots) are plain SELECTs next to their users.
"""

from __future__ import annotations

from .schema import NOTIFY_CHANNEL

# ---- leadership (lease.py) -------------------------------------------------------------------

# Takeover: only when the lease expired (or was released) by the database's clock. The epoch is
# the fencing token: every later write of the old owner names the old epoch and matches nothing.
TAKE = """
UPDATE lm_head
   SET epoch = epoch + 1, owner = %(owner)s,
       lease_until = now() + %(seconds)s * interval '1 second'
 WHERE partition = %(partition)s AND lease_until < now()
RETURNING epoch
"""

RENEW = """
UPDATE lm_head
   SET lease_until = now() + %(seconds)s * interval '1 second'
 WHERE partition = %(partition)s AND epoch = %(epoch)s AND owner = %(owner)s
RETURNING epoch
"""

# A released lease is expired at once, so another replica can take it without waiting.
RELEASE = """
UPDATE lm_head
   SET lease_until = now() - interval '1 microsecond'
 WHERE partition = %(partition)s AND epoch = %(epoch)s AND owner = %(owner)s
"""

# ---- appends (sink.py) -----------------------------------------------------------------------

# One statement, one transaction: advance the head only if it is the batch's predecessor under
# our epoch, insert the rows only if the head moved, renew the lease, and NOTIFY
# "partition:first:last" (never the lines). Answers (rows inserted, head moved): (n, true) is a
# commit, (0, false) a refusal. The arrays go in binary (%b): text would hex-encode every line,
# about five times the client's CPU per record.
_HEAD = """
WITH head AS (
    UPDATE lm_head
       SET last_seq = %(last_seq)s, last_h = %(last_h)s,
           lease_until = greatest(lease_until, now() + %(seconds)s * interval '1 second')
     WHERE partition = %(partition)s AND last_seq = %(first_seq)s - 1 AND last_h = %(prev)s
       AND epoch = %(epoch)s AND owner = %(owner)s
    RETURNING partition
), rows AS (
    INSERT INTO lm_record (partition, seq, h, line)
    SELECT head.partition, r.seq, r.h, r.line
      FROM head, unnest(%(seqs)b::bigint[], %(hs)b::bytea[], %(lines)b::bytea[]) AS r(seq, h, line)
    RETURNING 1
)"""

_ANSWER = f"""
SELECT (SELECT count(*) FROM rows),
       (SELECT count(*) FROM (SELECT pg_notify('{NOTIFY_CHANNEL}', %(note)s) FROM head) AS n)
"""

APPEND = _HEAD + _ANSWER

# A segment's segment.open, with the root of the segment it follows (a takeover rebuilds the
# Merkle state from these) and the checkpoint embedded in the open, all or nothing.
START_SEGMENT = (
    _HEAD
    + """, root AS (
    INSERT INTO lm_segment_root (partition, segment, root)
    SELECT head.partition, %(sealed_segment)s, %(sealed_root)s FROM head
    RETURNING 1
), checkpoint AS (
    INSERT INTO lm_checkpoint (partition, size, text, epoch)
    SELECT head.partition, %(cp_size)s, %(cp_text)s, %(epoch)s FROM head
    ON CONFLICT DO NOTHING
    RETURNING 1
)"""
    + _ANSWER
)

# A signed checkpoint, only under our epoch and only for records the head holds.
INSERT_CHECKPOINT = """
INSERT INTO lm_checkpoint (partition, size, text, epoch)
SELECT partition, %(size)s, %(text)s, epoch FROM lm_head
 WHERE partition = %(partition)s AND epoch = %(epoch)s AND owner = %(owner)s
   AND last_seq >= %(size)s - 1
ON CONFLICT DO NOTHING
RETURNING size
"""

# ---- redaction (sink.py) ---------------------------------------------------------------------

# Inside one transaction: lock the head row, check it is still ours, then rewrite the targets.
LOCK_HEAD_IF_OURS = """
SELECT last_seq FROM lm_head
 WHERE partition = %(partition)s AND epoch = %(epoch)s AND owner = %(owner)s
   FOR UPDATE
"""

REWRITE_LINE = """
UPDATE lm_record SET line = %(line)s WHERE partition = %(partition)s AND seq = %(seq)s
"""

# Outside any transaction: the erased bytes leave the table's live pages (WAL, standbys and
# backups keep them until their retention ends: docs/scale-out-log.md).
VACUUM_RECORDS = "VACUUM lm_record"
