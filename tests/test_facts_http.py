"""Facts through a real `ledgermem serve` with per-tenant tokens: assert, query (as of a time,
history, by field), retract, the session routes, refusals (400 or 409 JSON, nothing appended),
tenant isolation and the routes' description in /openapi.json."""

from __future__ import annotations

import jsonschema
import pytest
from helpers.described import conforms, ids, reply_schema
from helpers.tenant_server import A, B, head, two_tenants


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with two_tenants(tmp_path_factory.mktemp("facts-http")) as client:
        yield client


def test_assert_query_as_of_and_retract(client):
    first = client.post(
        "/v1/facts",
        json={"subject": "carol", "predicate": "role", "object": "cto", "valid_from": 1000},
        headers=A,
    )
    assert first.status_code == 201, first.text
    assert first.json()["fact"]["invalid_at"] is None
    assert first.json()["record"]["type"] == "item.added"
    batch = client.post(
        "/v1/facts",
        json={"facts": [
            {"subject": "carol", "predicate": "role", "object": "ceo", "valid_from": 2000},
            {"subject": "dave", "predicate": "role", "object": "cfo"},
        ]},
        headers=A,
    )  # fmt: skip
    assert batch.status_code == 201, batch.text
    assert [f["object"] for f in batch.json()["facts"]] == ["ceo", "cfo"]
    now = client.get("/v1/facts", params={"subject": "carol"}, headers=A).json()["facts"]
    assert [f["object"] for f in now] == ["ceo"]
    then = client.get("/v1/facts", params={"subject": "carol", "as_of": 1500}, headers=A)
    assert [f["object"] for f in then.json()["facts"]] == ["cto"]
    iso = client.get(
        "/v1/facts", params={"predicate": "role", "as_of": "1970-01-01T00:00:00.0015Z"}, headers=A
    )
    assert [f["object"] for f in iso.json()["facts"]] == ["cto"]
    history = client.get("/v1/facts", params={"subject": "carol", "history": 1}, headers=A)
    assert [(f["object"], f["invalid_at"]) for f in history.json()["facts"]] == [
        ("cto", 2000), ("ceo", None),
    ]  # fmt: skip
    by_object = client.get("/v1/facts", params={"object": "cfo"}, headers=A).json()["facts"]
    assert [f["subject"] for f in by_object] == ["dave"]
    fact = by_object[0]["id"]
    retracted = client.post(f"/v1/facts/{fact}/retract", json={"reason": "left"}, headers=A)
    assert retracted.status_code == 200, retracted.text
    assert retracted.json()["fact"]["retracted"]["reason"] == "left"
    assert retracted.json()["record"]["type"] == "item.updated"
    assert client.get("/v1/facts", params={"subject": "dave"}, headers=A).json()["facts"] == []


def test_session_routes_take_item_ids_and_read_what_the_session_taught(client):
    assert client.put("/v1/sessions/chat", headers=A).status_code == 201
    added = client.post(
        "/v1/sessions/chat/sections/messages/items",
        json={"content": "I work at Initech", "role": "user"},
        headers=A,
    )
    item = str(added.json()["record"]["seq"])
    made = client.post(
        "/v1/sessions/chat/facts",
        json={"subject": "user", "predicate": "works_at", "object": "initech", "sources": [item]},
        headers=A,
    )
    assert made.status_code == 201, made.text
    assert made.json()["fact"]["sources"] == [{"session": "chat", "id": item}]
    mine = client.get("/v1/sessions/chat/facts", headers=A).json()["facts"]
    assert [f["id"] for f in mine] == [made.json()["fact"]["id"]]
    context = client.post(
        "/v1/sessions/chat/context",
        json={"budget": 500, "query": "where does the user work", "facts": 3},
        headers=A,
    )
    assert "user works_at initech" in context.json()["messages"][0]["content"]
    missing = client.get("/v1/sessions/nope/facts", headers=A)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "method,path,body,params",
    [
        ("POST", "/v1/facts", {"subject": "", "predicate": "p", "object": "o"}, None),
        ("POST", "/v1/facts", {"subject": "s", "predicate": "p"}, None),
        ("POST", "/v1/facts", {"subject": "s", "predicate": "p", "object": "o", "valid_from": "x"}, None),
        ("POST", "/v1/facts", {"facts": [], "subject": "s"}, None),
        ("POST", "/v1/facts", {"facts": "s"}, None),
        ("POST", "/v1/facts", {"subject": "s", "predicate": "p", "object": "o", "extra": 1}, None),
        ("GET", "/v1/facts", None, {"as_of": "yesterday"}),
        ("GET", "/v1/facts", None, {"as_of": ""}),
        ("GET", "/v1/facts", None, {"as_of": "5", "history": "1"}),
        ("GET", "/v1/facts", None, {"history": "maybe"}),
        ("GET", "/v1/facts", None, {"history": "true"}),  # 0 or 1, as /openapi.json says
        ("GET", "/v1/facts", None, {"limit": "10"}),
        ("POST", "/v1/facts/1/retract", {"at": "soon"}, None),
        ("POST", "/v1/facts/1/retract", {"when": 1}, None),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_json_and_appends_nothing(client, method, path, body, params):
    client.post("/v1/facts", json={"subject": "x", "predicate": "p", "object": "o"}, headers=A)
    before = head(client)
    response = client.request(method, path, json=body, params=params, headers=A)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_input"
    assert head(client) == before


def test_what_the_state_refuses_is_a_409_and_appends_nothing(client):
    """The request is well-formed; the memory's state refuses it: 409 fact_conflict."""
    gone = {"session": "chat", "id": "9999"}
    fact = {"subject": "s", "predicate": "p", "object": "o"}
    made = client.post("/v1/facts", json={**fact, "valid_from": 10}, headers=A).json()["fact"]
    before = head(client)
    refusals = [
        client.post("/v1/facts", json={**fact, "sources": [gone]}, headers=A),
        client.post(f"/v1/facts/{made['id']}/retract", json={"at": 5}, headers=A),
    ]
    for refused in refusals:
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "fact_conflict"
    assert head(client) == before


def test_unknown_fact_is_a_404(client):
    before = head(client)
    response = client.post("/v1/facts/424242/retract", json={}, headers=A)
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert head(client) == before


def test_another_tenant_never_sees_facts(client):
    client.post(
        "/v1/facts", json={"subject": "secret", "predicate": "is", "object": "kept"}, headers=A
    )
    assert client.get("/v1/facts", params={"history": 1}, headers=B).json()["facts"] == []
    assert client.get("/v1/search", params={"q": "secret kept"}, headers=B).json()["hits"] == []
    mine = client.get("/v1/facts", params={"subject": "secret"}, headers=A).json()["facts"]
    retract = client.post(f"/v1/facts/{mine[0]['id']}/retract", json={}, headers=B)
    assert retract.status_code == 404


def test_openapi_lists_the_fact_routes(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/facts", "/v1/facts/{fact}/retract", "/v1/sessions/{session}/facts"} <= set(paths)


def test_an_idempotency_key_answers_a_retry_with_the_first_record(client):
    body = {"subject": "retry", "predicate": "is", "object": "safe"}
    key = {**A, "Idempotency-Key": "fact-1"}
    first = client.post("/v1/facts", json=body, headers=key)
    before = head(client)
    again = client.post("/v1/facts", json=body, headers=key)
    assert again.status_code == 201 and again.json() == first.json()
    assert head(client) == before


def test_openapi_describes_the_facts_from_their_models(client):
    doc = client.get("/openapi.json").json()
    f, s = "/v1/facts", "/v1/sessions/{session}/facts"
    routes = [(f, "post"), (f, "get"), ("/v1/facts/{fact}/retract", "post"), (s, "post"),
              (s, "get")]  # fmt: skip
    assert ids(doc, *routes) == [
        "assertFacts", "listFacts", "retractFact", "assertSessionFacts", "listSessionFacts"
    ]  # fmt: skip
    body = doc["paths"][f]["post"]["requestBody"]["content"]["application/json"]["schema"]
    one = {"subject": "doc", "predicate": "is", "object": "generated", "valid_from": 7}
    conforms(doc, body, one)
    conforms(doc, body, {"facts": [one]})
    with pytest.raises(jsonschema.ValidationError):  # bodies are strict
        conforms(doc, body, {**one, "extra": 1})
    made = client.post(f, json=one, headers=A)
    conforms(doc, reply_schema(doc, f, "post", 201), made.json())
    batch = client.post(f, json={"facts": [{**one, "predicate": "was"}]}, headers=A)
    conforms(doc, reply_schema(doc, f, "post", 201), batch.json())
    found = client.get(f, params={"subject": "doc", "history": 1}, headers=A)
    conforms(doc, reply_schema(doc, f, "get", 200), found.json())
    retract = f"/v1/facts/{made.json()['fact']['id']}/retract"
    ended = client.post(retract, json={"at": 8, "reason": "test"}, headers=A)
    conforms(doc, reply_schema(doc, "/v1/facts/{fact}/retract", "post", 200), ended.json())
    # as_of and history=1 exclude each other: one exploded parameter of either shape
    [when] = [p for p in doc["paths"][f]["get"]["parameters"] if p["name"] == "when"]
    assert when["explode"] is True
    conforms(doc, when["schema"], {"as_of": "2026-01-01T00:00:00Z"})
    conforms(doc, when["schema"], {"history": 1})
    with pytest.raises(jsonschema.ValidationError):
        conforms(doc, when["schema"], {"as_of": 5, "history": 1})


def test_a_time_written_as_an_integral_double_is_that_integer(client):
    """JSON Schema's `integer` takes 5.0; so does the server, as 5."""
    body = {"subject": "double", "predicate": "is", "object": "integral", "valid_from": 5.0}
    made = client.post("/v1/facts", json=body, headers=A)
    assert made.status_code == 201, made.text
    assert made.json()["fact"]["valid_at"] == 5
    ended = client.post(f"/v1/facts/{made.json()['fact']['id']}/retract", json={"at": 6.0},
                        headers=A)  # fmt: skip
    assert ended.status_code == 200, ended.text
    assert ended.json()["fact"]["invalid_at"] == 6


def test_a_key_used_by_another_kind_of_write_is_a_409_naming_it(client):
    """An item added to `_tenant` through /v1 under a key, then facts asserted under the same
    key: a 409 naming the key, never the item's record read as facts (a 500), and nothing
    appended (issue 30, item 5)."""
    fact = {"subject": "erin", "predicate": "role", "object": "cto"}
    made = client.post("/v1/facts", json=fact, headers=A)
    assert made.status_code == 201, made.text  # `_tenant` exists now
    added = client.post(
        "/v1/sessions/_tenant/sections/messages/items",
        json={"content": "not a fact"},
        headers={**A, "Idempotency-Key": "shared-key-1"},
    )
    assert added.status_code == 201, added.text
    before = head(client)
    for path, body in (
        ("/v1/facts", {"subject": "erin", "predicate": "team", "object": "ops"}),
        (f"/v1/facts/{made.json()['fact']['id']}/retract", {"reason": "moved"}),
    ):
        answer = client.post(path, json=body, headers={**A, "Idempotency-Key": "shared-key-1"})
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "idempotency_key_reused"
        assert "shared-key-1" in answer.json()["error"]["message"]
    assert head(client) == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/facts", {"subject": "fay", "predicate": "role", "object": "cto"}),
        ("/v1/sessions", {}),
        ("/v1/sessions/empty-key/sections/messages/items", {"content": "x"}),
    ],
)
def test_an_empty_idempotency_key_is_a_400_and_appends_nothing(client, path, body):
    if "empty-key" in path:
        assert client.put("/v1/sessions/empty-key", headers=A).status_code in (200, 201)
    before = head(client)
    answer = client.post(path, json=body, headers={**A, "Idempotency-Key": ""})
    assert answer.status_code == 400, answer.text
    assert "idempotency key" in answer.json()["error"]["message"]
    assert head(client) == before
