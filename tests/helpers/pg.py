"""A fresh PostgreSQL database per test, on the machine's server (127.0.0.1:5432, trust auth).

`pg_url` creates a database with a unique name and drops it after the test (terminating any
connection a killed replica left behind). Without a server, or without psycopg, the tests skip
with the reason, except under CI, where they fail: .ci/run starts the server when it is
installed but stopped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

ADMIN_URL = os.environ.get("LEDGERMEM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def server_missing() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install -e '.[test]'"
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"no PostgreSQL server answers at {ADMIN_URL}: {' '.join(str(exc).split())}"
    return None


def require_server() -> None:
    reason = server_missing()
    if reason is not None:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def url_of(database: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


def create_database() -> str:
    import psycopg

    name = f"lm_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_server()
    name = create_database()
    try:
        yield url_of(name)
    finally:
        drop_database(name)
