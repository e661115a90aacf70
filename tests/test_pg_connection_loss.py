"""A leader whose connection is lost mid-commit never gives a false acknowledgement.

The writer's backends are terminated (pg_terminate_backend) again and again under load: the
sink reconnects and decides each interrupted commit from the head (committed / resend /
fenced), so callers still get their records, and the chain stays intact. With PostgreSQL
itself restarted mid-load, callers get errors or successes, never an acknowledgement of a
record that is not in the table; a new writer resumes after it. The restart disturbs everyone
using the server, so that test runs in CI (where the suite has the server to itself) or when
LEDGERMEM_TEST_PG_RESTART=1, and is marked `pg_restart`.
"""

from __future__ import annotations

import collections
import os
import random
import subprocess
import threading
import time

import psycopg
import pytest

from eventstore.errors import LedgerError
from eventstore.pg import StoreError
from eventstore.pg import lease as leases
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pglog import assert_chain, make_store

SEG_BITS = 5
APPENDERS = 4
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_VERSIONS = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else ["15"]
RESTART = ["pg_ctlcluster", "--skip-systemctl-redirect", _VERSIONS[0], "main", "restart"]


class Load:
    """Appenders on a partition's writer; a new writer (new lease, log.resume) after a failure."""

    def __init__(self, url, info, key) -> None:
        self.url, self.info, self.key = url, info, key
        self.acked: dict[int, str] = {}
        self.errors: list[BaseException] = []
        self.sinks = []
        self._n = 0
        self._lock = threading.Lock()

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            writer = self._lead()
            self.sinks.append(writer._sink)
            threads = [
                threading.Thread(target=self._append, args=(writer, end)) for _ in range(APPENDERS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            writer.close()

    def _lead(self):
        """Take the partition (after releasing what a failed writer held) and open its writer."""
        while True:
            try:
                with connect(self.url) as conn:
                    conn.execute(  # the failed writer was this replica: give its lease up
                        "UPDATE lm_head SET lease_until = now() - interval '1 microsecond' "
                        "WHERE owner = 'replica-a'"
                    )
                    lease = leases.take(conn, 0, "replica-a", 30.0)
                return open_partition_writer(self.url, self.info, self.key, 0, lease)
            except (StoreError, psycopg.OperationalError):
                time.sleep(0.1)  # the server is restarting, or the killer cut this connection

    def _append(self, writer, end: float) -> None:
        while time.monotonic() < end:
            with self._lock:
                self._n += 1
                ident = f"r/{self._n}"
            try:
                record = writer.append("acme", "s-1", "messages", "item.added", {"id": ident})
            except LedgerError as exc:
                self.errors.append(exc)
                return
            self.acked[record.seq] = ident

    def check(self) -> list[dict]:
        objs = assert_chain(self.url, self.info)
        by_seq = {o["seq"]: o for o in objs}
        for seq, ident in self.acked.items():
            assert by_seq[seq]["payload"] == {"id": ident}, f"acknowledged seq {seq} is missing"
        return objs


def _terminate_backends(url: str, stop: threading.Event) -> int:
    """Kill every other backend of the test's database every few milliseconds; count them."""
    database = url.rpartition("/")[2]
    killed = 0
    with connect(url) as conn:
        while not stop.is_set():
            time.sleep(random.uniform(0.005, 0.04))
            killed += conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                (database,),
            ).fetchone()[0]
    return killed


def test_terminated_backends_mid_load_lose_nothing(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    load = Load(pg_url, info, key)
    stop = threading.Event()
    killed: list[int] = []
    killer = threading.Thread(target=lambda: killed.append(_terminate_backends(pg_url, stop)))
    killer.start()
    try:
        load.run(3.0)
    finally:
        stop.set()
        killer.join()
    load.check()
    decided = sum((sink.after_loss for sink in load.sinks), start=collections.Counter())
    assert killed[0] > 20
    assert decided["resend"] + decided["Committed"] >= 5, decided  # commits cut mid-way
    assert decided["Refused"] == decided["Unknown"] == 0, decided
    assert load.errors == []  # every interrupted commit was decided; no caller saw a failure
    assert len(load.acked) > 100


@pytest.mark.pg_restart
@pytest.mark.skipif(
    not IN_CI and os.environ.get("LEDGERMEM_TEST_PG_RESTART") != "1",
    reason="restarts the machine's PostgreSQL server (CI runs it): set LEDGERMEM_TEST_PG_RESTART=1",
)
def test_postgresql_restarted_mid_load_gives_no_false_acknowledgement(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    load = Load(pg_url, info, key)
    runner = threading.Thread(target=load.run, args=(6.0,))
    runner.start()
    time.sleep(1.5)
    before = len(load.acked)
    subprocess.run(RESTART, check=True, capture_output=True, timeout=60)
    runner.join(120)
    assert not runner.is_alive()
    assert before > 0 and len(load.acked) > before  # it went on writing after the restart
    load.check()
    assert all(isinstance(exc, LedgerError) for exc in load.errors)
