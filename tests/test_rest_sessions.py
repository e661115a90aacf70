"""Sessions over REST (issue 16), served by a real uvicorn over a memory the test holds:
server-made session ids (POST /v1/sessions), seeds at creation, items filtered by type, role and
time, the event timeline, GET /v1/sessions paged, and tenant-wide observations from a session.
Bad input is a 400 JSON naming it, with nothing appended."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
from helpers.described import conforms, reply_schema
from helpers.live_api import LiveApi

from eventstore.identifiers import is_identifier
from sections.runtime.memory import Memory
from streams import apidoc
from streams.routes import api

ROLE = {"content": "You are terse.", "role": "system", "name": "persona", "tags": ["p"],
        "metadata": {"v": 1}}  # fmt: skip


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    mem = Memory.open(tmp_path_factory.mktemp("rest") / "data")
    api = LiveApi(mem).start()
    with httpx.Client(base_url=api.url, timeout=30) as client:
        yield mem, client
    api.stop()
    mem.close()


@pytest.fixture
def mem(live) -> Memory:
    return live[0]


@pytest.fixture
def client(live) -> httpx.Client:
    return live[1]


def _refused(mem: Memory, response: httpx.Response, *named: str) -> dict:
    """A 400 JSON refusal whose message names each of `named`."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    for name in named:
        assert name in error["message"], error["message"]
    return error


# ---- POST /v1/sessions ------------------------------------------------------------------------


def test_post_makes_a_new_session_with_a_server_made_id(mem, client):
    made = [client.post("/v1/sessions", json={"metadata": {"app": "ids"}}) for _ in range(5)]
    ids = []
    for response in made:
        assert response.status_code == 201, response.text
        body = response.json()
        session = body["session"]["session"]
        assert is_identifier(session)
        assert response.headers["location"] == "/v1/sessions/" + quote(session, safe="")
        assert body["record"]["type"] == "session.created"
        assert body["record"]["session"] == session
        assert response.headers["etag"] == f'"{body["record"]["seq"]}"'
        ids.append(session)
    assert len(set(ids)) == 5
    got = client.get(made[0].headers["location"])
    assert got.status_code == 200 and got.json()["metadata"] == {"app": "ids"}
    bare = client.post("/v1/sessions")  # no body at all: the defaults
    assert bare.status_code == 201, bare.text
    assert bare.json()["session"]["metadata"] == {}


def test_a_retry_with_the_same_key_gives_the_same_session_and_appends_nothing(mem, client):
    body = {"metadata": {"app": "retry"}}
    first = client.post("/v1/sessions", json=body, headers={"Idempotency-Key": "make-1"})
    assert first.status_code == 201, first.text
    head = mem.writer.next_seq
    again = client.post("/v1/sessions", json=body, headers={"Idempotency-Key": "make-1"})
    assert again.status_code == 201
    assert again.json()["record"] == first.json()["record"]
    assert again.headers["location"] == first.headers["location"]
    assert mem.writer.next_seq == head, "the retry appended a record"
    other = client.post("/v1/sessions", json=body, headers={"Idempotency-Key": "make-2"})
    assert other.json()["session"]["session"] != first.json()["session"]["session"]
    assert first.json()["record"]["payload"]["idem"] == "make-1"


def test_post_seeds_an_immutable_section(mem, client):
    sections = {"role": {"items": [ROLE]}, "findings": {"budget_tokens": 900}}
    made = client.post("/v1/sessions", json={"sections": sections})
    assert made.status_code == 201, made.text
    url = made.headers["location"]
    (role,) = client.get(url + "/sections/role/items").json()["items"]
    assert {k: role[k] for k in ROLE} == ROLE
    head = mem.writer.next_seq
    refused = client.post(url + "/sections/role/items", json={"content": "override"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "immutable_section"
    assert mem.writer.next_seq == head
    got = client.get(url).json()
    assert got["sections"]["findings"]["budget_tokens"] == 900
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_put_seeds_a_new_session_and_over_the_budget_is_a_422(mem, client):
    put = client.put("/v1/sessions/put-seeded", json={"sections": {"role": {"items": [ROLE]}}})
    assert put.status_code == 201, put.text
    assert [i["content"] for i in put.json()["record"]["payload"]["seed"]["role"]] == [
        ROLE["content"]
    ]
    head = mem.writer.next_seq
    over = {"role": {"budget_tokens": 3, "items": [{"content": "far too many words here"}]}}
    refused = client.post("/v1/sessions", json={"sections": over})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "budget_exceeded"
    assert "its seed items take" in refused.json()["error"]["message"]
    assert mem.writer.next_seq == head


@pytest.mark.parametrize(
    "settings",
    [
        {"policy": "none"},  # findings is bounded and mutable
        {"budget_tokens": 100, "compact_at_tokens": 200},
        {"policy": "none", "budget_tokens": None, "max_items": 3},
    ],
)
def test_settings_that_cannot_work_together_are_422_conflicting_settings(mem, client, settings):
    head = mem.writer.next_seq
    for refused in (
        client.post("/v1/sessions", json={"sections": {"findings": settings}}),
        client.put("/v1/sessions/conflicted", json={"sections": {"findings": settings}}),
    ):
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "conflicting_settings"
    assert mem.writer.next_seq == head
    fine = {"policy": "none", "budget_tokens": None}  # unbounded: nothing to evict
    assert client.post("/v1/sessions", json={"sections": {"findings": fine}}).status_code == 201


@pytest.mark.parametrize(
    "body, named",
    [
        ({"metadata": "x"}, ["metadata"]),
        ({"session": "mine"}, ["unknown fields", "session"]),
        ({"sections": {"role": {"items": "x"}}}, ["items must be a list"]),
        ({"sections": {"role": {"items": [{"content": "x", "colour": 1}]}}}, ["colour"]),
        ({"sections": {"findings": {"policy": "random"}}}, ["policy"]),
    ],
)
def test_bad_session_bodies_are_400_with_nothing_appended(mem, client, body, named):
    head = mem.writer.next_seq
    _refused(mem, client.post("/v1/sessions", json=body), *named)
    assert mem.writer.next_seq == head


# ---- GET .../items filters and the timeline ---------------------------------------------------


@pytest.fixture(scope="module")
def conversation(live):
    """A session whose items span sections, roles, kinds and times."""
    mem, _ = live
    s = mem.session("talk")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    added = [
        s.add("messages", "hi", role="user"),
        s.add("findings", "not an event"),
        s.add("messages", "", role="assistant", tool_calls=[call]),
        s.add("messages", "42", role="tool", tool_call_id="c1"),
        s.add("actions", "boom", kind="error"),
        s.add("messages", "the answer is 42", role="assistant"),
        s.add("messages", "thanks", role="user"),
    ]
    return s, added


def _ids(response: httpx.Response, key: str = "items") -> list[str]:
    assert response.status_code == 200, response.text
    return [i["id"] for i in response.json()[key]]


def test_items_filtered_by_role_kind_and_time_are_exactly_the_matching_ones(client, conversation):
    s, added = conversation
    url = "/v1/sessions/talk/items"
    messages = "/v1/sessions/talk/sections/messages/items"
    user = [a.id for a in added if a.role == "user"]
    assert _ids(client.get(url, params={"role": "user"})) == user
    assert _ids(client.get(messages, params=[("role", "user"), ("role", "tool")])) == [
        added[0].id, added[3].id, added[6].id,
    ]  # fmt: skip
    assert _ids(client.get(url, params={"kind": "error"})) == [added[4].id]
    assert _ids(client.get(url, params={"kind": "tool_call"})) == [added[2].id]
    # Python's answer and HTTP's agree on every filter
    for params in (
        {"since": added[2].ts, "until": added[5].ts},
        {"recent": 2},
        {"offset": 1, "limit": 2},
        {"role": "assistant", "recent": 1},
    ):
        expected = [v.id for v in s.get("messages", **params)]
        assert _ids(client.get(messages, params=params)) == expected, params
    assert _ids(client.get(messages, params={"since": added[5].ts})) == [
        added[5].id, added[6].id,
    ]  # fmt: skip


def test_times_may_be_iso_8601(client, conversation):
    _, added = conversation
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(added[5].ts / 1e6, UTC).isoformat()
    got = _ids(client.get("/v1/sessions/talk/sections/messages/items", params={"until": at}))
    assert added[5].id not in got and added[0].id in got


def test_the_event_timeline_over_http_is_traced(mem, client, conversation):
    s, added = conversation
    timeline = client.get("/v1/sessions/talk/events")
    events = timeline.json()["events"]
    assert [e["id"] for e in events] == [v.id for v in s.events()]
    assert [e["type"] for e in events] == [
        "user_message", "tool_call", "tool_result", "error", "agent_response", "user_message",
    ]  # fmt: skip
    head = mem.writer.next_seq
    picked = client.get(
        "/v1/sessions/talk/events",
        params=[("type", "user_message"), ("type", "error"), ("offset", "1"), ("limit", "2")],
    )
    assert _ids(picked, "events") == [added[4].id, added[6].id]
    assert mem.writer.next_seq == head + 1  # the read's trace
    trace = mem.record_at(head)
    assert trace.type == "items.read" and trace.payload["purpose"] == "events"
    assert trace.payload["items"] == {"actions": [added[4].id], "messages": [added[6].id]}
    assert _ids(client.get("/v1/sessions/talk/events", params={"role": "user"}), "events") == [
        added[0].id, added[6].id,
    ]  # fmt: skip
    assert _ids(client.get("/v1/sessions/talk/events", params={"recent": 1}), "events") == [
        added[6].id
    ]


@pytest.mark.parametrize(
    "path, params, named",
    [
        ("/items", {"colour": "red"}, ["'colour'"]),
        ("/items", {"type": "error"}, ["'type'"]),  # items filter on kind
        ("/events", {"kind": "error"}, ["'kind'"]),  # the timeline on type
        ("/items", {"limit": "ten"}, ["limit"]),
        ("/items", {"limit": "-1"}, ["limit"]),
        ("/items", {"recent": "99999999"}, ["recent"]),
        ("/events", {"offset": "1.5"}, ["offset"]),
        ("/events", {"since": "yesterday"}, ["since"]),
        ("/sections/messages/items", {"until": "2026-13-45"}, ["until"]),
        ("/events", [("limit", "1"), ("limit", "2")], ["limit", "twice"]),
        ("/events", {"reader": "robot"}, ["reader"]),
    ],
)
def test_bad_read_parameters_are_400_naming_them_with_nothing_appended(
    mem, client, conversation, path, params, named
):
    head = mem.writer.next_seq
    _refused(mem, client.get("/v1/sessions/talk" + path, params=params), *named)
    assert mem.writer.next_seq == head


def test_the_timeline_of_an_unknown_session_is_404(client):
    response = client.get("/v1/sessions/nobody/events")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


# ---- GET /v1/sessions -------------------------------------------------------------------------


def test_list_pages_with_limit_and_offset_and_filters_metadata(mem, client):
    for n in range(5):
        client.put(f"/v1/sessions/page-{n}", json={"metadata": {"app": "pager", "limit": "m"}})
    every = [s["session"] for s in client.get("/v1/sessions").json()["sessions"]]
    mine = [s for s in every if s.startswith("page-")]
    assert mine == [f"page-{n}" for n in range(5)]
    first = client.get("/v1/sessions", params={"limit": 2})
    assert [s["session"] for s in first.json()["sessions"]] == every[:2]
    rest = client.get("/v1/sessions", params={"app": "pager", "offset": 2, "limit": 2})
    assert [s["session"] for s in rest.json()["sessions"]] == ["page-2", "page-3"]
    keyed = client.get("/v1/sessions", params={"metadata.limit": "m", "limit": 10})
    assert [s["session"] for s in keyed.json()["sessions"]] == mine
    active = mem.session("page-3", create=False).info()["active_ts"]
    since = client.get("/v1/sessions", params={"app": "pager", "since": active})
    assert [s["session"] for s in since.json()["sessions"]] == ["page-3", "page-4"]


@pytest.mark.parametrize("params", [{"limit": "x"}, {"offset": "-2"}, {"since": "soon"}])
def test_bad_list_parameters_are_400(mem, client, params):
    (name,) = params
    _refused(mem, client.get("/v1/sessions", params=params), name)


# ---- observations from a session --------------------------------------------------------------


def test_an_observation_from_session_a_reaches_session_b(mem, client):
    for session in ("obs-a", "obs-b"):
        client.put(f"/v1/sessions/{session}")
    body = {"type": "decision", "title": "Broker", "content": "route the fan-out through kestrel"}
    made = client.post("/v1/sessions/obs-a/observations", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["session"] == "_tenant"
    hits = client.get("/v1/sessions/obs-b/search", params={"q": "kestrel"}).json()["hits"]
    assert [(h["session"], h["item"]["id"]) for h in hits] == [("_tenant", made.json()["id"])]
    assert hits[0]["item"]["metadata"]["session"] == "obs-a"
    context = client.post(
        "/v1/sessions/obs-b/context", json={"budget": 2000, "query": "kestrel", "observations": 2}
    ).json()
    assert "route the fan-out through kestrel" in context["messages"][0]["content"]
    own = client.post(
        "/v1/sessions/obs-a/observations",
        json={**body, "content": "only a knows about pelican", "scope": "session"},
    )
    assert own.json()["session"] == "obs-a"
    assert client.get("/v1/sessions/obs-b/search", params={"q": "pelican"}).json()["hits"] == []
    head = mem.writer.next_seq
    _refused(
        mem,
        client.post("/v1/sessions/obs-a/observations", json={**body, "scope": "galaxy"}),
        "scope",
    )
    _refused(mem, client.post("/v1/observations", json={**body, "scope": "tenant"}), "scope")
    assert mem.writer.next_seq == head


# ---- the session operations in /openapi.json, from their models (streams/routes/session_models.py) ---


def test_openapi_describes_the_session_operations_from_their_models(mem, client):
    doc = apidoc.document(api.routes(None))  # what /openapi.json says of these routes
    s = "/v1/sessions/{session}"
    ids = {
        ("/v1/sessions", "get"): "listSessions", ("/v1/sessions", "post"): "createSession",
        ("/v1/stats", "get"): "getTenantStats", ("/v1/state", "get"): "getTenantStateAt",
        (s, "put"): "getOrCreateSession", (s, "get"): "getSession", (s, "delete"): "deleteSession",
        (s + "/stats", "get"): "getSessionStats", (s + "/end", "post"): "endSession",
        (s + "/turns/end", "post"): "endTurn", (s + "/commit", "post"): "commitSession",
        (s + "/compact", "post"): "compactSession", (s + "/context", "post"): "assembleContext",
        (s + "/state", "get"): "getSessionStateAt", (s + "/erase", "post"): "eraseSession",
    }  # fmt: skip
    assert {key: doc["paths"][key[0]][key[1]]["operationId"] for key in ids} == ids
    # The free metadata filters of GET /v1/sessions: an exploded object besides the paging.
    listing = doc["paths"]["/v1/sessions"]["get"]["parameters"]
    free = next(p for p in listing if p["name"] == "metadata")
    assert (free["in"], free["style"], free["explode"]) == ("query", "form", True)
    assert free["schema"]["type"] == "object" and "properties" not in free["schema"]
    assert {p["name"] for p in listing} == {"limit", "offset", "since", "until", "metadata"}
    body = doc["paths"]["/v1/sessions/{session}/compact"]["post"]["requestBody"]["content"]
    compact = doc["components"]["schemas"]["SessionCompactRequest"]
    assert body["application/json"]["schema"]["$ref"].endswith("/SessionCompactRequest")
    assert compact["required"] == ["target_bytes"] and compact["additionalProperties"] is False
    assert doc["paths"][s + "/erase"]["post"]["requestBody"]["required"] is True

    made = client.post("/v1/sessions", json={"metadata": {"app": "doc"}})
    assert set(doc["paths"]["/v1/sessions"]["post"]["responses"]["201"]["headers"]) == {
        "Location", "ETag"
    }  # fmt: skip
    conforms(doc, reply_schema(doc, "/v1/sessions", "post", "201"), made.json())
    url = made.headers["location"]
    answers = [
        ("/v1/sessions", "get", "200", client.get("/v1/sessions", params={"app": "doc"})),
        (s, "get", "200", client.get(url)),
        (s, "put", "200", client.put(url)),
        (s + "/context", "post", "200", client.post(url + "/context", json={"budget": 100})),
        (s + "/stats", "get", "200", client.get(url + "/stats")),
        ("/v1/stats", "get", "200", client.get("/v1/stats")),
        (s + "/compact", "post", "200", client.post(url + "/compact", json={"target_bytes": 9})),
        (s + "/turns/end", "post", "200", client.post(url + "/turns/end")),
    ]
    head = mem.writer.next_seq - 1
    answers.append((s + "/state", "get", "200", client.get(url + "/state", params={"at": head})))
    answers.append((s + "/end", "post", "200", client.post(url + "/end")))
    for path, method, status, answer in answers:
        assert answer.status_code == int(status), (path, answer.text)
        conforms(doc, reply_schema(doc, path, method, status), answer.json())
    (listed,) = answers[0][3].json()["sessions"]
    assert listed["metadata"] == {"app": "doc"}


def test_commit_context_and_erase_refuse_unknown_fields(mem, client):
    url = client.post("/v1/sessions").headers["location"]
    head = mem.writer.next_seq
    _refused(mem, client.post(url + "/commit", json={"sectoin": "findings"}), "sectoin")
    _refused(mem, client.post(url + "/context", json={"budjet": 100}), "budjet")
    erase = {"ids": ["1"], "reason": "gdpr", "everything": True}
    _refused(mem, client.post(url + "/erase", json=erase), "everything")
    assert mem.writer.next_seq == head


def test_erase_takes_ids_or_all_true_not_both(mem, client):
    url = client.post("/v1/sessions").headers["location"]
    added = client.post(url + "/sections/findings/items", json={"content": "x"}).json()
    head = mem.writer.next_seq
    item = added["item"]["id"]
    _refused(mem, client.post(url + "/erase", json={"all": "yes", "ids": [item], "reason": "r"}))
    _refused(mem, client.post(url + "/erase", json={"all": True, "ids": [item], "reason": "r"}))
    assert mem.writer.next_seq == head
    erased = client.post(url + "/erase", json={"all": False, "ids": [item], "reason": "r"})
    assert erased.status_code == 200 and erased.json()["erased"] == [item]


def test_state_at_a_seq_beyond_the_head_is_404(mem, client):
    head = mem.writer.next_seq - 1
    for path in ("/v1/state", "/v1/sessions/nobody/state"):
        beyond = client.get(path, params={"at": head + 10})
        assert beyond.status_code == 404, beyond.text
        assert beyond.json()["error"]["code"] == "not_found"
    assert mem.writer.next_seq == head + 1
    assert client.get("/v1/state", params={"at": -1}).status_code == 400


def test_integral_floats_are_integers_where_sessions_count(client):
    made = client.post("/v1/sessions", json={"sections": {"findings": {"budget_tokens": 900.0}}})
    assert made.status_code == 201, made.text
    url = made.headers["location"]
    assert client.get(url).json()["sections"]["findings"]["budget_tokens"] == 900
    context = client.post(url + "/context", json={"budget": 8000.0, "observations": 2.0})
    assert context.status_code == 200, context.text
    compact = client.post(url + "/compact", json={"target_bytes": 1e6, "budget": 100.0})
    assert compact.status_code == 200 and compact.json()["compaction"]["compacted"] is False
    assert client.post(url + "/context", json={"budget": 80.5}).status_code == 400


def test_put_on_an_existing_session_refuses_seeds_a_creation_would_refuse(mem, client):
    assert client.put("/v1/sessions/seeded-twice").status_code == 201
    head = mem.writer.next_seq
    bad = {"sections": {"findings": {"items": [{"priority": 1}]}}}  # no content
    _refused(mem, client.put("/v1/sessions/seeded-twice", json=bad), "content")
    assert mem.writer.next_seq == head
    key = {"Idempotency-Key": "seeded-once"}
    assert client.post("/v1/sessions", headers=key).status_code == 201
    head = mem.writer.next_seq
    _refused(mem, client.post("/v1/sessions", json=bad, headers=key), "content")  # a retry
    assert mem.writer.next_seq == head
    good = {"sections": {"findings": {"items": [{"content": "ignored: it exists"}]}}}
    again = client.put("/v1/sessions/seeded-twice", json=good)
    assert again.status_code == 200 and again.json()["record"] is None


def test_a_blank_body_is_no_json_where_the_body_is_optional(mem, client):
    head = mem.writer.next_seq
    blank = client.put(
        "/v1/sessions/blank", content=b" ", headers={"Content-Type": "application/json"}
    )
    _refused(mem, blank, "blank")
    assert mem.writer.next_seq == head
    assert client.put("/v1/sessions/blank").status_code == 201  # no body at all: the defaults
