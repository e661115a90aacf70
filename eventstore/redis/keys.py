"""Where a Redis store keeps what (the layout eventstore/pg/schema.py keeps in tables):

    lm:store               hash: origin, partitions, seg_bits, vkey:<N> (fixed at creation)
    lm:{pN}:head           hash: last_seq, last_h (raw), epoch, owner, lease_until (server ms):
                           what every write of partition N is fenced on
    lm:{pN}:log            stream: seq S is entry `S-1`, field `l` = the exact line bytes
    lm:{pN}:erased         hash: seq -> the redacted line of a redaction's target (its stream
                           entry is deleted: a stream entry cannot be rewritten in place)
    lm:{pN}:roots          hash: segment -> the Merkle root of each full segment
    lm:{pN}:cp, :cpidx     hash size -> signed checkpoint text; sorted set of the sizes
    lm:replicas, :seen     hash id -> internal URL; sorted set id by last heartbeat (server ms)

A partition's keys share the hash tag `{pN}`, so each script touches one slot. The empty
partition's head is (-1, genesis(origin/pN)), as in PostgreSQL.
"""

from __future__ import annotations

STORE = "lm:store"
REPLICAS = "lm:replicas"
SEEN = "lm:replicas:seen"


def head(partition: int) -> str:
    return f"lm:{{p{partition}}}:head"


def log(partition: int) -> str:
    return f"lm:{{p{partition}}}:log"


def erased(partition: int) -> str:
    return f"lm:{{p{partition}}}:erased"


def roots(partition: int) -> str:
    return f"lm:{{p{partition}}}:roots"


def checkpoints(partition: int) -> str:
    return f"lm:{{p{partition}}}:cp"


def checkpoint_sizes(partition: int) -> str:
    return f"lm:{{p{partition}}}:cpidx"


def entry_id(seq: int) -> str:
    return f"{seq}-1"


def seq_of(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])
