"""The log on Redis: the same shared store as eventstore/pg/ (P partitions, each one complete
log with one fenced leader), kept in Redis Streams and hashes (docs/scale-out.md).

Every write is one Lua script (scripts.py) that checks the partition's head hash (last seq,
last h, epoch, owner) and writes all of a group commit or nothing; the server must fsync its
append-only file before it answers (`appendonly yes`, `appendfsync always`), which `connect`
checks. redis-py is an optional dependency (the `redis` extra); `require_redis()` names the
install step when it is missing.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, TypeAlias

from ..shared import StoreError

# What `schema.connect` returns: a redis.Redis with replies as bytes and no automatic retries.
# Typed loosely on purpose: redis-py types every reply as "bytes | str | ..." whatever the
# client's decoding, which would put a cast on every read.
Client: TypeAlias = Any

__all__ = ["StoreError", "require_redis"]


def require_redis() -> ModuleType:
    try:
        import redis
    except ImportError:  # pragma: no cover - the test extra installs it
        raise StoreError("a Redis store needs redis-py: pip install 'ledgermem[redis]'") from None
    return redis
