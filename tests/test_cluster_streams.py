"""Streams on every replica of a shared store, per partition (docs/wire.md, "Partitions").

Two real replicas, P = 2, each leading one partition: records written on one partition's leader
reach the other replica's hub through its mirror, byte for byte; an operator's unscoped stream
names its partition (`partition=N`, or `"partition": N` in the WebSocket's first frame), and is
refused with a 400 naming the partitions when it does not (404 for a partition past the last); a
tenant filter picks the partition.
"""

from __future__ import annotations

import asyncio
import json

import httpx
from websockets.asyncio.client import connect

from eventstore.partitions import partition_of
from tests.helpers.described import conforms
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.replicas import as_replica, leading, make_replicas, replica, wait_until


def jsonl(server, **params) -> tuple[int, bytes]:
    response = httpx.get(
        f"{server.url}/v1/stream/jsonl", params={"follow": 0, **params}, timeout=10
    )
    return response.status_code, response.content


async def ws_first(server, frame: dict, count: int) -> list[dict]:
    """The first `count` records of a WebSocket subscription opened with `frame`."""
    got = []
    async with connect("ws" + server.url.removeprefix("http") + "/v1/stream/ws") as ws:
        await ws.send(json.dumps(frame))
        while len(got) < count:
            message = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if "control" not in message:
                got.append(message)
    return got


def test_every_replica_streams_every_partition(pg_url, tmp_path):  # noqa: F811
    _, (a_dir, b_dir) = make_replicas(pg_url, tmp_path, 2, partitions=2)
    with replica(a_dir, pg_url, 1.0) as a, replica(b_dir, pg_url, 1.0) as b:
        wait_until(lambda: len(leading(a)) == 1 and len(leading(b)) == 1, what="balance")
        home = partition_of("default", 2)  # no tokens: every caller is tenant "default"
        leader, other = (a, b) if home in leading(a) else (b, a)
        for n in range(10):
            httpx.put(f"{leader.url}/v1/sessions/s{n}", timeout=10).raise_for_status()
        # A forwarded call reaching the follower is answered there: its 421 names the leader
        # (a plain call to the follower is forwarded to the leader: test_replicas_failover.py).
        other_dir = b_dir if other is b else a_dir
        headers = as_replica(other_dir, "PUT", "/v1/sessions/x")
        refused = httpx.put(f"{other.url}/v1/sessions/x", headers=headers, timeout=10)
        assert refused.status_code == 421 and refused.json()["error"]["code"] == "not_leader"

        status, on_leader = jsonl(leader, partition=home)
        assert status == 200 and on_leader.count(b'"session":"s') >= 10
        # The leader traced that stream (stream.opened/closed): its log only grew since.
        wait_until(lambda: jsonl(other, partition=home)[1].startswith(on_leader), what="mirror")
        created = [
            json.loads(line)["session"]
            for line in jsonl(other, tenant="default")[1].splitlines()
            if b'"type":"session.created"' in line
        ]
        assert [f"s{n}" for n in range(10)] == [s for s in created if s.startswith("s")]

        status, body = jsonl(other)
        assert status == 400 and b"partition" in body and b"0..1" in body
        assert jsonl(other, partition=2)[0] == 404  # no such partition
        assert jsonl(other, partition="one")[0] == 400
        assert jsonl(other, tenant="default", partition=1 - home)[0] == 400

        lines = [json.loads(line) for line in on_leader.splitlines()]
        frames = asyncio.run(ws_first(other, {"after": -1, "partition": home}, len(lines)))
        assert frames == lines
        tenants = [line for line in lines if line["tenant"] == "default"]
        assert asyncio.run(ws_first(other, {"filter": {"tenant": "default"}}, 1)) == tenants[:1]

        # Status on every replica, per partition; both agree on who leads what.
        views = [httpx.get(f"{s.url}/v1/log/status", timeout=10).json() for s in (a, b)]
        doc = httpx.get(f"{a.url}/openapi.json", timeout=10).json()
        for path in ("/v1/log/status", "/readyz"):
            schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
            answer = httpx.get(f"{b.url}{path}", timeout=10).json()
            conforms(doc, schema["schema"], answer)
        for view, server in zip(views, (a, b), strict=True):
            assert view["scope"] == "store" and len(view["partitions"]) == 2
            assert {p["partition"] for p in view["partitions"] if p["leading"]} == leading(server)
        assert [p["leader"] for p in views[0]["partitions"]] == [
            p["leader"] for p in views[1]["partitions"]
        ]
        assert views[0]["stream_traces_skipped"] + views[1]["stream_traces_skipped"] > 0
        for server in (a, b):
            checkpoint = httpx.get(
                f"{server.url}/v1/log/checkpoint", params={"partition": home}, timeout=10
            )
            assert checkpoint.status_code == 200 and f"/p{home}\n".encode() in checkpoint.content
            for given, status in ((2, 404), ("two", 400)):  # no such partition; no number
                bad = httpx.get(
                    f"{server.url}/v1/log/checkpoint", params={"partition": given}, timeout=10
                )
                assert bad.status_code == status, bad.text
