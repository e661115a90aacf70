"""The HTTP service against a real server process: writes are durable and return their record's
exact bytes, refusals are 4xx with nothing appended, tenants are isolated, shutdown is clean and
kill -9 loses no acknowledged write."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from helpers.described import validator
from server import ROOT, Server

from eventstore.checkpoint import VerifierKey
from eventstore.reader import LogReader
from eventstore.verify import verify_log

SESSION = "acme/deal:2026@buyside+1"
S = quote(SESSION, safe="")


@pytest.fixture
def server(tmp_path):
    with Server(tmp_path / "data", "--seg-bits", "5") as srv:
        yield srv


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def shared_client(tmp_path_factory):
    """One server for the tests that only check refusals (each asserts nothing was appended)."""
    with (
        Server(tmp_path_factory.mktemp("shared") / "data", "--seg-bits", "5") as srv,
        httpx.Client(base_url=srv.url, timeout=30) as c,
    ):
        yield c


def _head(client: httpx.Client) -> int:
    return client.get("/v1/log/status").json()["head"]


def _file_line(data_dir: Path, seq: int) -> bytes:
    for _, line in LogReader(data_dir / "log").lines(seq - 1, seq + 1):
        return line
    raise AssertionError(f"seq {seq} not in the files")


def test_put_session_creates_then_gets(client):
    first = client.put(f"/v1/sessions/{S}", json={"metadata": {"app": "deals", "user": "u1"}})
    assert first.status_code == 201
    assert first.json()["record"]["type"] == "session.created"
    again = client.put(f"/v1/sessions/{S}")
    assert again.status_code == 200 and again.json()["record"] is None
    assert (
        client.get("/v1/sessions", params={"app": "deals"}).json()["sessions"][0]["session"]
        == SESSION
    )


def test_added_item_returns_the_exact_bytes_of_its_line_in_the_segment_file(client, server):
    client.put(f"/v1/sessions/{S}")
    response = client.post(
        f"/v1/sessions/{S}/sections/findings/items",
        json={"content": "margin \u2028 40%", "tags": ["fin"], "priority": 5},
    )
    assert response.status_code == 201
    body = response.content
    start = body.index(b'"record":') + len(b'"record":')
    record = json.loads(body)["record"]
    line = _file_line(server.data_dir, record["seq"])
    assert body[start : start + len(line)] == line
    assert json.loads(body)["item"]["id"] == str(record["seq"])


def test_batch_add_is_one_record(client):
    client.put(f"/v1/sessions/{S}")
    response = client.post(
        f"/v1/sessions/{S}/sections/findings/items",
        json={"items": [{"content": "a"}, {"content": "b"}]},
    )
    assert response.status_code == 201
    seq = response.json()["record"]["seq"]
    assert [i["id"] for i in response.json()["items"]] == [str(seq), f"{seq}.1"]


def test_idempotency_key_retry_returns_the_first_record_and_appends_nothing(client):
    client.put(f"/v1/sessions/{S}")
    headers = {"Idempotency-Key": "req-42"}
    first = client.post(
        f"/v1/sessions/{S}/sections/findings/items", json={"content": "once"}, headers=headers
    )
    head = _head(client)
    again = client.post(
        f"/v1/sessions/{S}/sections/findings/items", json={"content": "once"}, headers=headers
    )
    assert again.json()["record"] == first.json()["record"]
    assert _head(client) == head


def test_stale_if_match_is_409_and_appends_nothing(client):
    created = client.put(f"/v1/sessions/{S}")
    version = created.headers["ETag"]
    ok = client.post(
        f"/v1/sessions/{S}/sections/findings/items",
        json={"content": "a"},
        headers={"If-Match": version},
    )
    assert ok.status_code == 201
    head = _head(client)
    stale = client.post(
        f"/v1/sessions/{S}/sections/findings/items",
        json={"content": "b"},
        headers={"If-Match": version},
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "version_conflict"
    assert _head(client) == head


@pytest.mark.parametrize(
    "method, path, kwargs, status",
    [
        ("POST", f"/v1/sessions/{S}/sections/findings/items", {"content": b"{not json"}, 400),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"content": b'{"content":1,"content":2}'},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": {"content": "x", "tags": "fin"}},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": {"content": "x", "priority": "high"}},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": ["not", "an", "object"]},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": {"content": "x", "bogus": 1}},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"content": b'{"content": NaN}'},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"content": b'{"content": 9007199254740993}'},
            400,
        ),
        ("POST", f"/v1/sessions/{S}/sections/nope/items", {"json": {"content": "x"}}, 404),
        ("POST", "/v1/sessions/nobody/sections/findings/items", {"json": {"content": "x"}}, 404),
        ("POST", f"/v1/sessions/{S}/sections/role/items", {"json": {"content": "x"}}, 409),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"content": b"x" * (8 * 2**20 + 1)},
            413,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": {"items": [{"content": "x"}] * 1001}},
            413,
        ),
        ("PUT", "/v1/sessions/has%20space", {}, 400),
        ("PUT", "/v1/sessions/" + "x" * 129, {}, 400),
        ("GET", "/v1/no/such/route", {}, 404),
        ("DELETE", "/v1/sessions", {}, 405),
        ("GET", f"/v1/sessions/{S}/state", {"params": {"at": "abc"}}, 400),
        ("PATCH", f"/v1/sessions/{S}/sections/findings/items/999", {"json": {"content": "x"}}, 404),
        ("PATCH", f"/v1/sessions/{S}/sections/findings/items/999", {"json": {"item": 1}}, 400),
        ("PUT", f"/v1/sessions/{S}/sections/findings", {"json": {"section": "x"}}, 400),
        ("PUT", f"/v1/sessions/{S}/sections/findings", {"json": {"idempotency_key": "x"}}, 400),
        ("PUT", f"/v1/sessions/{S}/sections/role", {"json": {"mutable": True}}, 409),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": {"content": "x"}, "headers": {"If-Match": "--5"}},
            400,
        ),
        (
            "POST",
            f"/v1/sessions/{S}/sections/findings/items",
            {"json": {"content": "x"}, "headers": {"If-Match": "\u00b2".encode()}},
            400,
        ),
        ("GET", f"/v1/sessions/{S}/state", {"params": {"at": "--1"}}, 400),
        ("GET", "/v1/stream/jsonl", {"params": {"after": "9" * 5000}}, 400),
        ("GET", "/v1/events", {"params": {"after": "--5"}}, 400),
    ],
)
def test_bad_input_is_a_4xx_json_error_and_appends_nothing(
    shared_client, method, path, kwargs, status
):
    client = shared_client
    client.put(f"/v1/sessions/{S}")
    head = _head(client)
    if "content" in kwargs:  # raw bytes are sent as what they claim to be (415 otherwise)
        kwargs = {**kwargs, "headers": {"Content-Type": "application/json"}}
    response = client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] and error["message"]
    assert _head(client) == head


def _schema_of(doc: dict, content: dict) -> jsonschema.Draft202012Validator:
    """A validator of the JSON body `content` (a request body's or reply's) describes, its $refs
    resolved in the document."""
    return validator(doc, content["application/json"]["schema"])


ITEM_OPERATIONS = {
    ("/v1/sessions/{session}/items", "get"): "listSessionItems",
    ("/v1/sessions/{session}/events", "get"): "listSessionEvents",
    ("/v1/sessions/{session}/sections/{section}", "put"): "configureSection",
    ("/v1/sessions/{session}/sections/{section}/items", "post"): "addItems",
    ("/v1/sessions/{session}/sections/{section}/items", "get"): "listSectionItems",
    ("/v1/sessions/{session}/sections/{section}/items/{item}", "get"): "getItem",
    ("/v1/sessions/{session}/sections/{section}/items/{item}", "patch"): "updateItem",
    ("/v1/sessions/{session}/sections/{section}/items/{item}", "delete"): "removeItem",
}


def test_openapi_describes_the_item_operations_from_their_models(client):
    doc = client.get("/openapi.json").json()
    ops = {key: doc["paths"][key[0]][key[1]] for key in ITEM_OPERATIONS}
    assert {key: op["operationId"] for key, op in ops.items()} == ITEM_OPERATIONS
    s = "/v1/sessions/{session}"
    add = ops[(s + "/sections/{section}/items", "post")]
    # The lean route keeps its operation: its write headers and its answer's ETag.
    assert {p["name"] for p in add["parameters"] if p["in"] == "header"} == {
        "Idempotency-Key",
        "If-Match",
    }
    assert set(add["responses"]["201"]["headers"]) == {"ETag"}
    assert {"413", "415", "503", "507", "4XX"} <= set(add["responses"])

    assert client.put(f"/v1/sessions/{S}").status_code == 201
    body = _schema_of(doc, add["requestBody"]["content"])
    assert body.is_valid({"content": "x", "kind": "user_message", "tags": ["a"]})
    assert body.is_valid({"items": [{"content": {"any": ["json", 1.5]}}]})
    for refused in ({"kind": "no content"}, {"content": "x", "items": []}, {"items": []},
                    {"content": 2**53}, {"content": "x", "colour": "red"}):  # fmt: skip
        assert not body.is_valid(refused), refused
        answer = client.post(f"/v1/sessions/{S}/sections/findings/items", json=refused)
        assert answer.status_code == 400, (refused, answer.text)

    items = f"/v1/sessions/{S}/sections/findings/items"
    version = client.get(f"/v1/sessions/{S}").headers["etag"].strip('"')
    added = client.post(
        items,
        json={"content": "fact", "role": "user", "tool_calls": [{"id": "c1", "function": {}}]},
        headers={"If-Match": version, "Idempotency-Key": "k1"},
    )
    assert added.status_code == 201, added.text
    _schema_of(doc, add["responses"]["201"]["content"]).validate(added.json())
    item = added.json()["item"]["id"]
    batch = client.post(items, json={"items": [{"content": "a"}, {"content": "b"}]})
    _schema_of(doc, add["responses"]["201"]["content"]).validate(batch.json())

    reads = {
        (s + "/items", "get"): f"/v1/sessions/{S}/items?kind=x&kind=user_message&role=user",
        (s + "/events", "get"): f"/v1/sessions/{S}/events?since=2020-01-01T00:00:00Z&limit=5",
        (s + "/sections/{section}/items", "get"): f"{items}?id={item}&since=0",
        (s + "/sections/{section}/items/{item}", "get"): f"{items}/{item}?reader=operator",
    }
    for key, url in reads.items():
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.text)
        assert set(ops[key]["responses"]["200"]["headers"]) == {"ETag"}
        _schema_of(doc, ops[key]["responses"]["200"]["content"]).validate(answer.json())
    assert client.get(reads[(s + "/events", "get")]).json()["events"][0]["type"] == "user_message"

    writes = [
        ((s + "/sections/{section}/items/{item}", "patch"), "PATCH", f"{items}/{item}",
         {"priority": 2, "kind": None}),
        ((s + "/sections/{section}", "put"), "PUT", f"/v1/sessions/{S}/sections/findings",
         {"budget_tokens": 9000, "policy": "fifo"}),
        ((s + "/sections/{section}/items/{item}", "delete"), "DELETE", f"{items}/{item}", None),
    ]  # fmt: skip
    for key, method, url, change in writes:
        op = ops[key]
        assert {"Idempotency-Key", "If-Match"} <= {p["name"] for p in op["parameters"]}
        if change is not None:
            assert _schema_of(doc, op["requestBody"]["content"]).is_valid(change)
        version = client.get(f"/v1/sessions/{S}").headers["etag"]
        answer = client.request(method, url, json=change, headers={"If-Match": "W/" + version})
        assert answer.status_code == 200, (key, answer.text)
        assert answer.headers["etag"] == client.get(f"/v1/sessions/{S}").headers["etag"]
        _schema_of(doc, op["responses"]["200"]["content"]).validate(answer.json())
    assert not _schema_of(doc, ops[writes[0][0]]["requestBody"]["content"]).is_valid({})
    # A section's name must not start with "_" (reserved): the document says so, the core refuses.
    (name,) = [p for p in ops[writes[1][0]]["parameters"] if p["name"] == "section"]
    assert not jsonschema.Draft202012Validator(name["schema"]).is_valid("_mine")
    refused = client.put(f"/v1/sessions/{S}/sections/_mine", json={"policy": "fifo"})
    assert refused.status_code == 400, refused.text


def test_reads_context_and_state_at(client):
    client.put(f"/v1/sessions/{S}")
    added = client.post(
        f"/v1/sessions/{S}/sections/findings/items", json={"content": "fact"}
    ).json()
    items = client.get(f"/v1/sessions/{S}/sections/findings/items").json()["items"]
    assert [i["content"] for i in items] == ["fact"]
    context = client.post(f"/v1/sessions/{S}/context", json={"budget": 100}).json()
    assert context["record"]["type"] == "context.assembled"
    assert context["messages"][0]["content"] == "## findings\n- fact"
    then = client.get(f"/v1/sessions/{S}/state", params={"at": added["record"]["seq"]}).json()
    assert then["sessions"][0]["sections"]["findings"]["items"][0]["content"] == "fact"


def test_status_health_metrics_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    status = client.get("/v1/log/status").json()
    assert {"head", "checkpoint", "subscribers", "verifier"} <= set(status)
    metrics = client.get("/metrics").text
    for name in (
        "ledgermem_appends_total",
        "ledgermem_fsync_seconds",
        "ledgermem_subscribers",
        "ledgermem_records_served",
    ):
        assert name in metrics
    assert "/v1/stream/sse" in client.get("/openapi.json").json()["paths"]
    assert "ledgermem API" in client.get("/docs").text


def test_erasure_through_the_api_while_running(client, server):
    secret = "Jane Roe, passport X1234567"
    client.put(f"/v1/sessions/{S}")
    item = client.post(
        f"/v1/sessions/{S}/sections/findings/items", json={"content": secret}
    ).json()["item"]
    for i in range(10):
        client.post(
            f"/v1/sessions/{S}/sections/messages/items", json={"content": f"m{i}", "role": "user"}
        )
    erased = client.post(
        f"/v1/sessions/{S}/erase", json={"ids": [item["id"]], "reason": "gdpr-art17"}
    )
    assert erased.status_code == 200 and erased.json()["erased"] == [item["id"]]
    vkey = client.get("/v1/log/status").json()["vkey"]
    assert server.stop() == 0
    for path in server.data_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert (
        verify_log(server.data_dir / "log", vkey=VerifierKey.parse(vkey)).verdict == "VALID-LOCAL"
    )


def test_graceful_shutdown_leaves_a_clean_verified_log(tmp_path):
    server = Server(tmp_path / "data").start()
    with httpx.Client(base_url=server.url) as client:
        client.put("/v1/sessions/s")
        for i in range(20):
            client.post("/v1/sessions/s/sections/findings/items", json={"content": f"f{i}"})
        vkey = client.get("/v1/log/status").json()["vkey"]
    assert server.stop() == 0
    reader = LogReader(tmp_path / "data" / "log")
    assert reader.get(reader.head()).type == "log.close"
    report = verify_log(tmp_path / "data" / "log", vkey=VerifierKey.parse(vkey))
    assert report.verdict == "VALID-LOCAL"
    assert report.unanchored_records == 0


def test_kill9_during_writes_loses_no_acknowledged_write(tmp_path):
    data = tmp_path / "data"
    server = Server(data).start()
    acked: list[tuple[str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            client.put(f"/v1/sessions/w{n}")
            i = 0
            while not stop.is_set():
                try:
                    r = client.post(
                        f"/v1/sessions/w{n}/sections/findings/items", json={"content": f"w{n}-{i}"}
                    )
                except httpx.HTTPError:
                    return
                if r.status_code == 201:
                    with lock:
                        acked.append((f"w{n}-{i}", r.json()["record"]["seq"]))
                i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    while len(acked) < 200:
        threading.Event().wait(0.02)
    server.kill()
    stop.set()
    for t in threads:
        t.join()
    restarted = Server(data).start()
    try:
        reader = LogReader(data / "log")
        for content, seq in acked:
            assert reader.get(seq).payload["items"][0]["content"] == content
    finally:
        restarted.stop()


def test_refuses_to_listen_beyond_loopback_without_tokens(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledgermem_cli",
            "serve",
            "--data",
            str(tmp_path / "d"),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without API tokens" in result.stderr


def test_tenants_are_isolated_and_scopes_enforced(tmp_path):
    config = tmp_path / "settings.toml"
    config.write_text(
        '[[tokens]]\ntoken = "tok-a"\ntenant = "acme"\nscopes = ["read", "write", "admin"]\n'
        '[[tokens]]\ntoken = "tok-b"\ntenant = "globex"\nscopes = ["read", "write"]\n'
        '[[tokens]]\ntoken = "tok-r"\ntenant = "acme"\nscopes = ["read"]\n'
    )
    with (
        Server(tmp_path / "data", "--config", str(config)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        a = {"Authorization": "Bearer tok-a"}
        b = {"Authorization": "Bearer tok-b"}
        assert client.put("/v1/sessions/shared-name", headers=a).status_code == 201
        client.post(
            "/v1/sessions/shared-name/sections/findings/items",
            json={"content": "acme secret"},
            headers=a,
        )
        assert client.get("/v1/sessions").status_code == 401
        assert client.get("/v1/sessions/shared-name/items", headers=b).status_code == 404
        assert (
            client.post(
                "/v1/sessions/shared-name/sections/findings/items", json={"content": "x"}, headers=b
            ).status_code
            == 404
        )
        assert client.get("/v1/sessions", headers=b).json()["sessions"] == []
        assert (
            client.put("/v1/sessions/shared-name", headers=b).status_code == 201
        )  # globex's own, distinct
        assert client.get("/v1/sessions/shared-name/items", headers=b).json()["items"] == []
        assert (
            client.get("/v1/sessions/shared-name/items", params={"token": "tok-a"}).json()["items"][
                0
            ]["content"]
            == "acme secret"
        )
        read_only = {"Authorization": "Bearer tok-r"}
        assert (
            client.post(
                "/v1/sessions/shared-name/sections/findings/items",
                json={"content": "x"},
                headers=read_only,
            ).status_code
            == 403
        )
        assert client.post(
            "/v1/sessions/shared-name/erase", json={"all": True, "reason": "x"}, headers=b
        ).status_code in (403, 404)
        state = client.get("/v1/state", params={"at": 3}, headers=b).json()
        assert all(s["tenant"] == "globex" for s in state["sessions"])


def test_list_filters_named_like_parameters_are_just_metadata(client):
    client.put(f"/v1/sessions/{S}", json={"metadata": {"tenant": "not-the-tenant"}})
    assert client.get("/v1/sessions", params={"tenant": "x"}).json() == {"sessions": []}
    assert (
        len(client.get("/v1/sessions", params={"tenant": "not-the-tenant"}).json()["sessions"]) == 1
    )


def test_an_idempotency_key_reused_for_another_command_is_a_409(client):
    client.put(f"/v1/sessions/{S}")
    added = client.post(
        f"/v1/sessions/{S}/sections/findings/items",
        json={"content": "a"},
        headers={"Idempotency-Key": "k"},
    )
    item = added.json()["item"]["id"]
    head = _head(client)
    reused = client.patch(
        f"/v1/sessions/{S}/sections/findings/items/{item}",
        json={"content": "b"},
        headers={"Idempotency-Key": "k"},
    )
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"
    assert _head(client) == head


def test_items_by_id_are_found_in_whichever_section_holds_them(client):
    client.put(f"/v1/sessions/{S}")
    a = client.post(f"/v1/sessions/{S}/sections/findings/items", json={"content": "a"}).json()[
        "item"
    ]["id"]
    b = client.post(f"/v1/sessions/{S}/sections/messages/items", json={"content": "b"}).json()[
        "item"
    ]["id"]
    got = client.get(f"/v1/sessions/{S}/items", params=[("id", a), ("id", b)])
    assert got.status_code == 200
    assert [(i["id"], i["section"]) for i in got.json()["items"]] == [
        (a, "findings"),
        (b, "messages"),
    ]
