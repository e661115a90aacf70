"""The Redis sink keeps the DurabilitySink contract: one partition of a fresh store on a
redis-server of the test's own (appendonly yes, appendfsync always), leased to this test; what
it holds is read back over another connection."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from eventstore.redis.sink import RedisSink
from tests.helpers.redis_server import RedisServer, require_redis
from tests.helpers.redislog import lines, make_store, newest_checkpoint, take
from tests.helpers.sink_contract import SEG_BITS, DurabilitySinkContract, Storage


class TestRedisSink(DurabilitySinkContract):
    @contextlib.contextmanager
    def open_storage(self, tmp_path: Path) -> Iterator[Storage]:
        require_redis()
        server = RedisServer(tmp_path / "redis").start()
        try:
            url = server.url
            info, key = make_store(url, tmp_path / "data", seg_bits=SEG_BITS)
            sink = RedisSink(url, info, take(url, 0, "sink-contract"))
            yield Storage(
                sink=sink,
                key=info.key_for(key, 0),
                stored_lines=lambda: lines(url),
                newest_checkpoint=lambda: newest_checkpoint(url),
            )
        finally:
            server.stop()
