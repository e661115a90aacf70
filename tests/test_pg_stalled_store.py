"""A store connection that stalls (TCP alive, no bytes) bounds every call instead of hanging it.

Issue 30, item 2: with the leader's PostgreSQL connection stalled, requests took as long as the
stall. `statement_timeout` is the server's, and keepalives are acknowledged by the kernels, so
neither can end a wait for bytes that never come. Here a real TCP proxy (tests/helpers/
stall_proxy.py) sits between the writer (or a whole replica) and PostgreSQL and stops forwarding
bytes while keeping every socket open. While it is frozen, every call must end: an append with
CommitUnknown, a checkpoint with a refusal, an HTTP write with 503 and Retry-After; what was
acknowledged before the stall is in the table, and the chain is intact.

The thread joins and HTTP timeouts below are hang guards (a broken run fails instead of hanging),
not speed assertions: the property is that each call is answered while the proxy is frozen.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

import httpx
import orjson
import psycopg
import pytest

from eventstore.errors import WriterClosed
from eventstore.pg.deadline import StoreStalled, within
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect
from eventstore.segfile import leaf_hash_of
from eventstore.sink import CommitRefused, CommitUnknown
from streams.client import Client
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.pglog import assert_chain, make_store, rows, take
from tests.helpers.replicas import leading, make_replicas, replica, wait_until
from tests.helpers.stall_proxy import StallProxy
from tests.helpers.stores import store_url, stored_lines  # noqa: F401  (the fixture)

LEASE = 1.0  # seconds
GUARD = 30.0  # a hang guard, many leases long


def _proxy(url: str) -> StallProxy:
    return StallProxy(urlsplit(url).port or 5432)


def _in_thread(call) -> tuple[threading.Thread, list[BaseException | None]]:
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_call_past_its_deadline_is_cut_and_one_within_it_is_not(pg_url):  # noqa: F811
    """The primitive: a statement that sends nothing back before the deadline (the server is
    busy, as good as silent) raises StoreStalled; the connection is unusable afterwards; a call
    that answers in time is left alone, its connection still good."""
    conn = connect(pg_url)
    with within(conn, time.monotonic() + 30, "a quick read"):
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert conn.execute("SELECT 2").fetchone() == (2,)
    deadline = time.monotonic() + 0.2
    with pytest.raises(StoreStalled, match="a long sleep"), within(conn, deadline, "a long sleep"):
        conn.execute("SELECT pg_sleep(30)")
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 3")
    conn.close()


def test_appends_on_a_stalled_connection_end_unknown_while_it_stalls(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data")
    with _proxy(pg_url) as proxy:
        lease = take(pg_url, 0, "replica-a", LEASE)
        writer = open_partition_writer(
            proxy.url(pg_url), info, key, 0, lease, checkpoint_interval=3600
        )
        acked = [writer.append("acme", "s-1", "messages", "item.added", {"n": n}) for n in range(3)]
        proxy.freeze()
        calls = [
            _in_thread(lambda n=n: writer.append("acme", "s-1", "messages", "item.added", {"x": n}))
            for n in range(3)
        ]
        for thread, _ in calls:
            thread.join(GUARD)
        assert all(not thread.is_alive() for thread, _ in calls), "an append hung on the stall"
        answers = [outcome[0] for _, outcome in calls]
        assert all(isinstance(a, CommitUnknown | WriterClosed) for a in answers), answers
        assert any(type(a) is CommitUnknown for a in answers), answers
        proxy.thaw()
        writer.close()
    objs = assert_chain(pg_url, info)  # gap-free, chained, the head on the last row
    table = {seq: line for seq, _, line in rows(pg_url)}
    for record in acked:
        assert record.seq in table and record.seq < len(objs)


def test_a_checkpoint_on_a_stalled_connection_is_refused_at_the_lease_end(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data")
    with _proxy(pg_url) as proxy:
        lease = take(pg_url, 0, "replica-a", LEASE)
        writer = open_partition_writer(
            proxy.url(pg_url), info, key, 0, lease, checkpoint_interval=3600
        )
        acked = writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
        proxy.freeze()
        thread, outcome = _in_thread(writer.checkpoint)
        thread.join(GUARD)
        assert not thread.is_alive(), "the checkpoint hung on the stall"
        (error,) = outcome
        assert type(error) is CommitRefused, repr(error)
        assert "lease expired" in str(error)
        proxy.thaw()
        writer.close()
    assert acked.seq in {seq for seq, _, _ in rows(pg_url)}
    assert_chain(pg_url, info)


def test_a_replica_on_a_stalled_store_answers_every_write_503_with_retry_after(
    store_url,  # noqa: F811
    tmp_path,
):
    """Either engine: PostgreSQL's calls are cut by deadline.py, Redis's by the socket timeouts
    of its clients (the sink's within the lease, the leadership loop's half a lease)."""
    _, dirs = make_replicas(store_url, tmp_path, 1)
    with _proxy(store_url) as proxy:
        server = replica(dirs[0], proxy.url(store_url), 2.0).start()
        try:
            wait_until(lambda: leading(server) == {0}, what="the replica to lead")
            acked = {}
            with httpx.Client(base_url=server.url, timeout=GUARD) as client:
                for n in range(3):
                    answer = client.put(f"/v1/sessions/before{n}")
                    assert answer.status_code == 201, answer.text
                    acked[answer.json()["record"]["seq"]] = answer.json()["record"]["h"]
            proxy.freeze()
            answers: list[httpx.Response] = []

            def write(n: int) -> None:
                with httpx.Client(base_url=server.url, timeout=GUARD) as client:
                    answers.append(client.put(f"/v1/sessions/during{n}"))

            calls = [_in_thread(lambda n=n: write(n)) for n in range(4)]
            for thread, _ in calls:
                thread.join(GUARD + 5)
            assert [outcome for _, outcome in calls] == [[None]] * 4, "a request hung or failed"
            # Answered while the proxy is still frozen: no commit could have completed.
            assert [a.status_code for a in answers] == [503] * 4, [a.text for a in answers]
            assert all(int(a.headers["retry-after"]) >= 1 for a in answers)
            assert all(a.json()["error"]["code"] for a in answers)
            proxy.thaw()

            def written() -> bool:  # the replica leads again once the store answers
                with httpx.Client(base_url=server.url, timeout=GUARD) as client:
                    answer = client.put("/v1/sessions/after")
                if answer.status_code in (200, 201):
                    return True
                assert answer.status_code == 503, answer.text
                return False

            wait_until(written, what="a write after the stall")
        finally:
            server.kill()
    table = {seq: leaf_hash_of(line).hex() for seq, line in stored_lines(store_url, 0)}
    for seq, h in acked.items():
        assert table[seq] == h


def _added(url: str, content: str) -> list[int]:
    """The seqs of the item.added records holding `content`, read from the table."""
    found = []
    for seq, _, line in rows(url):
        record = orjson.loads(line)
        if record["type"] == "item.added" and content.encode() in orjson.dumps(record["payload"]):
            found.append(seq)
    return found


def test_a_write_forwarded_to_a_leader_whose_store_stalls_completes_once(pg_url, tmp_path):  # noqa: F811
    """The leader's store stalls; a client with the default retries writes through the healthy
    replica, which forwards to the leader: the leader answers 503 at its lease's end (or the
    route moves under the forward), the healthy replica takes the partition over, and the
    client's retry, with the same Idempotency-Key, lands there once."""
    _, dirs = make_replicas(pg_url, tmp_path, 2)
    with _proxy(pg_url) as proxy:
        stalled = replica(dirs[0], proxy.url(pg_url), 2.0).start()
        healthy = None
        try:
            wait_until(lambda: leading(stalled) == {0}, what="the first replica to lead")
            healthy = replica(dirs[1], pg_url, 2.0).start()
            with Client(healthy.url) as client:
                wait_until(lambda: client.create_session("s-fwd"), what="a forwarded write")
                before = client.add_item("s-fwd", "findings", "before-stall")
            proxy.freeze()
            outcome: dict[str, object] = {}

            def write() -> None:
                with Client(healthy.url) as client:  # the default retry policy
                    outcome["answer"] = client.add_item("s-fwd", "findings", "during-stall")

            thread, failed = _in_thread(write)
            thread.join(GUARD)
            assert not thread.is_alive(), "the forwarded write hung on the stalled leader"
            assert failed == [None], failed
            assert leading(healthy) == {0}
            answer = outcome["answer"]
            assert isinstance(answer, dict)
        finally:
            stalled.kill()
            if healthy is not None:
                healthy.kill()
    assert _added(pg_url, "before-stall") == [before["record"]["seq"]]
    assert _added(pg_url, "during-stall") == [answer["record"]["seq"]]


def test_a_read_the_store_cannot_answer_is_a_store_error_and_a_503(pg_url, tmp_path):  # noqa: F811
    """A redaction reads its target through the sink: with the store gone, that read raises the
    typed StoreError (never the driver's own error), and the service answers it 503
    store_unavailable with Retry-After (it was 400 "refused": the request was fine)."""
    from eventstore.shared import StoreError
    from streams.web.errors import from_exception

    info, key = make_store(pg_url, tmp_path / "data")
    proxy = _proxy(pg_url)
    lease = take(pg_url, 0, "replica-a", LEASE)
    writer = open_partition_writer(proxy.url(pg_url), info, key, 0, lease, checkpoint_interval=3600)
    try:
        acked = writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
        proxy.close()  # the store unreachable: every new connection refused
        with pytest.raises(StoreError) as raised:
            writer._sink.read_record(acked.seq)
        answer = from_exception(raised.value)
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert orjson.loads(answer.body)["error"]["code"] == "store_unavailable"
    finally:
        writer.close()
