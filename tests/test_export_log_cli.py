"""The store commands' edges: init-store is idempotent and refuses another P, and every failure
(no server, no store, no such partition) is one line on stderr and exit 2."""

from __future__ import annotations

import stat

from tests.helpers.cli import ledgermem
from tests.helpers.pg import pg_url, require_server  # noqa: F401
from tests.helpers.pgseed import seeded_store

NO_SERVER = "postgresql://postgres@127.0.0.1:1/ledgermem_nowhere"


def one_line_refusal(done, command: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ledgermem {command}: "), done.stderr
    return lines[0]


def test_init_store_is_idempotent_and_refuses_another_p(pg_url, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    first = ledgermem("init-store", pg_url, "--partitions", 3, "--data", data, text=True)
    assert first.returncode == 0, first.stderr
    secret = data / "keys" / "replica.secret"
    held = secret.read_bytes()
    assert len(held) == 64 and int(held, 16) >= 0
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((data / "keys").stat().st_mode) == 0o700

    again = ledgermem("init-store", pg_url, "--partitions", 3, "--data", data, text=True)
    assert (again.returncode, again.stdout) == (0, first.stdout)
    assert secret.read_bytes() == held  # never replaced
    vkeys = [line.split(" ", 1)[1] for line in first.stdout.splitlines()[1:]]
    assert len(vkeys) == 3
    for n, expected in enumerate(vkeys):
        shown = ledgermem("vkey", "--store", pg_url, "--partition", n, text=True)
        assert shown.stdout.strip() == expected

    other = ledgermem("init-store", pg_url, "--partitions", 2, "--data", data, text=True)
    assert "3 partitions" in one_line_refusal(other, "init-store")
    # Another replica's key is not the store's: refused, one line.
    stranger = ledgermem(
        "init-store", pg_url, "--partitions", 3, "--data", tmp_path / "other", text=True
    )
    assert "key" in one_line_refusal(stranger, "init-store")
    bad_p = ledgermem("init-store", pg_url, "--partitions", 0, "--data", data, text=True)
    one_line_refusal(bad_p, "init-store")


def test_no_server_is_one_line_and_exit_2(tmp_path):
    require_server()  # the store commands need psycopg: without it that is the one line
    for args, command in (
        (("init-store", NO_SERVER, "--partitions", 1, "--data", tmp_path / "d"), "init-store"),
        (("export-log", "--store", NO_SERVER, tmp_path / "out"), "export-log"),
        (("vkey", "--store", NO_SERVER), "vkey"),
    ):
        line = one_line_refusal(ledgermem(*args, text=True), command)
        assert "cannot connect" in line and "127.0.0.1" in line


def test_a_database_without_a_store_is_one_line_and_exit_2(pg_url, tmp_path):  # noqa: F811
    serve = ("serve", "--store", pg_url, "--data", tmp_path / "data", "--port", 0)
    for args, command in (
        (("export-log", "--store", pg_url, tmp_path / "out"), "export-log"),
        (("vkey", "--store", pg_url, "--partition", 0), "vkey"),
        (serve, "serve"),
    ):
        line = one_line_refusal(ledgermem(*args, text=True, timeout=60), command)
        database = pg_url.rsplit("/", 1)[1]
        assert "ledgermem init-store postgresql://" in line and database in line, line


def test_a_partition_the_store_lacks_is_one_line_and_exit_2(pg_url, tmp_path):  # noqa: F811
    _, seeds = seeded_store(pg_url, tmp_path / "data", partitions=2)
    for args, command in (
        (("export-log", "--store", pg_url, "--partition", 2, tmp_path / "out"), "export-log"),
        (("vkey", "--store", pg_url, "--partition", -1), "vkey"),
    ):
        assert "0..1" in one_line_refusal(ledgermem(*args, text=True), command)
    # An OUT holding another partition's export is refused, not mixed.
    seeds[0].append(3)
    seeds[0].publish()
    out = tmp_path / "p0"
    assert ledgermem("export-log", "--store", pg_url, "--partition", 0, out).returncode == 0
    mixed = ledgermem("export-log", "--store", pg_url, "--partition", 1, out, text=True)
    assert "p0" in one_line_refusal(mixed, "export-log")
