"""kill -9 of a partition's leader under load loses no acknowledged record.

A leader subprocess (tests/helpers/pg_writer.py) takes partition 0's lease, resumes the log and
appends from threads, printing each record once it is acknowledged, while a redactor erases
some of them, so kills also land between a redaction's commit and its rewrite. The test kills
it with SIGKILL after a random short delay, and the next round's leader takes over once the
dead one's lease ran out. After every round: every acknowledged record is in the table at the
seq it was acknowledged with, every acknowledged redaction is applied, the rows are gap-free
and every h recomputes; at the end a new leader resumes once more in this process.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import orjson

from eventstore.pg import lease as leases
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect
from tests.helpers.child import start_child
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pglog import assert_chain, make_store

PG_WRITER = Path(__file__).parent / "helpers" / "pg_writer.py"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROUNDS = int(os.environ.get("LEDGERMEM_PG_KILL9_ROUNDS", 24 if IN_CI else 10))
LEASE_SECONDS = 0.6
SEG_BITS = 4  # many kills land inside a rotation
MAX_DELAY = 0.3


def _start_leader(url: str, data: Path, owner: str, tag: str):
    """A pg_writer leader process, its printed lines collected as they come; `ready` is set
    once it leads."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    child = start_child(
        [sys.executable, str(PG_WRITER), url, str(data), owner, str(LEASE_SECONDS), "3", tag],
        env=env,
    )
    return child.proc, child.lines, child.ready, child.reader


def _round(url: str, data: Path, n: int, wait_ready: bool) -> dict:
    proc, lines, ready, reader = _start_leader(url, data, f"leader-{n}", f"r{n}")
    try:
        if wait_ready:
            assert ready.wait(30), f"the leader never got ready: {proc.stderr.read()!r}"  # type: ignore[union-attr]
        time.sleep(random.uniform(0, MAX_DELAY))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join()
    stderr = proc.stderr.read()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL, stderr
    found: dict = {"acked": {}, "redacted": {}, "ready": False, "refused": []}
    for line in lines:
        assert line.endswith(b"\n"), f"a torn acknowledgement line: {line!r}"
        head, _, rest = line.rstrip(b"\n").partition(b" ")
        if head == b"ready":
            found["ready"] = True
        elif head == b"refused":
            found["refused"].append(rest)
        elif head == b"redacted":
            target, redaction = map(int, rest.split())
            found["redacted"][target] = redaction
        else:
            assert int(head) not in found["acked"], f"seq {int(head)} acknowledged twice"
            found["acked"][int(head)] = rest.decode()
    return found


def test_kill9_of_the_leader_loses_no_acknowledged_record(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    acked: dict[int, str] = {}
    redacted: dict[int, int] = {}
    resumes = 0
    for n in range(ROUNDS):
        found = _round(pg_url, tmp_path / "data", n, wait_ready=n % 5 != 4)
        assert found["refused"] == [], found["refused"]  # nobody else led meanwhile
        for seq, ident in found["acked"].items():
            assert seq not in acked, f"seq {seq} acknowledged in two rounds"
            acked[seq] = ident
        redacted.update(found["redacted"])
        objs = assert_chain(pg_url, info)
        by_seq = {o["seq"]: o for o in objs}
        for seq, ident in acked.items():
            record = by_seq.get(seq)
            assert record is not None, f"acknowledged seq {seq} is missing (round {n})"
            if seq in redacted:
                assert record.get("redacted") == redacted[seq]
            elif "payload" in record:
                assert record["payload"] == {"id": ident}
            else:  # erased by a redaction the kill cut before it was acknowledged
                assert by_seq[record["redacted"]]["type"] == "redaction"
        resumes += found["ready"] and n > 0
    assert len(acked) > ROUNDS * 5

    # A new leader takes over from the last kill, resumes once and writes.
    with connect(pg_url) as conn:
        while (lease := leases.take(conn, 0, "final", 10.0)) is None:
            time.sleep(0.05)
    writer = open_partition_writer(pg_url, info, key, 0, lease)
    assert writer.last_resume["clean"] is False
    record = writer.append("acme", "s-1", "messages", "item.added", {"id": "after"})
    writer.close()
    objs = assert_chain(pg_url, info)
    assert objs[record.seq]["payload"] == {"id": "after"}
    assert [o["type"] for o in objs].count("log.resume") >= resumes + 1
    # Every redaction in the table was applied (an interrupted one finished by the next leader).
    for o in objs:
        if o["type"] == "redaction":
            for target in o["payload"]["targets"]:
                assert "payload" not in objs[target["seq"]], orjson.dumps(objs[target["seq"]])


def test_a_leader_stopped_past_its_lease_acknowledges_nothing_after_it(pg_url, tmp_path):  # noqa: F811
    """SIGSTOP the leader process past its lease, take over, SIGCONT: the old leader finds its
    deadline passed (or its epoch fenced) and acknowledges nothing more."""
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=SEG_BITS)
    proc, lines, ready, reader = _start_leader(pg_url, tmp_path / "data", "old", "old")
    try:
        assert ready.wait(30), proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGSTOP)
        with connect(pg_url) as conn:
            while (lease := leases.take(conn, 0, "new", 30.0)) is None:
                time.sleep(0.05)
        writer = open_partition_writer(pg_url, info, key, 0, lease)
        takeover = writer.size - 1  # the new leader's log.resume
        new = [
            writer.append("acme", "s", "messages", "item.added", {"id": f"new/{n}"})
            for n in range(20)
        ]
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(30) == 0  # every appender was refused, so it exits by itself
        more = writer.append("acme", "s", "messages", "item.added", {"id": "new/last"})
        writer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    acked = {}
    refused = []
    for line in lines:
        head, _, rest = line.rstrip(b"\n").partition(b" ")
        if head == b"refused":
            refused.append(rest)
        elif head.isdigit():
            acked[int(head)] = rest.decode()
    # An append sent before the stop is refused by the fence when it reaches the store after the
    # takeover (CommitRefused), or, when the client-side deadline cut its connection as the
    # process woke, left unknown (CommitUnknown: the lease had ended, so the head is not read).
    # Neither is an acknowledgement, which is the property.
    assert len(refused) >= 4 and set(refused) <= {b"CommitRefused", b"CommitUnknown"}, refused
    objs = assert_chain(pg_url, info)
    assert objs[takeover]["type"] == "log.resume"
    for seq, ident in acked.items():
        assert seq < takeover, f"the old leader acknowledged seq {seq} after the takeover"
        assert objs[seq].get("payload", {"id": ident}) == {"id": ident}
    after = [o["payload"]["id"] for o in objs[takeover + 1 :] if o["tenant"] == "acme"]
    assert after == [f"new/{n}" for n in range(20)] + ["new/last"]
    assert [r.seq for r in new] + [more.seq] == [
        o["seq"] for o in objs[takeover + 1 :] if o["tenant"] == "acme"
    ]
