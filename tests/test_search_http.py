"""Search, observations and summaries through a real `ledgermem serve` with per-tenant tokens."""

from __future__ import annotations

import jsonschema
import pytest
from helpers.described import conforms, ids, reply_schema
from helpers.tenant_server import A, B, head, two_tenants


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with two_tenants(tmp_path_factory.mktemp("search-http")) as client:
        yield client


def add(client, session, section, content, headers=A, **fields) -> str:
    client.put(f"/v1/sessions/{session}", headers=headers)
    response = client.post(
        f"/v1/sessions/{session}/sections/{section}/items",
        json={"items": [{"content": content, **fields}]},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["record"]["seq"])


def test_search_returns_items_scores_and_snippets(client):
    first = add(client, "s1", "findings", "The billing export failed at midnight", tags=["ops"])
    second = add(client, "s2", "messages", "billing export retried", role="user")
    add(client, "s2", "documents", "unrelated onboarding guide")
    response = client.get("/v1/search", params={"q": "billing export"}, headers=A)
    assert response.status_code == 200
    hits = response.json()["hits"]
    assert {h["item"]["id"] for h in hits} == {first, second}
    assert all(h["score"] > 0 and "[billing]" in h["snippet"] for h in hits)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert {h["session"] for h in hits} == {"s1", "s2"}
    hit = next(h for h in hits if h["item"]["id"] == first)
    assert hit["item"]["content"] == "The billing export failed at midnight"
    assert hit["item"]["tags"] == ["ops"] and hit["item"]["section"] == "findings"

    only_s1 = client.get("/v1/sessions/s1/search", params={"q": "billing"}, headers=A).json()
    assert [h["item"]["id"] for h in only_s1["hits"]] == [first]
    tagged = client.get("/v1/search", params={"q": "billing", "tag": "ops"}, headers=A).json()
    assert [h["item"]["id"] for h in tagged["hits"]] == [first]
    sections = client.get(
        "/v1/search", params=[("q", "billing"), ("section", "messages")], headers=A
    ).json()
    assert [h["item"]["id"] for h in sections["hits"]] == [second]
    future = client.get(
        "/v1/search", params={"q": "billing", "since": "2999-01-01T00:00:00Z"}, headers=A
    ).json()
    assert future["hits"] == []


def test_search_is_isolated_per_tenant(client):
    add(client, "iso", "documents", "quasar telescope notes")
    add(client, "iso", "documents", "a note on nebulae")
    before = client.get("/v1/search", params={"q": "quasar telescope"}, headers=A).json()["hits"]
    for i in range(20):
        add(client, "iso", "documents", f"quasar quasar telescope {i}", headers=B)
    after = client.get("/v1/search", params={"q": "quasar telescope"}, headers=A).json()["hits"]
    assert [(h["item"]["id"], h["score"]) for h in after] == [
        (h["item"]["id"], h["score"]) for h in before
    ]
    theirs = client.get("/v1/search", params={"q": "quasar", "top_k": 100}, headers=B).json()
    assert len(theirs["hits"]) == 20
    assert not {h["item"]["id"] for h in theirs["hits"]} & {h["item"]["id"] for h in after}


def test_observations_dedup_over_http(client):
    body = {"type": "decision", "title": "Queue", "content": "Use NATS for fan-out"}
    first = client.post("/v1/observations", json=body, headers=A)
    assert first.status_code == 201 and first.json()["tier"] == "inserted"
    again = client.post(
        "/v1/observations", json={**body, "content": "use  nats for FAN-OUT"}, headers=A
    )
    assert again.status_code == 200
    assert again.json() == {**first.json(), "tier": "duplicate", "duplicates": 1}
    client.put("/v1/sessions/obs", headers=A)
    keyed = {
        "type": "config",
        "title": "t",
        "content": "v1",
        "topic_key": "cfg",
        "scope": "session",
    }
    one = client.post("/v1/sessions/obs/observations", json=keyed, headers=A).json()
    two = client.post("/v1/sessions/obs/observations", json={**keyed, "content": "v2"}, headers=A)
    assert two.json() == {**one, "tier": "revised", "revision": 2}
    assert one["session"] == "obs"
    found = client.get("/v1/search", params={"q": "nats", "section": "observations"}, headers=A)
    assert [h["item"]["id"] for h in found.json()["hits"]] == [first.json()["id"]]


def test_summaries_and_context_injection_over_http(client):
    add(client, "ending", "messages", "please summarise the incident", role="user")
    assert client.post("/v1/sessions/ending/end", headers=A).status_code == 200
    summary = client.get("/v1/sessions/ending/summary", headers=A).json()
    assert (
        summary["messages"] == 1
        and summary["first_user"]["text"] == "please summarise the incident"
    )
    listed = client.get("/v1/summaries", params={"limit": 5}, headers=A).json()["summaries"]
    assert listed[0] == summary
    assert client.get("/v1/summaries", headers=B).json()["summaries"] == []
    client.post("/v1/observations", json={"type": "learning", "title": "Incidents",
                                          "content": "write the timeline first"}, headers=A)  # fmt: skip
    add(client, "next", "messages", "an incident happened again", role="user")
    response = client.post(
        "/v1/sessions/next/context",
        json={"budget": 2000, "query": "incident timeline", "observations": 2, "summaries": 1},
        headers=A,
    )
    assert response.status_code == 200
    messages = response.json()["messages"]
    assert messages[0]["content"].startswith("## observations\n- [learning] Incidents: write the")
    assert messages[1]["content"].startswith("## recent sessions\n- ending: 1 messages")
    assert messages[-1] == {"role": "user", "content": "an incident happened again"}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("GET", "/v1/search", {}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "top_k": "0"}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "top_k": "ten"}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "since": "last week"}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "until": ""}}, 400),  # no time, not "unbounded"
        ("GET", "/v1/search", {"params": {"q": "x", "reader": "bot"}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "since": "²"}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "since": "9" * 30}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "until": "-" + "9" * 5000}}, 400),
        ("GET", "/v1/search", {"params": {"q": "x", "top_k": "1001"}}, 400),
        (
            "POST",
            "/v1/observations",
            {"json": {"type": "decision", "title": "t", "content": "c", "tags": 5}},
            400,
        ),  # fmt: skip
        (
            "POST",
            "/v1/observations",
            {"json": {"type": "decision", "title": "t", "content": "c", "tags": None}},
            400,
        ),  # fmt: skip
        (
            "POST",
            "/v1/observations",
            {"json": {"type": "decision", "title": "t", "content": "c", "tags": {"a": 1}}},
            400,
        ),  # fmt: skip
        ("POST", "/v1/sessions/s1/context", {"json": {"budget": "8000", "observations": 1}}, 400),
        ("POST", "/v1/sessions/s1/context", {"json": {"budget": None, "summaries": 1}}, 400),
        ("GET", "/v1/sessions/nope/search", {"params": {"q": "x"}}, 404),
        (
            "POST",
            "/v1/observations",
            {"json": {"type": "   ", "title": "t", "content": "c"}},
            400,
        ),
        ("POST", "/v1/observations", {"json": {"type": "decision", "title": "t"}}, 400),
        (
            "POST",
            "/v1/observations",
            {"json": {"type": "decision", "title": "t", "content": "c", "colour": "red"}},
            400,
        ),  # fmt: skip
        ("POST", "/v1/observations", {"content": b"not json"}, 400),
        (
            "POST",
            "/v1/sessions/nope/observations",
            {"json": {"type": "decision", "title": "t", "content": "c"}},
            404,
        ),  # fmt: skip
        ("GET", "/v1/summaries", {"params": {"limit": "0"}}, 400),
        # a misspelt filter must not quietly widen the search
        ("GET", "/v1/search", {"params": {"q": "margin", "tags": "x"}}, 400),
        ("GET", "/v1/sessions/s1/search", {"params": {"q": "margin", "session": "s2"}}, 400),
        ("GET", "/v1/sessions/nope/summary", {}, 404),
        ("POST", "/v1/sessions/s1/context", {"json": {"observations": -1}}, 400),
        ("POST", "/v1/sessions/s1/context", {"json": {"observations": 2, "query": 7}}, 400),
        ("PUT", "/v1/sessions/_tenant", {}, 400),
    ],
)
def test_bad_requests_get_a_json_4xx_and_append_nothing(client, method, path, kwargs, status):
    add(client, "s1", "findings", "seed")
    # globex has written no observation, so it has no tenant session for PUT to find.
    headers = B if path.endswith("/_tenant") else A
    if "content" in kwargs:  # raw bytes are sent as what they claim to be (415 otherwise)
        headers = {**headers, "Content-Type": "application/json"}
    start = head(client)
    response = client.request(method, path, headers=headers, **kwargs)
    assert head(client) == start
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["message"]


def test_openapi_describes_search_observations_and_summaries_from_their_models(client):
    doc = client.get("/openapi.json").json()
    s = "/v1/sessions/{session}"
    routes = [("/v1/search", "get"), (s + "/search", "get"), ("/v1/observations", "post"),
              (s + "/observations", "post"), ("/v1/summaries", "get"), (s + "/summary", "get")]  # fmt: skip
    assert ids(doc, *routes) == [
        "searchTenant", "searchSession", "observeTenant", "observeFromSession", "listSummaries",
        "getSessionSummary",
    ]  # fmt: skip
    add(client, "described", "messages", "describe the searchable models", role="user")
    hits = client.get("/v1/search", params={"q": "searchable models"}, headers=A)
    assert hits.json()["hits"]
    conforms(doc, reply_schema(doc, "/v1/search", "get", 200), hits.json())
    note = {"type": "pattern", "title": "described", "content": "answers match their schema"}
    body = doc["paths"]["/v1/observations"]["post"]["requestBody"]["content"]["application/json"]
    conforms(doc, body["schema"], note)
    with pytest.raises(jsonschema.ValidationError):  # as the core: not only whitespace
        conforms(doc, body["schema"], {**note, "title": "\x85 "})
    inserted = client.post("/v1/observations", json=note, headers=A)
    duplicate = client.post("/v1/observations", json=note, headers=A)
    assert (inserted.status_code, duplicate.status_code) == (201, 200)
    conforms(doc, reply_schema(doc, "/v1/observations", "post", 201), inserted.json())
    conforms(doc, reply_schema(doc, "/v1/observations", "post", 200), duplicate.json())
    assert client.post("/v1/sessions/described/end", headers=A).status_code == 200
    summary = client.get("/v1/sessions/described/summary", headers=A)
    conforms(doc, reply_schema(doc, s + "/summary", "get", 200), summary.json())
    listed = client.get("/v1/summaries", headers=A)
    conforms(doc, reply_schema(doc, "/v1/summaries", "get", 200), listed.json())


def test_scoped_search_and_recall_over_http(client):
    for session, user, text in (
        ("rec-u1-old", "u1", "my grandmother's necklace came from Sweden"),
        ("rec-u2-old", "u2", "my necklace came from a market in Lisbon"),
    ):
        response = client.put(f"/v1/sessions/{session}", json={"metadata": {"user_id": user}},
                              headers=A)  # fmt: skip
        assert response.status_code in (200, 201), response.text
        add(client, session, "messages", text, role="user", name=user)
    client.put("/v1/sessions/rec-u1-new", json={"metadata": {"user_id": "u1"}}, headers=A)
    scoped = client.get("/v1/sessions/rec-u1-new/search",
                        params={"q": "necklace", "scope": "user"}, headers=A)  # fmt: skip
    assert scoped.status_code == 200, scoped.text
    hits = scoped.json()["hits"]
    assert [h["session"] for h in hits] == ["rec-u1-old"]
    assert hits[0]["signals"]["bm25"] > 0 and hits[0]["time"]
    doc = client.get("/openapi.json").json()
    conforms(doc, reply_schema(doc, "/v1/sessions/{session}/search", "get", 200), scoped.json())
    tenant = client.get("/v1/search", params={"q": "necklace", "scope": "tenant"}, headers=A)
    assert {"rec-u1-old", "rec-u2-old"} <= {h["session"] for h in tenant.json()["hits"]}
    within = client.get("/v1/search", headers=A, params=[
        ("q", "necklace"), ("scope", "tenant"), ("session", "rec-u2-old")])  # fmt: skip
    assert [h["session"] for h in within.json()["hits"]] == ["rec-u2-old"]
    for bad in ("planet", "user"):  # a user's scope is its session's search
        refused = client.get("/v1/search", params={"q": "necklace", "scope": bad}, headers=A)
        assert refused.status_code == 400, refused.text
    context = client.post("/v1/sessions/rec-u1-new/context",
                          json={"budget": 500, "query": "where is the necklace from"}, headers=A)  # fmt: skip
    assert context.status_code == 200, context.text
    text = str(context.json()["messages"])
    assert "Sweden" in text and "Lisbon" not in text
    off = client.post("/v1/sessions/rec-u1-new/context",
                      json={"budget": 500, "query": "necklace", "recall": False}, headers=A)  # fmt: skip
    assert "Sweden" not in str(off.json()["messages"])
    for wrong in (2, "half", -0.5):
        refused = client.post("/v1/sessions/rec-u1-new/context",
                              json={"budget": 500, "query": "necklace", "recall": wrong}, headers=A)  # fmt: skip
        assert refused.status_code == 400, refused.text


def test_observations_of_a_user_over_http(client):
    """{user} on POST /v1/observations, scope `user` (a user's session's default) on a session's
    route, ?user= on the tenant's search; 400 for session and user together, 409 user_conflict
    for scope `user` from a session of no user (nothing appended either way)."""
    for sid, meta in (("u-ana", {"user_id": "ana"}), ("u-bob", {"user_id": "bob"}), ("u-none", {})):
        client.put(f"/v1/sessions/{sid}", json={"metadata": meta}, headers=A)
    body = {"type": "learning", "title": "Lamp", "content": "ana's lamp is amber"}
    mine = client.post("/v1/sessions/u-ana/observations", json=body, headers=A)
    assert mine.status_code == 201 and mine.json()["session"] == "_tenant"
    bob = {"type": "learning", "title": "Lamp", "content": "bob's lamp is teal", "user": "bob"}
    assert client.post("/v1/observations", json=bob, headers=A).status_code == 201

    def found(path: str, **params) -> set[str]:
        got = client.get(path, params={"q": "lamp", **params}, headers=A)
        assert got.status_code == 200, got.text
        return {h["item"]["content"] for h in got.json()["hits"]}

    assert found("/v1/sessions/u-ana/search") == {"ana's lamp is amber"}
    assert found("/v1/sessions/u-bob/search") == {"bob's lamp is teal"}
    assert found("/v1/sessions/u-none/search") == set()
    assert found("/v1/search", user="bob") == {"bob's lamp is teal"}
    assert found("/v1/search") == {"ana's lamp is amber", "bob's lamp is teal"}

    before = head(client)
    both = client.post("/v1/observations", json={**bob, "session": "u-bob"}, headers=A)
    assert both.status_code == 400 and both.json()["error"]["code"] == "invalid_input"
    scoped = {**body, "scope": "user"}
    nobody = client.post("/v1/sessions/u-none/observations", json=scoped, headers=A)
    assert nobody.status_code == 409 and nobody.json()["error"]["code"] == "user_conflict"
    assert head(client) == before
