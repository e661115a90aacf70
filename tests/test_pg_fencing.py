"""Leases fence writers (eventstore/pg/lease.py, sink.py).

Two replicas racing for one partition: every conflict reaches the caller as a not-leader error,
no acknowledged record is lost, the rows stay gap-free and every h recomputes. A leader whose
lease runs out stops sending on its own clock, the next leader takes over with a new epoch and
resumes once, and the old one acknowledges nothing more. A database with synchronous_commit off
is refused before anything is written.
"""

from __future__ import annotations

import queue
import threading
import time

import psycopg
import pytest

from eventstore.errors import WriterClosed
from eventstore.pg import StoreError
from eventstore.pg import lease as leases
from eventstore.pg.engine import PgEngine
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect
from eventstore.pg.sink import PgSink
from eventstore.shared.keeper import LeaseKeeper
from eventstore.sink import CommitRefused
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pglog import assert_chain, head, make_store

SEG_BITS = 4
APPENDERS = 3


class Replica:
    """One would-be leader: given a lease, it appends from threads until its writer is refused;
    remembers what was acknowledged and what was refused."""

    def __init__(self, url, info, key, name: str) -> None:
        self.url, self.info, self.key, self.name = url, info, key, name
        self.leases: queue.Queue = queue.Queue()
        self.acked: dict[int, str] = {}  # seq -> the payload's id
        self.refusals: list[BaseException] = []
        self.takeovers = 0
        self._n = 0
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                lease = self.leases.get(timeout=0.05)
            except queue.Empty:
                continue
            self.takeovers += 1
            writer = open_partition_writer(self.url, self.info, self.key, 0, lease)
            threads = [
                threading.Thread(target=self._append, args=(writer, stop)) for _ in range(APPENDERS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            writer.close()

    def _append(self, writer, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._lock:
                self._n += 1
                ident = f"{self.name}/{self.takeovers}/{self._n}"
            try:
                record = writer.append("acme", "s-1", "messages", "item.added", {"id": ident})
            except WriterClosed as exc:
                self.refusals.append(exc)
                return
            self.acked[record.seq] = ident


def _steal(url: str, owner: str) -> leases.Lease:
    """Take the partition for `owner` while its leader still writes: the lease is expired by
    the database's clock in the same transaction (as a leader whose clock ran slow would find
    it), so the old leader goes on sending until the epoch fences it."""
    with connect(url) as conn, conn.transaction():
        conn.execute("UPDATE lm_head SET lease_until = now() - interval '1 second'")
        return leases.take(conn, 0, owner, 30.0)


def test_two_writers_racing_for_one_partition_lose_nothing(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    replicas = [Replica(pg_url, info, key, "replica-a"), Replica(pg_url, info, key, "replica-b")]
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, args=(stop,)) for r in replicas]
    for t in threads:
        t.start()
    for turn in range(16):
        replica = replicas[turn % 2]
        replica.leases.put(_steal(pg_url, replica.name))
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive()

    objs = assert_chain(pg_url, info)  # gap-free, every h recomputes, the head on the last row
    by_seq = {o["seq"]: o for o in objs}
    acked = {**replicas[0].acked, **replicas[1].acked}
    assert len(acked) == len(replicas[0].acked) + len(replicas[1].acked)  # no seq acked twice
    assert len(acked) > 100
    for seq, ident in acked.items():
        assert by_seq[seq]["payload"] == {"id": ident}, f"acknowledged seq {seq} is missing"
    refusals = replicas[0].refusals + replicas[1].refusals
    assert len(refusals) >= 15 * APPENDERS  # every fenced appender heard of it
    assert all(isinstance(exc, CommitRefused) for exc in refusals), refusals
    assert [o["type"] for o in objs].count("log.resume") == 15  # the first one created it


def _last_query_start(url: str, pid: int):
    with connect(url) as conn:
        return conn.execute(
            "SELECT query_start FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()[0]


def _lease_until(url: str):
    with connect(url) as conn:
        return conn.execute("SELECT lease_until FROM lm_head WHERE partition = 0").fetchone()[0]


def test_a_leader_stops_at_its_deadline_and_its_successor_fences_it(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    with connect(pg_url) as conn:
        lease_a = leases.take(conn, 0, "replica-a", 1.0)
    a = open_partition_writer(pg_url, info, key, 0, lease_a, checkpoint_interval=3600)
    acked_a = [a.append("acme", "s-1", "messages", "item.added", {"n": n}).seq for n in range(5)]
    backend_a = a._sink._conn.info.backend_pid
    granted_until = _lease_until(pg_url)

    while lease_a.valid():
        time.sleep(0.01)
    with pytest.raises(CommitRefused, match="lease expired"):
        a.append("acme", "s-1", "messages", "item.added", {"n": "late"})
    # A sent nothing after its deadline: its connection's last statement began before the
    # lease it was granted ran out by the database's clock.
    assert _last_query_start(pg_url, backend_a) < granted_until

    with connect(pg_url) as conn:
        while (lease_b := leases.take(conn, 0, "replica-b", 10.0)) is None:
            time.sleep(0.02)
    assert lease_b.epoch == lease_a.epoch + 1
    b = open_partition_writer(pg_url, info, key, 0, lease_b)
    acked_b = [b.append("acme", "s-2", "messages", "item.added", {"n": n}).seq for n in range(5)]
    with pytest.raises(WriterClosed):
        a.append("acme", "s-1", "messages", "item.added", {"n": "later"})
    a.close()
    b.close()

    objs = assert_chain(pg_url, info)
    seqs = {o["seq"] for o in objs}
    assert set(acked_a) | set(acked_b) <= seqs
    assert [o["type"] for o in objs].count("log.resume") == 1
    assert not any(o.get("payload") in ({"n": "late"}, {"n": "later"}) for o in objs)
    assert head(pg_url)[2:] == (lease_b.epoch, "replica-b")


def test_a_sink_with_a_fenced_lease_is_refused_by_the_database(pg_url, tmp_path):  # noqa: F811
    """The epoch fences even a leader whose own clock says its lease is fine."""
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    with connect(pg_url) as conn:
        lease_a = leases.take(conn, 0, "replica-a", 30.0)
    a = open_partition_writer(pg_url, info, key, 0, lease_a)
    a.append("acme", "s-1", "messages", "item.added", {"n": 1})
    lease_b = _steal(pg_url, "replica-b")
    b = open_partition_writer(pg_url, info, key, 0, lease_b)
    assert lease_a.valid()  # A does not know yet
    with pytest.raises(CommitRefused, match="replica-b"):
        a.append("acme", "s-1", "messages", "item.added", {"n": 2})
    with pytest.raises(CommitRefused):
        a.append("acme", "s-1", "messages", "item.added", {"n": 3})
    with connect(pg_url) as conn:
        assert not leases.renew(conn, lease_a)
    b.append("acme", "s-1", "messages", "item.added", {"n": 4})
    a.close()
    b.close()
    objs = assert_chain(pg_url, info)
    assert [o.get("payload", {}).get("n") for o in objs if o["tenant"] == "acme"] == [1, 4]


def test_release_lets_the_next_replica_take_over_at_once(pg_url, tmp_path):  # noqa: F811
    make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    with connect(pg_url) as conn:
        lease_a = leases.take(conn, 0, "replica-a", 60.0)
        assert leases.take(conn, 0, "replica-b", 60.0) is None
        assert leases.heads(conn)[0].owner == "replica-a" and not leases.heads(conn)[0].expired
        leases.release(conn, lease_a)
        assert not lease_a.valid()
        assert leases.heads(conn)[0].expired
        lease_b = leases.take(conn, 0, "replica-b", 60.0)
        assert lease_b is not None and lease_b.epoch == lease_a.epoch + 1


def test_synchronous_commit_off_is_refused_at_start(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    database = pg_url.rpartition("/")[2]
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", 30.0)
        conn.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = off')
    with pytest.raises(StoreError, match="synchronous_commit"):
        PgSink(pg_url, info, lease)
    with pytest.raises(StoreError, match="synchronous_commit"):
        open_partition_writer(pg_url, info, key, 0, lease)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM lm_record").fetchone()[0] == 0


def test_the_heartbeat_keeps_an_idle_leaders_lease(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", 0.6)
    writer = open_partition_writer(pg_url, info, key, 0, lease)
    keeper = LeaseKeeper(PgEngine(pg_url).session, lease).start()
    try:
        time.sleep(2.0)  # idle for over three lease lengths
        assert lease.valid()
        with connect(pg_url) as conn:
            assert leases.take(conn, 0, "replica-b", 0.6) is None
        writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
    finally:
        keeper.stop()
        writer.close()
    lost = []
    with connect(pg_url) as conn:
        lease_b = _steal(pg_url, "replica-b")
    keeper = LeaseKeeper(PgEngine(pg_url).session, lease, on_lost=lost.append).start()
    time.sleep(0.5)
    keeper.stop()
    assert lost == [lease] and not lease.valid() and lease_b.valid()


def test_a_fence_found_by_the_checkpoint_timer_is_a_refusal_too(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", 0.4)
    writer = open_partition_writer(pg_url, info, key, 0, lease, checkpoint_interval=0.6)
    writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
    deadline = time.monotonic() + 10
    while writer.failure is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the timer's checkpoint, due after the deadline, finds it over
    assert isinstance(writer.failure, CommitRefused)
    with pytest.raises(CommitRefused, match="lease expired"):
        writer.append("acme", "s-1", "messages", "item.added", {"n": 2})
    writer.close()


def test_heads_of_a_store_whose_leases_were_never_taken(pg_url, tmp_path):  # noqa: F811
    make_store(pg_url, tmp_path, partitions=2)
    with connect(pg_url) as conn:
        heads = leases.heads(conn)
        assert [(h.partition, h.owner, h.lease_until, h.expired) for h in heads] == [
            (0, None, None, True),
            (1, None, None, True),
        ]
        lease = leases.take(conn, 1, "replica-a", 5)
        lease.lose()
        lease.extend_from(time.monotonic())  # a renewal answering after the loss
        assert not lease.valid()


def test_a_leader_paused_inside_a_transaction_does_not_block_takeover(pg_url, tmp_path):  # noqa: F811
    """A paused leader idle in its redaction transaction holds the head row's lock; the server
    ends that session (idle_in_transaction_session_timeout), so a takeover waits about a second
    instead of until the leader wakes."""
    make_store(pg_url, tmp_path / "data")
    paused = connect(pg_url)
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "paused", 0.5)
    paused.execute("BEGIN")
    paused.execute(
        "SELECT last_seq FROM lm_head WHERE partition = 0 AND epoch = %s FOR UPDATE",
        (lease.epoch,),
    )
    time.sleep(0.6)  # the paused leader's lease has expired, its lock has not
    taken: queue.Queue = queue.Queue()

    def take_over() -> None:
        with connect(pg_url) as conn:
            taken.put(leases.take(conn, 0, "successor", 5.0))

    threading.Thread(target=take_over, daemon=True).start()
    successor = taken.get(timeout=30)  # a hang guard: it blocked forever before
    assert successor is not None and successor.epoch == lease.epoch + 1
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        paused.execute("SELECT 1")  # the server ended the idle transaction's session
    paused.close()
