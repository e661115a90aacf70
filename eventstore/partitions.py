"""Which partition of a shared store holds a tenant, and each partition's origin (docs/wire.md,
"Partitions").

The hash must never change: a tenant's records live in the partition it names for as long as
the store exists, and every replica, client and offline tool must agree on it without asking
the store. It is the first eight bytes of SHA-256 over the tenant's UTF-8 bytes, read as a
big-endian unsigned integer, modulo P. SHA-256 rather than Python's `hash()` (salted per
process) or CRC32 (too few bits to spread evenly over a large P); docs/scale-out.md lists
vectors, and tests/test_partitions.py checks them.
"""

from __future__ import annotations

import hashlib

from .errors import InvalidInput

MAX_PARTITIONS = 1024


def partition_of(tenant: str, partitions: int) -> int:
    """The partition (0..partitions-1) that holds `tenant`'s sessions and records."""
    check_partitions(partitions)
    digest = hashlib.sha256(tenant.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def partition_origin(origin: str, partition: int) -> str:
    """The origin of partition N's log: `<origin>/p<N>` (its checkpoints and vkey name it)."""
    return f"{origin}/p{partition}"


def check_partitions(partitions: object) -> int:
    if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidInput(
            f"the number of partitions must be an integer in 1..{MAX_PARTITIONS}, "
            f"not {partitions!r}"
        )
    return partitions
