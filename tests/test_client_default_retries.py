"""The client's default retries outlive a restart: a write made while the service is down for a
few seconds completes, once (issue 30: the defaults gave up after about a second, and a
takeover takes 2.2 to 5.7 s).

A real `ledgermem serve` is killed with SIGKILL; a client with the default `Retry` writes while
nothing listens (connection refused, again and again); the service comes back on the same port
after RESTART_GAP seconds, within the measured takeover times. The write must return its record,
and the log must hold it exactly once, under the one Idempotency-Key every try carried.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path

import orjson

from eventstore.reader import LogReader
from streams.client import Client
from streams.client.base import CALL_RETRY
from streams.client.retry import Attempts, Retry
from tests.server import Server

RESTART_GAP = 3.0  # seconds the service is down: inside the 2.2-5.7 s a takeover was measured at


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(data: Path, port: int) -> Server:
    return Server(data, "--port", str(port), "--unsafe-no-fsync").start()


def _added(data: Path, content: str) -> list[dict]:
    found = []
    for _, line in LogReader(data / "log").lines():
        record = orjson.loads(line)
        payload = record.get("payload")
        if record["type"] == "item.added" and content.encode() in orjson.dumps(payload):
            found.append(record)
    return found


def test_a_write_made_while_the_service_restarts_completes_exactly_once(tmp_path):
    data, port = tmp_path / "data", _free_port()
    server = _serve(data, port)
    try:
        with Client(server.url) as client:
            client.create_session("s-restart")
        server.kill()
        outcome: dict[str, object] = {}

        def write() -> None:
            with Client(server.url) as client:  # the default retry policy
                try:
                    outcome["answer"] = client.add_item("s-restart", "findings", "kept-once")
                except Exception as exc:  # noqa: BLE001 - asserted below
                    outcome["error"] = exc

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        time.sleep(RESTART_GAP)  # the service is down this long (setup, not an assertion)
        assert thread.is_alive(), f"the write gave up while the service was down: {outcome}"
        server = _serve(data, port)
        thread.join(60)  # a hang guard
        assert "error" not in outcome, outcome
        answer = outcome["answer"]
        assert isinstance(answer, dict)
        added = _added(data, "kept-once")
        assert len(added) == 1, added
        assert added[0]["seq"] == answer["record"]["seq"]
    finally:
        server.kill()


def test_the_default_policy_keeps_trying_for_its_budget_then_stops():
    """A takeover's 5.7 s is inside the default budget, however the jitter falls."""
    now = [0.0]
    for seed in range(50):
        attempts = Attempts(CALL_RETRY, random.Random(seed), clock=lambda: now[0])
        now[0] = 0.0
        attempts.started = 0.0
        while (delay := attempts.after_failure()) is not None:
            now[0] += delay
        assert 5.7 < now[0] <= CALL_RETRY.budget, (seed, now[0])


def test_the_default_policy_retries_only_what_is_safe_to_retry():
    attempts = Attempts(CALL_RETRY)
    assert [s for s in (500, 502, 503, 504, 400, 409, 421, 429) if attempts.retryable(s)] == [
        502,
        503,
        504,
    ]


def test_a_budget_cuts_the_last_wait_to_end_at_it():
    now = [0.0]
    attempts = Attempts(Retry(tries=10, base=10.0, cap=10.0, budget=3.0), clock=lambda: now[0])
    attempts.rng = random.Random(1)
    first = attempts.after_failure(retry_after=5.0)
    assert first == 3.0
    now[0] = 3.0
    assert attempts.after_failure() is None
