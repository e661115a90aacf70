"""Service replicas over one PostgreSQL store: balance, fencing, kill -9 and takeover (issue 14).

Real `ledgermem serve --store URL` processes on ephemeral ports, each with its own data
directory (keys copied from the init-store directory), one fresh database per test. Writes go to
the replica leading the tenant's partition: a client that meets 421 turns to the other replica
(the forwarding middleware does that for it in production; it is not what these tests hold).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from eventstore.checkpoint import SigningKey
from eventstore.layout import DataDir
from eventstore.mirror import Mirror
from eventstore.partitions import partition_origin
from eventstore.pg.schema import connect
from eventstore.pg.tail import sync_mirror
from eventstore.reader import LogReader
from eventstore.store import load_or_create_key
from eventstore.verify.run import verify_log
from sections.runtime.history import History
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.pglog import assert_chain, head
from tests.helpers.replicas import (
    as_replica,
    leading,
    make_replicas,
    readiness,
    replica,
    wait_until,
)
from tests.server import ROOT


class Writers:
    """Threads creating sessions on whichever replica leads: every 2xx is an acknowledged write,
    kept as (seq, h) to look for in the table afterwards."""

    def __init__(self, replicas: list, threads: int = 4, prefix: str = "w") -> None:
        self.replicas = replicas
        self.acked: list[tuple[int, str]] = []
        self.answers: dict[int, int] = {}
        self._stop = threading.Event()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(n, prefix), daemon=True)
            for n in range(threads)
        ]

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, n: int, prefix: str) -> None:
        target = n
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.is_set():
                server = self.replicas[target % len(self.replicas)]
                session = f"{prefix}{next(self._ids)}"
                try:
                    response = client.put(f"{server.url}/v1/sessions/{session}")
                except httpx.HTTPError:
                    target += 1
                    continue
                with self._lock:
                    self.answers[response.status_code] = (
                        self.answers.get(response.status_code, 0) + 1
                    )
                if response.status_code == 201:
                    record = response.json()["record"]
                    with self._lock:
                        self.acked.append((record["seq"], record["h"]))
                elif response.status_code in (421, 503):
                    target += 1  # another replica leads it, or none does yet
                    time.sleep(0.02)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)


def table_hashes(url: str, partition: int = 0) -> dict[int, str]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT seq, h FROM lm_record WHERE partition = %s", (partition,)
        ).fetchall()
    return {seq: bytes(h).hex() for seq, h in rows}


def resumes(url: str, info, partition: int = 0) -> int:
    return sum(1 for obj in assert_chain(url, info, partition) if obj["type"] == "log.resume")


def assert_acknowledged_in_table(url: str, acked: list[tuple[int, str]]) -> None:
    table = table_hashes(url)
    missing = [(seq, h) for seq, h in acked if table.get(seq) != h]
    assert not missing, f"{len(missing)} acknowledged writes are not in the table: {missing[:5]}"


def export_verifies(url: str, info, out: Path, partition: int = 0) -> None:
    """The partition exported to spec segment files verifies with the unchanged verifier."""
    mirror = Mirror.open(out, partition_origin(info.origin, partition), info.seg_bits)
    with connect(url) as conn:
        sync_mirror(conn, partition, mirror)
    mirror.flush()
    mirror.close()
    report = verify_log(out, vkey=info.vkeys[partition])
    assert report.verdict == "VALID-LOCAL", report


def test_leadership_spreads_over_two_replicas_and_falls_back_to_one(pg_url, tmp_path):  # noqa: F811
    _, (a_dir, b_dir) = make_replicas(pg_url, tmp_path, 2, partitions=2)
    with replica(a_dir, pg_url, 1.0) as a:
        wait_until(lambda: leading(a) == {0, 1}, what="the first replica to lead both")
        with replica(b_dir, pg_url, 1.0) as b:
            wait_until(
                lambda: len(leading(a)) == 1 and len(leading(b)) == 1,
                what="one partition each",
            )
            assert leading(a) | leading(b) == {0, 1}
            assert b.stop() == 0  # graceful: log.close, checkpoint, the lease released
            wait_until(lambda: leading(a) == {0, 1}, what="the survivor to lead both")
        with connect(pg_url) as conn:
            ids = [row[0] for row in conn.execute("SELECT id FROM lm_replica")]
        assert len(ids) == 1  # the stopped replica left lm_replica


def test_a_replica_whose_key_is_not_the_stores_refuses_to_start(pg_url, tmp_path):  # noqa: F811
    info, (good,) = make_replicas(pg_url, tmp_path, 1)
    other = DataDir(tmp_path / "other")
    load_or_create_key(other, info.origin, create=True)  # same origin, another key
    empty = tmp_path / "nokey"
    for data, words in ((other.root, "is not the store's key"), (empty, "no signing key")):
        done = subprocess.run(
            [sys.executable, "-m", "ledgermem_cli", "serve", "--data", str(data)]
            + ["--store", pg_url, "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], done.stderr
    assert isinstance(load_or_create_key(DataDir(good), create=False).key, SigningKey)


def test_a_stopped_leader_is_fenced_and_acknowledges_nothing_more(pg_url, tmp_path):  # noqa: F811
    """Issue test 3: SIGSTOP the leader past its lease; the other takes over; after SIGCONT the
    old leader acknowledges nothing more, and the takeover wrote exactly one log.resume."""
    info, (a_dir, b_dir) = make_replicas(pg_url, tmp_path, 2)
    with replica(a_dir, pg_url, 1.0) as a:
        wait_until(lambda: leading(a) == {0}, what="a to lead")
        with replica(b_dir, pg_url, 1.0) as b:
            with Writers([a, b]) as writers:
                wait_until(lambda: writers.count() > 50, what="writes on the first leader")
                os.kill(a.proc.pid, signal.SIGSTOP)
                try:
                    wait_until(lambda: leading(b) == {0}, what="b to take over")
                    before = writers.count()
                    wait_until(lambda: writers.count() > before + 50, what="writes on b")
                finally:
                    os.kill(a.proc.pid, signal.SIGCONT)
                wait_until(lambda: leading(a) == set(), what="a to step down")
                # Signed as a replica's forward, so that `a` answers them itself (a plain call
                # would be forwarded to b, the leader, streams/cluster/forwarding.py).
                late = [
                    httpx.put(
                        f"{a.url}/v1/sessions/late{n}",
                        headers=as_replica(a_dir, "PUT", f"/v1/sessions/late{n}"),
                        timeout=5,
                    )
                    for n in range(20)
                ]
                assert all(response.status_code == 421 for response in late), [
                    (r.status_code, r.text) for r in late
                ]
            _, _, epoch, _ = head(pg_url)
            assert epoch == 2  # a's, then b's
            assert resumes(pg_url, info) == 1  # b's takeover (the first leader created the log)
    assert_acknowledged_in_table(pg_url, writers.acked)
    _, _, epoch, _ = head(pg_url)  # b stopped first and released: a may have taken it back
    assert resumes(pg_url, info) == epoch - 1
    export_verifies(pg_url, info, tmp_path / "export")


def test_kill9_of_the_leader_under_load_loses_no_acknowledged_write(pg_url, tmp_path):  # noqa: F811
    """Issue test 4: kill -9 the leading replica under load, several rounds; a new replica starts
    in the killed one's data directory each time."""
    info, dirs = make_replicas(pg_url, tmp_path, 2)
    servers = [replica(d, pg_url, 1.0).start() for d in dirs]
    rounds = 3
    try:
        with Writers(servers) as writers:
            for n in range(rounds):
                leader = wait_until(
                    lambda: next((s for s in servers if leading(s) == {0}), None),
                    what="a leader",
                )
                before = writers.count()
                wait_until(lambda b=before: writers.count() > b + 30, what="writes on the leader")
                leader.kill()
                index = servers.index(leader)
                survivor = servers[1 - index]
                wait_until(lambda s=survivor: leading(s) == {0}, what=f"takeover {n + 1}")
                servers[index] = replica(dirs[index], pg_url, 1.0).start()
            before = writers.count()
            wait_until(lambda: writers.count() > before + 30, what="writes after the last round")
    finally:
        for server in servers:
            server.kill()
    assert_acknowledged_in_table(pg_url, writers.acked)
    _, _, epoch, _ = head(pg_url)
    assert resumes(pg_url, info) == epoch - 1  # every takeover resumed the log exactly once
    assert epoch >= rounds + 1
    export_verifies(pg_url, info, tmp_path / "export")


def test_rebuild_equals_live_on_a_replica_that_took_over(pg_url, tmp_path):  # noqa: F811
    """Issue test 10: the state a replica held after taking over (its snapshot at a clean stop)
    equals the state rebuilt from the log from zero."""
    info, (a_dir, b_dir) = make_replicas(pg_url, tmp_path, 2)
    with replica(a_dir, pg_url, 1.0) as a:
        wait_until(lambda: leading(a) == {0}, what="a to lead")
        b = replica(b_dir, pg_url, 1.0).start()
        try:
            with httpx.Client(base_url=a.url, timeout=10) as client:
                for n in range(20):
                    client.put(f"/v1/sessions/s{n}").raise_for_status()
                    client.post(
                        f"/v1/sessions/s{n}/sections/findings/items",
                        json={"items": [{"content": f"finding {n}"}, {"content": "again"}]},
                    ).raise_for_status()
            a.kill()
            wait_until(lambda: leading(b) == {0}, what="b to take over")
            with httpx.Client(base_url=b.url, timeout=10) as client:
                for n in range(20):
                    client.post(
                        f"/v1/sessions/s{n}/sections/findings/items",
                        json={"content": f"after the takeover {n}"},
                    ).raise_for_status()
                client.post("/v1/sessions/s3/end").raise_for_status()
        finally:
            assert b.stop() == 0  # the memory closes: a snapshot of the live state, log.close
    p0 = b_dir / "partitions" / "p0"
    reader = LogReader(p0 / "log")
    history = History(reader, p0 / "snapshots")
    snapshots = sorted((p0 / "snapshots").glob("snap-*.json"))
    assert snapshots, "the replica that took over wrote no snapshot at its clean stop"
    resume_seq = max(
        seq for seq, obj in enumerate(assert_chain(pg_url, info)) if obj["type"] == "log.resume"
    )
    _, snapshot, _ = history.load(head(pg_url)[0])
    assert snapshot is not None and snapshot.seq > resume_seq  # written after the takeover
    live = history.state_at(snapshot.seq, use_snapshots=True)
    rebuilt = history.state_at(snapshot.seq, use_snapshots=False)
    assert live.state_hash() == rebuilt.state_hash()


def terminate_backends(url: str) -> int:
    """End every connection to the test's database but this one: the replicas' loops, tails
    and sinks all lose theirs at once."""
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_lost_connections_under_load_lose_no_acknowledged_write(pg_url, tmp_path):  # noqa: F811
    """Every backend of the store terminated under load, several times: the replicas reconnect
    (leadership loop, store tail, sink), writes are taken again, nothing acknowledged is lost."""
    info, dirs = make_replicas(pg_url, tmp_path, 2)
    with replica(dirs[0], pg_url, 1.0) as a, replica(dirs[1], pg_url, 1.0) as b:
        wait_until(lambda: leading(a) | leading(b) == {0}, what="a leader")
        with Writers([a, b]) as writers:
            for _ in range(3):
                before = writers.count()
                wait_until(lambda b=before: writers.count() > b + 30, what="writes")
                assert terminate_backends(pg_url) > 0
            before = writers.count()
            wait_until(lambda: writers.count() > before + 30, what="writes after the last cut")
        assert_acknowledged_in_table(pg_url, writers.acked)
        _, _, epoch, _ = head(pg_url)
        assert resumes(pg_url, info) == epoch - 1
        # Both mirrors caught up through their tails: the follower's too.
        last = head(pg_url)[0]
        for server in (a, b):
            wait_until(
                lambda s=server: readiness(s)[0]["head"] == last, what="the mirrors to catch up"
            )
    export_verifies(pg_url, info, tmp_path / "export")
