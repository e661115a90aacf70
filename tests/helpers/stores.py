"""The shared store under test, either engine: `store_url` is parametrised over PostgreSQL (a
fresh database on the machine's server, tests/helpers/pg.py) and Redis (a redis-server of the
test's own, tests/helpers/redis_server.py), so one test holds both stores to one property."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore.stores import open_engine
from tests.helpers.pg import create_database, drop_database, require_server, url_of
from tests.helpers.redis_server import RedisServer, require_redis

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["postgresql", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgresql":
        require_server()
        name = create_database()
        try:
            yield url_of(name)
        finally:
            drop_database(name)
    else:
        require_redis()
        server = RedisServer(tmp_path / "redis-server").start()
        try:
            yield server.url
        finally:
            server.stop()


def stored_lines(url: str, partition: int) -> list[tuple[int, bytes]]:
    """(seq, line) of every record the partition holds, in seq order, read as recovery and
    export read them (the engine's PartitionReader)."""
    if url.startswith("redis"):
        from eventstore.redis.reader import RedisReader
        from eventstore.redis.schema import connect as redis_connect

        client = redis_connect(url)
        try:
            reader = RedisReader(client)
            return reader.rows(partition, 0, reader.head(partition)[0] + 1)
        finally:
            client.close()
    from eventstore.pg.reader import PgReader
    from eventstore.pg.schema import connect

    with connect(url) as conn:
        reader_pg = PgReader(conn)
        return reader_pg.rows(partition, 0, reader_pg.head(partition)[0] + 1)


def export_and_verify(url: str, partition: int, out: Path) -> list[bytes]:
    """`ledgermem export-log` then the unchanged `ledgermem verify` with the store's vkey;
    returns the exported lines, in order (asserting both commands succeed)."""

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ledgermem_cli", *args],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("export-log", "--store", url, "--partition", str(partition), str(out))
    vkey = open_engine(url).store_vkey(partition)
    run("verify", str(out), "--vkey", vkey)
    lines: list[bytes] = []
    for segment in sorted(out.glob("*.jsonl")):
        lines += segment.read_bytes().splitlines(keepends=True)
    return lines
