"""Time travel is cheap and bounded (issue 13, item 10): `state_at` starts from the nearest
checkpoint or snapshot at or before its seq, the checkpoints never outlive an erase, and the
service runs at most a few replays at once, answering 429 `busy` with Retry-After to the rest."""

from __future__ import annotations

import threading

import httpx
from server import Server

from sections.runtime.memory import Memory


def _log(data, records: int) -> None:
    with Memory.open(data) as memory:
        sessions = [memory.session(f"s{i}") for i in range(4)]
        for n in range(records):
            sessions[n % 4].add("findings", f"finding {n} " + "x" * 200)


def test_state_at_starts_from_a_checkpoint_and_equals_a_replay_from_zero(tmp_path):
    _log(tmp_path, 400)
    with Memory.open(tmp_path) as memory:
        memory.history.checkpoints.every = 50
        head = memory.writer.size - 1
        for at in (head - 3, 10, 333, 120, head, 251):
            assert memory.state_at(at).state_hash() == memory.rebuild(at).state_hash(), at
        for at in (333, 120, 251):  # each later call replays at most `every` records
            nearest = memory.history.checkpoints.nearest(at)
            assert nearest is not None and at - 50 < nearest[0] <= at, at


def test_an_erase_drops_the_checkpoints_that_held_the_erased_content(tmp_path):
    with Memory.open(tmp_path) as memory:
        memory.history.checkpoints.every = 10
        session = memory.session("s")
        secret = session.add("findings", "the password is hunter2")
        for n in range(60):
            session.add("messages", f"message {n}")
        at = memory.writer.size - 1
        assert b"hunter2" in repr(memory.state_at(at).to_json()).encode()
        assert memory.history.checkpoints.nearest(at) is not None
        session.erase([secret.id], reason="gdpr")
        assert memory.history.checkpoints.nearest(at) is None
        again = memory.state_at(at)
        assert b"hunter2" not in repr(again.to_json()).encode()
        assert again.state_hash() == memory.rebuild(at).state_hash()


def test_concurrent_time_travel_beyond_the_bound_is_429_busy_and_appends_nothing(tmp_path):
    _log(tmp_path / "data", 3000)
    with Server(tmp_path / "data") as server, httpx.Client(base_url=server.url, timeout=60) as c:
        head = c.get("/v1/log/status").json()["head"]
        answers: list[httpx.Response] = []
        start = threading.Barrier(12)

        def call(k: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                start.wait()
                answers.append(client.get("/v1/state", params={"at": head - 1 - 97 * k}))

        threads = [threading.Thread(target=call, args=(k,)) for k in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) == {200, 429}, statuses
        for busy in (a for a in answers if a.status_code == 429):
            assert busy.json()["error"]["code"] == "busy"
            assert int(busy.headers["retry-after"]) >= 1
        answered = statuses.count(200)
        reads = c.get("/v1/events", params={"after": head, "wait": 0, "limit": 1000}).json()
        traced = {
            r["payload"]["at"] for r in reads["records"] if r["payload"].get("purpose") == "state"
        }
        assert len(traced) == answered  # one traced read per answer; a 429 appends nothing
