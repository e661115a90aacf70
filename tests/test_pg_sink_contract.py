"""The PostgreSQL sink keeps the DurabilitySink contract: one partition of a fresh store in a
database of its own on the machine's server, leased to this test; what it holds is read back
over another connection. Without a server the tests skip with the reason (they fail under CI).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from eventstore.pg.schema import connect
from eventstore.pg.sink import PgSink
from tests.helpers.pg import create_database, drop_database, require_server, url_of
from tests.helpers.pglog import make_store, partition_key, rows, take
from tests.helpers.sink_contract import SEG_BITS, DurabilitySinkContract, Storage


class TestPgSink(DurabilitySinkContract):
    @contextlib.contextmanager
    def open_storage(self, tmp_path: Path) -> Iterator[Storage]:
        require_server()
        database = create_database()
        try:
            url = url_of(database)
            info, key = make_store(url, tmp_path / "data", seg_bits=SEG_BITS)
            sink = PgSink(url, info, take(url, 0, "sink-contract"))
            yield Storage(
                sink=sink,
                key=partition_key(info, key, 0),
                stored_lines=lambda: [line for _, _, line in rows(url)],
                newest_checkpoint=lambda: _newest_checkpoint(url),
            )
        finally:
            drop_database(database)


def _newest_checkpoint(url: str) -> str | None:
    with connect(url) as conn:
        row = conn.execute(
            "SELECT text FROM lm_checkpoint WHERE partition = 0 ORDER BY size DESC LIMIT 1"
        ).fetchone()
    return None if row is None else row[0]
