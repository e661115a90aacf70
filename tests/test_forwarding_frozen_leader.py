"""A request forwarded to a leader that froze is served by the replica that takes over, once.

Issue 30: requests the healthy replica had forwarded to a stalled leader before it took the
partition over waited as long as the stall. Two real `ledgermem serve --store` replicas share a
database (lease 2 s); the leader is stopped with SIGSTOP (its sockets stay open, it answers
nothing), and a keyed write is sent at once to the other replica, whose route still names the
frozen leader. The forward must be cut when the partition's route moves and the write served on
the new route, the healthy replica; after the frozen leader wakes (and reads the abandoned
request), the write is in the table exactly once.

The HTTP timeout is a hang guard (before the fix the forward waited 60 s), not a speed assertion.
"""

from __future__ import annotations

import signal

import httpx
import orjson

from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.pglog import rows
from tests.helpers.replicas import leading, make_replicas, readiness, replica, wait_until

GUARD = 30.0


def _copies(url: str, content: bytes) -> int:
    return sum(
        1
        for _, _, line in rows(url)
        if orjson.loads(line)["type"] == "item.added" and content in line
    )


def test_a_keyed_write_forwarded_to_a_frozen_leader_lands_once_at_the_new_one(pg_url, tmp_path):  # noqa: F811
    _, dirs = make_replicas(pg_url, tmp_path, 2)
    frozen = replica(dirs[0], pg_url, 2.0).start()
    healthy = None
    try:
        wait_until(lambda: leading(frozen) == {0}, what="the first replica to lead")
        healthy = replica(dirs[1], pg_url, 2.0).start()
        with httpx.Client(base_url=healthy.url, timeout=GUARD) as client:
            wait_until(lambda: client.put("/v1/sessions/s").status_code in (200, 201))
            frozen.proc.send_signal(signal.SIGSTOP)
            answer = client.post(
                "/v1/sessions/s/sections/findings/items",
                json={"content": "frozen-leader-item"},
                headers={"Idempotency-Key": "frozen-leader-key"},
            )
            metrics = client.get("/metrics").text
        assert answer.status_code == 201, answer.text
        assert leading(healthy) == {0}
        assert 'ledgermem_forwarded_requests_total{outcome="rerouted"} 1.0' in metrics
        frozen.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: readiness(frozen), what="the woken replica to answer")
        assert _copies(pg_url, b"frozen-leader-item") == 1
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
        frozen.kill()
        if healthy is not None:
            healthy.kill()
