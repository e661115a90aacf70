"""init-store: creates the schema once, records origin and vkeys, refuses to change P."""

import pytest

from eventstore.checkpoint import SigningKey
from eventstore.errors import BadKey
from eventstore.pg.schema import StoreError, connect, init_store, read_store
from eventstore.record import genesis
from tests.helpers.pg import pg_url  # noqa: F401


def test_init_store_is_idempotent_and_keeps_partitions(pg_url, tmp_path):  # noqa: F811
    info = init_store(pg_url, 3, tmp_path / "data", origin="example.com/mem")
    assert info.partitions == 3 and info.origin == "example.com/mem"
    assert [v.split("+")[0] for v in info.vkeys] == [f"example.com/mem/p{n}" for n in range(3)]
    again = init_store(pg_url, 3, tmp_path / "data")
    assert again == info
    with pytest.raises(StoreError, match="already has 3 partitions"):
        init_store(pg_url, 4, tmp_path / "data")
    with connect(pg_url) as conn:
        assert read_store(conn) == info
        heads = conn.execute(
            "SELECT partition, last_seq, last_h FROM lm_head ORDER BY 1"
        ).fetchall()
    assert heads == [(n, -1, genesis(f"example.com/mem/p{n}")) for n in range(3)]


def test_another_key_is_refused(pg_url, tmp_path):  # noqa: F811
    info = init_store(pg_url, 2, tmp_path / "a", origin="example.com/mem")
    with pytest.raises(BadKey, match="partition 0"):
        info.key_for(SigningKey.generate("example.com/mem"), 0)
    with pytest.raises(BadKey):
        init_store(pg_url, 2, tmp_path / "b")  # a fresh key in another directory


def test_a_database_without_a_store_is_named(pg_url):  # noqa: F811
    with connect(pg_url) as conn, pytest.raises(StoreError, match="init-store"):
        read_store(conn)


def test_connections_carry_tcp_deadlines_unless_the_url_sets_them(pg_url):  # noqa: F811
    with connect(pg_url) as conn:
        dsn = dict(item.split("=", 1) for item in conn.info.dsn.split())
    assert dsn["keepalives"] == "1" and dsn["tcp_user_timeout"] == "15000"
    with connect(pg_url + "?tcp_user_timeout=4000") as conn:
        dsn = dict(item.split("=", 1) for item in conn.info.dsn.split())
    assert dsn["tcp_user_timeout"] == "4000" and dsn["keepalives_idle"] == "10"
