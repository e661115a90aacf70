"""A lease that runs out while a checkpoint or a redaction's rewrite is under way is a refusal.

`PgSink._retrying` (checkpoints, redaction rewrites) reconnects while the lease lasts. When the
connection was lost after the lease's local deadline had passed (a leader paused past its lease
and woken: test_pg_kill9's SIGSTOP test once saw this in CI), it answered StoreUnreachable,
which the writer turns into WriterClosed (503), where the lease's end must be a refusal
(CommitRefused, 421 not_leader) like every other write after the deadline. Here the lease's
deadline passes on purpose while the sink's checkpoint waits on a lock held by another
connection; then the waiting backend is terminated.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from eventstore.pg import lease as leases
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect
from eventstore.sink import CommitRefused, CommitUnknown
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.pglog import assert_chain, make_store

WAITING_CHECKPOINT = """
SELECT pid FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock'
   AND pid <> pg_backend_pid() AND query LIKE '%%INSERT INTO lm_checkpoint%%'
"""


def test_a_checkpoint_that_loses_its_connection_after_the_deadline_is_refused(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=4)
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", 1.0)
    assert lease is not None
    # No timer checkpoint: the one the test asks for is the only one.
    writer = open_partition_writer(pg_url, info, key, 0, lease, checkpoint_interval=3600)
    acked = writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
    # Not schema.connect: its sessions end after a second idle in a transaction.
    blocker = psycopg.connect(pg_url, autocommit=True)
    blocker.execute("BEGIN")
    blocker.execute("LOCK TABLE lm_checkpoint IN EXCLUSIVE MODE")  # the INSERT waits
    outcome: list[BaseException | None] = []

    def checkpoint() -> None:
        try:
            writer.checkpoint()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=checkpoint, daemon=True)
    thread.start()
    try:
        with connect(pg_url) as conn:
            deadline = time.monotonic() + 20
            while not (pids := [row[0] for row in conn.execute(WAITING_CHECKPOINT)]):
                assert time.monotonic() < deadline, "the checkpoint never waited on the lock"
                time.sleep(0.02)
            while lease.valid():  # the lease's local deadline passes mid-checkpoint
                time.sleep(0.02)
            # The connection is lost now, after the deadline (as a paused leader finds it).
            conn.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        thread.join(20)
        assert not thread.is_alive(), "the checkpoint hung"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    (error,) = outcome
    assert type(error) is CommitRefused, repr(error)
    assert "lease expired" in str(error)
    assert type(writer.failure) is CommitRefused, repr(writer.failure)
    with pytest.raises(CommitRefused, match="lease expired"):
        writer.append("acme", "s-1", "messages", "item.added", {"n": 2})
    writer.close()
    # Nothing after the acknowledged record; the chain is intact for the next leader.
    objs = assert_chain(pg_url, info)
    assert objs[-1]["seq"] == acked.seq


def test_a_locked_head_row_fails_an_append_within_its_lease(pg_url, tmp_path):  # noqa: F811
    """Issue 30, item 2's first step: every statement of the writer has a deadline within the
    lease (statement_timeout), so an append that meets the head row locked by another session
    fails before the lease ends, with nothing acknowledged (CommitUnknown: 503 with
    Retry-After over HTTP), instead of waiting as long as the lock is held."""
    from streams.web.errors import from_exception

    info, key = make_store(pg_url, tmp_path / "data", seg_bits=4)
    seconds = 2.0
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", seconds)
    assert lease is not None
    writer = open_partition_writer(pg_url, info, key, 0, lease, checkpoint_interval=3600)
    acked = writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
    blocker = psycopg.connect(pg_url, autocommit=True)
    blocker.execute("BEGIN")
    blocker.execute("SELECT last_seq FROM lm_head WHERE partition = 0 FOR UPDATE")
    outcome: list[BaseException | None] = []

    def append() -> None:
        try:
            writer.append("acme", "s-1", "messages", "item.added", {"n": 2})
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    started = time.monotonic()
    thread = threading.Thread(target=append, daemon=True)
    thread.start()
    try:
        thread.join(seconds + 3.0)  # the lease plus a margin; it waited for the lock before
        took = time.monotonic() - started
        assert not thread.is_alive(), "the append still waits on the locked head row"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        thread.join(10)
    assert took < seconds + 1.0, took
    (error,) = outcome
    assert type(error) is CommitUnknown, repr(error)
    assert "not committed" in str(error), error
    response = from_exception(error)
    assert response.status_code == 503 and response.headers["Retry-After"], response.headers
    writer.close()
    objs = assert_chain(pg_url, info)
    assert [o["seq"] for o in objs if o.get("payload") == {"n": 2}] == []
    assert objs[acked.seq]["payload"] == {"n": 1}
