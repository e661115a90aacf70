"""Retention through a real `ledgermem serve`: POST /v1/cleanup (admin scope, the token's tenant
only), `max_items` through PUT .../sections/{section} and session overrides, refusals (400 or
403 JSON, nothing appended), and the service's TTL removing idle sessions by itself."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from server import Server

from eventstore.partitions import partition_of
from sections.model.retention import MAX_AGE_SECONDS
from sections.runtime.memory import Memory
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.replicas import as_replica, leading, make_replicas, replica, wait_until

A = {"Authorization": "Bearer tok-a"}  # tenant acme, admin
B = {"Authorization": "Bearer tok-b"}  # tenant globex, read and write only
TOKENS = (
    '[[tokens]]\ntoken = "tok-a"\ntenant = "acme"\nscopes = ["read", "write", "admin"]\n'
    '[[tokens]]\ntoken = "tok-b"\ntenant = "globex"\nscopes = ["read", "write"]\n'
)


def _serve(root: Path, memory_toml: str | None = None) -> Server:
    settings = root / "settings.toml"
    settings.write_text(TOKENS)
    args = ["--config", str(settings)]
    if memory_toml is not None:
        (root / "memory.toml").write_text(memory_toml)
        args += ["--memory-config", str(root / "memory.toml")]
    return Server(root / "data", *args)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with (
        _serve(tmp_path_factory.mktemp("retention-http")) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


def _head(client: httpx.Client) -> int:
    return client.get("/readyz").json()["head"]


def _refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == code


def test_cleanup_removes_the_tenants_idle_sessions_and_answers_which(client):
    for name in ("old-1", "old-2"):
        assert client.put(f"/v1/sessions/{name}", headers=A).status_code == 201
    assert client.put("/v1/sessions/theirs", headers=B).status_code == 201
    info = client.get("/v1/sessions/old-1", headers=A).json()
    assert info["created_ts"] > 0 and info["active_ts"] >= info["created_ts"]
    listed = client.get("/v1/sessions", headers=A).json()["sessions"]
    assert all("created_ts" in s and "active_ts" in s for s in listed)
    head = _head(client)
    kept = client.post("/v1/cleanup", json={"max_age_seconds": 3600}, headers=A)
    assert kept.status_code == 200, kept.text
    assert kept.json() == {"removed": [], "reason": "max_age", "erased": False}
    assert _head(client) == head  # nothing removed: nothing appended
    gone = client.post("/v1/cleanup", json={"max_age_seconds": 0}, headers=A)
    assert gone.status_code == 200, gone.text
    assert gone.json()["removed"] == ["old-1", "old-2"]
    _refused(client.get("/v1/sessions/old-1", headers=A), 404, "not_found")
    assert client.get("/v1/sessions/theirs", headers=B).status_code == 200  # another tenant's
    events = client.get("/v1/events", params={"after": head, "type": "session.deleted"}, headers=A)
    reasons = [(r["session"], r["payload"]["reason"]) for r in events.json()["records"]]
    assert reasons == [("old-1", "max_age"), ("old-2", "max_age")]


@pytest.mark.parametrize(
    "body",
    [{}, {"max_age_seconds": -1}, {"max_age_seconds": "60"}, {"max_age_seconds": True},
     {"max_age_seconds": None}, {"max_age_seconds": 60, "tenant": "globex"}, [60], "60",
     {"max_age_seconds": 1.4e308}],
)  # fmt: skip
def test_a_bad_cleanup_is_400_json_with_nothing_appended(client, body):
    assert client.put("/v1/sessions/stays", headers=A).status_code in (200, 201)
    head = _head(client)
    _refused(client.post("/v1/cleanup", json=body, headers=A), 400, "invalid_input")
    assert _head(client) == head
    assert client.get("/v1/sessions/stays", headers=A).status_code == 200


def test_openapi_describes_the_cleanup_from_its_models(client):
    doc = client.get("/openapi.json").json()
    op = doc["paths"]["/v1/cleanup"]["post"]
    schemas = doc["components"]["schemas"]

    def resolved(schema):
        return schemas[schema["$ref"].rsplit("/", 1)[-1]]

    assert op["operationId"] == "cleanupSessions"
    body = resolved(op["requestBody"]["content"]["application/json"]["schema"])
    assert body["required"] == ["max_age_seconds"] and body["additionalProperties"] is False
    assert body["properties"]["max_age_seconds"]["maximum"] == MAX_AGE_SECONDS
    reply = resolved(op["responses"]["200"]["content"]["application/json"]["schema"])
    answer = client.post("/v1/cleanup", json={"max_age_seconds": 3600}, headers=A).json()
    assert set(answer) == set(reply["required"]) == set(reply["properties"])
    assert {"403", "4XX", "503", "507"} <= set(op["responses"])


def test_cleanup_needs_the_admin_scope(client):
    head = _head(client)
    _refused(client.post("/v1/cleanup", json={"max_age_seconds": 0}, headers=B), 403, "forbidden")
    _refused(client.post("/v1/cleanup", json={"max_age_seconds": 0}), 401, "unauthorized")
    assert _head(client) == head
    assert client.get("/v1/sessions/theirs", headers=B).status_code == 200


def test_max_items_over_http(client):
    assert client.put("/v1/sessions/bounded", headers=A).status_code == 201
    for n in range(3):
        added = client.post(
            "/v1/sessions/bounded/sections/messages/items", json={"content": f"m{n}"}, headers=A
        )
        assert added.status_code == 201, added.text
    configured = client.put(
        "/v1/sessions/bounded/sections/messages", json={"max_items": 2}, headers=A
    )
    assert configured.status_code == 200, configured.text
    record = configured.json()["record"]
    assert record["payload"]["config"]["max_items"] == 2
    assert [e["reason"] for e in record["payload"]["evicted"]] == ["max_items"]
    section = client.get("/v1/sessions/bounded", headers=A).json()["sections"]["messages"]
    assert (section["max_items"], section["items"]) == (2, 2)
    added = client.post(
        "/v1/sessions/bounded/sections/messages/items", json={"content": "m3"}, headers=A
    )
    assert added.json()["record"]["payload"]["evicted"][0]["reason"] == "max_items"
    items = client.get("/v1/sessions/bounded/sections/messages/items", headers=A).json()["items"]
    assert [i["content"] for i in items] == ["m2", "m3"]
    head = _head(client)
    for bad in (0, -1, 1.5, "2", True):
        _refused(
            client.put("/v1/sessions/bounded/sections/messages", json={"max_items": bad},
                       headers=A),
            400, "invalid_input",
        )  # fmt: skip
        _refused(
            client.put("/v1/sessions/unmade", json={"sections": {"messages": {"max_items": bad}}},
                       headers=A),
            400, "invalid_input",
        )  # fmt: skip
    assert _head(client) == head
    assert client.get("/v1/sessions/unmade", headers=A).status_code == 404
    made = client.put(
        "/v1/sessions/made", json={"sections": {"messages": {"max_items": 1}}}, headers=A
    )
    assert made.json()["record"]["payload"]["config"]["messages"]["max_items"] == 1


def test_the_service_ttl_removes_idle_sessions_and_erases_them(tmp_path):
    """`[retention] session_ttl_seconds`: `ledgermem serve` removes the sessions idle longer
    than that, every `ttl_interval_seconds`, of every tenant (reason `ttl`), and with
    `erase = true` their content leaves the segment files."""
    memory_toml = "[retention]\nsession_ttl_seconds = 1\nttl_interval_seconds = 0.1\nerase = true\n"
    server = _serve(tmp_path, memory_toml)
    log_dir = tmp_path / "data" / "log"
    with server, httpx.Client(base_url=server.url, timeout=30) as client:
        for headers, name in ((A, "idle-a"), (B, "idle-b")):
            assert client.put(f"/v1/sessions/{name}", headers=headers).status_code == 201
            added = client.post(
                f"/v1/sessions/{name}/sections/messages/items",
                json={"content": f"ttl-secret-{name}-9182"},
                headers=headers,
            )
            assert added.status_code == 201, added.text
        deadline = time.monotonic() + 60  # a bound on waiting, not a timed assertion
        for headers, name in ((A, "idle-a"), (B, "idle-b")):
            while client.get(f"/v1/sessions/{name}", headers=headers).status_code != 404:
                assert time.monotonic() < deadline, "the TTL never removed " + name
                time.sleep(0.05)
        while b"ttl-secret-" in b"".join(p.read_bytes() for p in log_dir.glob("seg-*.jsonl")):
            assert time.monotonic() < deadline, "the TTL's erase never redacted the content"
            time.sleep(0.05)
    mem = Memory.open(tmp_path / "data")
    try:
        deleted = [r for r in mem.reader.records() if r.type == "session.deleted"]
        assert {(r.tenant, r.session) for r in deleted} == {
            ("acme", "idle-a"), ("globex", "idle-b"),
        }  # fmt: skip
        assert all(r.payload["reason"] == "ttl" and r.payload["erase"] for r in deleted)
        erased = [r for r in mem.reader.records() if r.type == "session.erased"]
        assert sorted(r.payload["deleted_seq"] for r in erased) == sorted(r.seq for r in deleted)
        assert mem.read(lambda state: state.pending_retention) == {}
    finally:
        mem.close()


def test_the_ttl_runs_on_the_partitions_a_replica_leads(pg_url, tmp_path):  # noqa: F811
    """With a shared store, the TTL runs in every memory the replica leads (two partitions:
    two tenants that land on different ones are both cleaned)."""
    _, (data,) = make_replicas(pg_url, tmp_path, 1, partitions=2)
    config = tmp_path / "memory.toml"
    config.write_text("[retention]\nsession_ttl_seconds = 1\nttl_interval_seconds = 0.1\n")
    tenants = ["t0", next(t for t in (f"t{n}" for n in range(1, 50))
                          if partition_of(t, 2) != partition_of("t0", 2))]  # fmt: skip
    with replica(data, pg_url, 1.0, "--memory-config", str(config)) as server:
        wait_until(lambda: leading(server) == {0, 1}, what="the replica to lead both")
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for tenant in tenants:
                headers = as_replica(data, "PUT", "/v1/sessions/idle", tenant)
                answer = client.put("/v1/sessions/idle", headers=headers)
                assert answer.status_code == 201, answer.text
            for tenant in tenants:
                wait_until(
                    lambda t=tenant: client.get(
                        "/v1/sessions/idle", headers=as_replica(data, "GET", "/v1/sessions/idle", t)
                    ).status_code == 404,
                    what=f"the TTL to remove {tenant}'s session",
                )  # fmt: skip
