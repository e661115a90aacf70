"""AgentOps' memory contract (samyn92/agentops-memory) served by a real `ledgermem serve`: the
scenarios of that service's server_test.go, ported, and what our model adds to them: tokens and
tenants, every call a record, a transcript at end recorded and counted, replay equal to live.
The model-level half (transcripts, the `<memory:sessions>` block) runs on a `Memory`."""

from __future__ import annotations

import asyncio

import httpx
import jsonschema
import pytest
from helpers.described import conforms
from helpers.tenant_server import A, B, head, two_tenants
from test_search import Clock

from eventstore.errors import InvalidInput
from eventstore.identifiers import is_identifier
from sections.adapters import agentops
from sections.runtime.memory import Memory


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with two_tenants(tmp_path_factory.mktemp("agentops")) as client:
        yield client


def _session(client, sid: str, project: str = "test", headers=A):
    answer = client.post("/sessions", json={"id": sid, "project": project}, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _observe(client, headers=A, **fields):
    body = {"session_id": "s1", "type": "decision", "title": "Test", "content": "Test content",
            "project": "test", **fields}  # fmt: skip
    return client.post("/observations", json=body, headers=headers)


# ---- server_test.go: health and validation ------------------------------------------------------


def test_health_answers_ok_without_a_token(client):
    answer = client.get("/health")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_the_other_routes_need_a_token(client):
    assert client.get("/stats").status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [({"id": "", "project": "test"}, "id"), ({"id": "s1", "project": ""}, "project")],
)
def test_create_session_refuses_an_empty_field_naming_it(client, body, field):
    before = head(client)
    answer = client.post("/sessions", json=body, headers=A)
    assert answer.status_code == 400
    assert answer.json() == {"error": f"validation failed: {field} is required"}
    assert head(client) == before  # nothing appended


def test_add_observation_names_every_missing_field(client):
    _session(client, "s1")
    before = head(client)
    answer = client.post("/observations", json={}, headers=A)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]
    for field in ("session_id", "type", "title", "content", "project"):
        assert f"{field} is required" in message
    assert head(client) == before


def test_add_observation_refuses_a_title_over_500_characters(client):
    _session(client, "s1")
    answer = _observe(client, title="x" * 501)
    assert answer.status_code == 400
    assert answer.json() == {"error": "validation failed: title exceeds 500 chars"}


def test_add_observation_refuses_more_than_20_tags(client):
    _session(client, "s1")
    answer = _observe(client, tags=["tag"] * 21)
    assert answer.status_code == 400
    assert answer.json() == {"error": "validation failed: tags exceed 20 items"}


def test_add_observation_with_every_field_is_created(client):
    _session(client, "s1")
    answer = _observe(
        client, title="Valid observation", tags=["go", "testing"],
        content="This is a valid observation with all required fields.",
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["action"] == "created" and type(body["id"]) is int
    assert (body["revision_count"], body["duplicate_count"]) == (1, 1)


def test_a_body_over_the_services_limit_is_a_400(client):
    answer = client.post(
        "/sessions", content=b"x" * (2 << 20), headers={**A, "Content-Type": "application/json"}
    )
    assert answer.status_code == 400 and "error" in answer.json()


# ---- server_test.go: the full CRUD flow --------------------------------------------------------


def test_full_crud_flow(client):
    _session(client, "sess-1", "myproject")
    created = _observe(
        client, session_id="sess-1", project="myproject", title="Chose Go",
        content="Selected Go for its simplicity and SQLite support.", tags=["go", "language"],
    )  # fmt: skip
    assert created.status_code == 201, created.text
    obs = created.json()["id"]
    got = client.get(f"/observations/{obs}", headers=A)
    assert got.status_code == 200
    assert got.json()["title"] == "Chose Go" and got.json()["project"] == "myproject"
    assert got.json()["session_id"] == "sess-1" and got.json()["scope"] == "project"
    patched = client.patch(
        f"/observations/{obs}", json={"title": "Chose Go for memory service"}, headers=A
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["title"] == "Chose Go for memory service"
    assert patched.json()["content"] == "Selected Go for its simplicity and SQLite support."
    found = client.get("/search", params={"q": "SQLite", "project": "myproject"}, headers=A)
    assert found.status_code == 200 and [r["id"] for r in found.json()] == [obs]
    assert found.json()[0]["rank"] < 0  # the service's rank: lower is better
    context = client.get("/context", params={"project": "myproject", "query": "Go language"},
                         headers=A)  # fmt: skip
    assert context.status_code == 200
    assert context.json()["recent_observations"][0]["title"] == "Chose Go for memory service"
    stats = client.get("/stats", params={"project": "myproject"}, headers=A).json()
    assert stats["total_sessions"] == 1 and stats["total_observations"] == 1
    assert "myproject" in stats["projects"]
    assert client.delete(f"/observations/{obs}", headers=A).status_code == 204
    assert client.get(f"/observations/{obs}", headers=A).status_code == 404
    assert client.get("/search", params={"q": "SQLite", "project": "myproject"},
                      headers=A).json() == []  # fmt: skip


# ---- the three dedup tiers, mapped onto ours -----------------------------------------------------


def test_identical_content_within_the_window_is_deduplicated(client):
    _session(client, "dedup", "dedup")
    first = _observe(client, session_id="dedup", project="dedup", content="Same content").json()
    again = _observe(client, session_id="dedup", project="dedup", content="same   CONTENT").json()
    assert again["id"] == first["id"] and again["action"] == "deduplicated"
    assert again["duplicate_count"] == 2


@pytest.mark.parametrize("changed", [{"title": "Another title"}, {"type": "bugfix"}])
def test_the_same_content_with_another_type_or_title_is_a_new_observation(client, changed):
    """Issue 29: the service's tier 2 needs the same type and title as well as the content."""
    _session(client, "dedup2", "dedup2")
    fields = {"session_id": "dedup2", "project": "dedup2", "content": f"same {changed}"}
    first = _observe(client, **fields).json()
    other = _observe(client, **fields, **changed).json()
    assert other["action"] == "created" and other["id"] != first["id"]
    assert _observe(client, **fields, **changed).json()["action"] == "deduplicated"


def test_any_observation_type_up_to_50_characters_is_taken(client):
    """Issue 29: AgentOps' CRD lets users name any type; the service takes any of 1 to 50."""
    _session(client, "types", "types")
    for kind in ("lesson", "procedure", "Runbook step", "t" * 50):
        made = _observe(client, session_id="types", project="types", type=kind,
                        content=f"a {kind}")  # fmt: skip
        assert made.status_code == 201, made.text
        assert client.get(f"/observations/{made.json()['id']}", headers=A).json()["type"] == kind
    before = head(client)
    for kind in ("t" * 51, "  "):
        refused = _observe(client, session_id="types", project="types", type=kind)
        assert refused.status_code == 400, refused.text
    assert head(client) == before


def test_a_topic_key_updates_in_place_and_counts_revisions(client):
    _session(client, "topic", "topic")
    fields = {"session_id": "topic", "project": "topic", "topic_key": "db/pool"}
    first = _observe(client, content="pool=10", **fields).json()
    second = _observe(client, content="pool=50", **fields).json()
    assert second["id"] == first["id"] and second["action"] == "updated"
    assert second["revision_count"] == 2
    assert client.get(f"/observations/{first['id']}", headers=A).json()["content"] == "pool=50"
    by_topic = client.get("/search", params={"q": "db/pool", "project": "topic"}, headers=A)
    assert by_topic.json()[0]["id"] == first["id"] and by_topic.json()[0]["rank"] == -1000


def test_the_same_topic_key_in_another_project_or_scope_is_another_observation(client):
    _session(client, "tk", "alpha")
    one = _observe(client, session_id="tk", project="alpha", topic_key="k", content="a1").json()
    other = _observe(client, session_id="tk", project="beta", topic_key="k", content="b1").json()
    scoped = _observe(client, session_id="tk", project="alpha", topic_key="k", scope="global",
                      content="g1").json()  # fmt: skip
    assert len({one["id"], other["id"], scoped["id"]}) == 3
    assert {one["action"], other["action"], scoped["action"]} == {"created"}


# ---- sessions, transcripts and context ------------------------------------------------------------


def test_ending_with_a_transcript_counts_it_and_composes_the_services_summary(client):
    _session(client, "ended", "ends")
    transcript = [
        {"role": "user", "content": "Deploy the new memory service to staging"},
        {"role": "assistant", "content": "Deployed."},
        {"role": "user", "content": "Can you verify the deployment rolled out cleanly?"},
        {"role": "assistant", "content": "It did."},
    ]
    answer = client.post("/sessions/ended/end", json={"messages": transcript}, headers=A)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "session_id": "ended",
        "message_count": 4,
        "summary": "Session: 4 messages (2 user, 2 assistant). Started with: Deploy the new memory "
        "service to staging Ended with: Can you verify the deployment rolled out cleanly?",
    }
    recent = client.get("/sessions/recent", params={"project": "ends"}, headers=A).json()
    assert [(s["id"], s["message_count"], s["summary"]) for s in recent] == [
        ("ended", 4, answer.json()["summary"])
    ]
    assert "ended_at" in recent[0]
    context = client.get("/context", params={"project": "ends"}, headers=A).json()
    assert context["recent_sessions"] == [{"summary": answer.json()["summary"]}]
    # the transcript is the session's messages now, in our own API too
    items = client.get("/v1/sessions/ended/sections/messages/items", headers=A)
    assert [i["content"] for i in items.json()["items"]] == [m["content"] for m in transcript]


def test_our_own_end_takes_a_transcript_too(client):
    assert client.put("/v1/sessions/v1-ended", headers=A).status_code == 201
    transcript = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ended = client.post("/v1/sessions/v1-ended/end", json={"messages": transcript}, headers=A)
    assert ended.status_code == 200, ended.text
    assert ended.json()["record"]["type"] == "session.ended"
    summary = client.get("/v1/sessions/v1-ended/summary", headers=A).json()
    assert summary["messages"] == 2 and summary["first_user"]["text"] == "hi"
    bad = client.post("/v1/sessions/v1-ended/end", json={"messages": [{"role": 1}]}, headers=A)
    assert bad.status_code == 400


def test_ending_an_unknown_session_is_200_from_the_transcript_and_appends_nothing(client):
    """Issue 29: the service answers any end 200 (its runtime takes any other status as a
    failure), with the summary of the transcript it was given; nothing is stored."""
    before = head(client)
    messages = [{"role": "user", "content": "Deploy it"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "Verify it"}]  # fmt: skip
    answer = client.post("/sessions/nobody/end", json={"messages": messages}, headers=A)
    assert answer.status_code == 200
    assert answer.json() == {
        "session_id": "nobody", "message_count": 3,
        "summary": "Session: 3 messages (2 user, 1 assistant). Started with: Deploy it "
                   "Ended with: Verify it",
    }  # fmt: skip
    empty = client.post("/sessions/nobody/end", json={}, headers=A).json()
    assert empty == {"session_id": "nobody", "summary": "", "message_count": 0}
    assert head(client) == before
    assert client.get("/v1/sessions/nobody", headers=A).status_code == 404


def test_ending_an_ended_session_again_answers_it_as_it_is(client):
    _session(client, "twice", "ends")
    said = [{"role": "user", "content": "first"}]
    first = client.post("/sessions/twice/end", json={"messages": said}, headers=A)
    before = head(client)
    again = client.post("/sessions/twice/end", json={"messages": said * 3}, headers=A)
    assert again.status_code == 200 and again.json() == first.json()
    assert head(client) == before


def test_deleting_an_unknown_observation_is_204_and_appends_nothing(client):
    before = head(client)
    assert client.delete("/observations/999999999", headers=A).status_code == 204
    assert head(client) == before


def test_context_ranks_by_bm25_then_backfills_newest_first_up_to_5(client):
    _session(client, "ctx", "ctx")
    ids = []
    for n in range(7):
        content = "kubernetes rollout stuck on probes" if n == 1 else f"unrelated note {n}"
        body = _observe(client, session_id="ctx", project="ctx", title=f"t{n}", content=content)
        ids.append(body.json()["id"])
    context = client.get("/context", params={"project": "ctx", "query": "kubernetes"}, headers=A)
    titles = [o["title"] for o in context.json()["recent_observations"]]
    assert titles == ["t1", "t6", "t5", "t4", "t3"]  # the hit, then the newest of the rest
    without = client.get("/context", params={"project": "ctx", "limit": 2}, headers=A).json()
    assert [o["title"] for o in without["recent_observations"]] == ["t6", "t5"]


def test_context_truncates_contents_to_300_characters(client):
    _session(client, "long", "long")
    _observe(client, session_id="long", project="long", content="y" * 400)
    got = client.get("/context", params={"project": "long"}, headers=A).json()
    assert got["recent_observations"][0]["content"] == "y" * 300 + "..."


def test_recent_timeline_export_and_import(client):
    _session(client, "tl", "tl")
    ids = [
        _observe(client, session_id="tl", project="tl", title=f"n{n}", content=f"c{n}").json()["id"]
        for n in range(5)
    ]
    recent = client.get("/observations/recent", params={"project": "tl", "limit": 2}, headers=A)
    assert [o["id"] for o in recent.json()] == [ids[4], ids[3]]
    around = client.get("/timeline", params={"observation_id": ids[2], "before": 1, "after": 1},
                        headers=A)  # fmt: skip
    assert [e["id"] for e in around.json()] == ids[1:4]
    assert client.get("/timeline", headers=A).json() == {"error": "observation_id required"}
    exported = client.get("/export", params={"project": "tl"}, headers=A).json()
    assert [s["id"] for s in exported["sessions"]] == ["tl"]
    assert [o["id"] for o in exported["observations"]] == ids
    # into another tenant: same sessions and observations there
    imported = client.post("/import", json=exported, headers=B)
    assert imported.json() == {"imported_sessions": 1, "imported_observations": 5}
    theirs = client.get("/export", params={"project": "tl"}, headers=B).json()
    assert [o["content"] for o in theirs["observations"]] == [f"c{n}" for n in range(5)]


# ---- the OpenAPI document: generated from the models (streams/seeds/agentops_models.py) --------------

OPERATIONS = {
    ("/sessions", "post"): "createAgentOpsSession",
    ("/sessions/recent", "get"): "listRecentAgentOpsSessions",
    ("/sessions/{id}/end", "post"): "endAgentOpsSession",
    ("/observations", "post"): "addAgentOpsObservation",
    ("/observations/recent", "get"): "listRecentAgentOpsObservations",
    ("/observations/{id}", "get"): "getAgentOpsObservation",
    ("/observations/{id}", "patch"): "updateAgentOpsObservation",
    ("/observations/{id}", "delete"): "deleteAgentOpsObservation",
    ("/search", "get"): "searchAgentOpsObservations",
    ("/context", "get"): "getAgentOpsContext",
    ("/timeline", "get"): "getAgentOpsTimeline",
    ("/stats", "get"): "getAgentOpsStats",
    ("/export", "get"): "exportAgentOps",
    ("/import", "post"): "importAgentOps",
    ("/health", "get"): "checkAgentOpsHealth",
}


def test_openapi_describes_the_contract_from_its_models(client):
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def valid(answer: httpx.Response, path: str, method: str) -> None:
        op = doc["paths"][path][method]
        reply = op["responses"].get(str(answer.status_code)) or op["responses"]["4XX"]
        schema = reply["content"]["application/json"]["schema"]
        conforms(doc, schema, answer.json())

    for (path, method), op_id in OPERATIONS.items():
        assert doc["paths"][path][method]["operationId"] == op_id
    body = schemas["AgentOpsNewObservation"]
    assert set(body["required"]) == {"session_id", "type", "title", "content", "project"}
    assert body["properties"]["title"]["maxLength"] == agentops.MAX_TITLE
    assert body["properties"]["tags"]["anyOf"][0]["maxItems"] == agentops.MAX_TAGS
    timeline = doc["paths"]["/timeline"]["get"]["parameters"]
    assert [p["name"] for p in timeline if p["required"]] == ["observation_id"]
    assert "content" not in doc["paths"]["/observations/{id}"]["delete"]["responses"]["204"]

    _session(client, "doc", "doc")
    valid(client.post("/sessions", json={"id": "doc", "project": "doc"}, headers=A),
          "/sessions", "post")  # fmt: skip
    created = _observe(client, session_id="doc", project="doc", topic_key="a/b", tags=["t"])
    valid(created, "/observations", "post")
    obs = created.json()["id"]
    for path, params in (
        ("/observations/{id}", {}), ("/observations/recent", {}), ("/sessions/recent", {}),
        ("/search", {"q": "a/b"}), ("/context", {"query": "Test"}),
        ("/timeline", {"observation_id": obs}), ("/stats", {}), ("/export", {}), ("/health", {}),
    ):  # fmt: skip
        answer = client.get(path.format(id=obs), params={"project": "doc", **params}, headers=A)
        assert answer.status_code == 200, (path, answer.text)
        valid(answer, path, "get")
    patched = client.patch(f"/observations/{obs}", json={"title": "T", "type": None}, headers=A)
    valid(patched, "/observations/{id}", "patch")
    valid(client.post("/import", json={}, headers=A), "/import", "post")
    valid(client.post("/sessions/doc/end", headers=A), "/sessions/{id}/end", "post")
    again = client.post("/sessions/doc/end", headers=A)  # a second end: answered as it is
    assert again.status_code == 200
    valid(again, "/sessions/{id}/end", "post")
    refused = client.post("/observations", json={"type": "x"}, headers=A)
    assert refused.status_code == 400
    valid(refused, "/observations", "post")


# ---- what the document says the server holds to --------------------------------------------------


@pytest.mark.parametrize("title", ["\x1c", " \x85\u3000", "\ufeff"])
def test_the_document_and_the_server_agree_on_a_blank_title(client, title):
    """strip()'s whitespace, not JSON Schema's `\\s`: U+001C is blank here, U+FEFF is not."""
    _session(client, "s1")
    schema = client.get("/openapi.json").json()["components"]["schemas"]["AgentOpsNewObservation"]
    blank = not title.strip()
    valid = jsonschema.Draft202012Validator(schema["properties"]["title"]).is_valid(title)
    assert valid is not blank
    assert _observe(client, title=title, content=f"blank {title!r}").status_code == (
        400 if blank else 201
    )


PROJECTS = ["my project", "team:web", "Zoë/ünïcode", "+plus", '["a","b"]', "p" * 200, "\x00 nul"]


@pytest.mark.parametrize("project", PROJECTS)
def test_any_project_the_service_takes_keeps_observations(client, project):
    """Issue 29: a project is any non-blank string of at most 200 characters, as the service
    takes it; the holder's id encodes it (foreign_ids) and every read gives it back."""
    schema = client.get("/openapi.json").json()["components"]["schemas"]["AgentOpsNewObservation"]
    assert jsonschema.Draft202012Validator(schema["properties"]["project"]).is_valid(project)
    sid = f"any-project-{PROJECTS.index(project)}"
    _session(client, sid, project)
    made = _observe(client, session_id=sid, project=project, scope="a scope: any",
                    content=f"kept in {project!r}")  # fmt: skip
    assert made.status_code == 201, made.text
    obs, lowered = made.json()["id"], project.lower()
    got = client.get(f"/observations/{obs}", headers=A).json()
    assert (got["project"], got["scope"]) == (lowered, "a scope: any")
    recent = client.get("/observations/recent", params={"project": lowered}, headers=A).json()
    assert [o["id"] for o in recent] == [obs]
    timeline = client.get("/timeline", params={"observation_id": obs}, headers=A).json()
    assert [e["id"] for e in timeline] == [obs]
    exported = client.get("/export", params={"project": lowered}, headers=A).json()
    assert [o["project"] for o in exported["observations"]] == [lowered]
    assert lowered in client.get("/stats", headers=A).json()["projects"]


def test_holder_ids_are_identifiers_and_tell_every_pair_apart():
    """The first version's ids stay as they were; every other (project, scope) is encoded, and
    no two pairs share a holder."""
    assert agentops.holder("web", "project") == "_agentops:web:project"
    pairs = [(p.lower(), s) for p in [*PROJECTS, "web", "a:b", "a"] for s in ("b:c", "project", "")]
    ids = {agentops.holder(p, s) for p, s in pairs}
    assert len(ids) == len(set(pairs))
    for project, scope in pairs:
        sid = agentops.holder(project, scope)
        assert is_identifier(sid)
        assert agentops.parse_holder(sid, agentops.holder_metadata(project, scope)) == (
            project, scope
        )  # fmt: skip


def test_a_transcript_that_is_not_a_list_is_refused(client):
    _session(client, "not-a-list")
    before = head(client)
    for messages in (0, "", {}, False):
        answer = client.post("/sessions/not-a-list/end", json={"messages": messages}, headers=A)
        assert answer.status_code == 400, answer.text  # was: no transcript, and ended
        assert "messages must be a list" in answer.json()["error"]
    assert head(client) == before
    assert client.post("/sessions/not-a-list/end", json={"messages": None}, headers=A).is_success


def test_an_import_list_that_is_not_a_list_is_refused(client):
    before = head(client)
    for empty in (0, "", {}, False):
        answer = client.post("/import", json={"sessions": empty}, headers=A)
        assert answer.status_code == 400 and answer.json() == {"error": "sessions must be a list"}
    assert head(client) == before


@pytest.mark.parametrize("name", ["scope", "topic_key"])
@pytest.mark.parametrize("value", [0, False, [], {}, 7])
def test_a_scope_or_topic_key_that_is_not_a_string_is_refused(client, name, value):
    _session(client, "s1")
    before = head(client)
    answer = _observe(client, **{name: value})
    assert answer.status_code == 400  # was: 0 or [] taken as absent, 7 as the scope "7"
    assert answer.json() == {"error": f"validation failed: {name} must be a string"}
    assert head(client) == before


def test_a_patch_holds_the_limits_of_a_new_observation(client):
    _session(client, "s1")
    obs = _observe(client, content="limits").json()["id"]
    before = head(client)
    for change, message in (
        ({"content": "x" * (agentops.MAX_CONTENT + 1)}, "content exceeds 50000 chars"),
        ({"tags": ["x" * (agentops.MAX_TAG + 1)]}, "tag exceeds 100 chars"),
    ):
        answer = client.patch(f"/observations/{obs}", json=change, headers=A)
        assert answer.status_code == 400 and answer.json() == {"error": message}
    assert head(client) == before


def test_observations_recent_is_its_own_route(client):
    assert client.get("/observations/recent", headers=A).status_code == 200
    for method in ("PATCH", "DELETE"):  # its only method is GET: not an id of /observations/{id}
        answer = client.request(method, "/observations/recent", headers=A)
        assert answer.status_code == 405 and answer.headers["allow"] == "GET"
        assert answer.json()["error"]["code"] == "method_not_allowed"


# ---- our tenancy and our log ---------------------------------------------------------------------


def test_a_project_is_a_namespace_inside_the_tokens_tenant(client):
    _session(client, "iso", "shared")
    _observe(client, session_id="iso", project="shared", content="acme's secret plan")
    _session(client, "iso", "shared", headers=B)
    theirs = client.get("/search", params={"q": "secret plan", "project": "shared"}, headers=B)
    assert theirs.json() == []
    assert client.get("/context", params={"project": "shared"},
                      headers=B).json()["recent_observations"] == []  # fmt: skip
    ours = client.get("/search", params={"q": "secret plan", "project": "shared"}, headers=A)
    assert len(ours.json()) == 1
    assert client.get(f"/observations/{ours.json()[0]['id']}", headers=B).status_code == 404


def test_every_call_that_changes_or_shows_memory_is_a_record(client):
    _session(client, "rec", "rec")
    obs = _observe(client, session_id="rec", project="rec", content="recorded").json()["id"]
    _session(client, "rec-ended", "rec")
    ended = {"messages": [{"role": "user", "content": "quoted"}]}
    assert client.post("/sessions/rec-ended/end", json=ended, headers=A).status_code == 200
    project = {"project": "rec"}
    for call in (
        lambda: client.get(f"/observations/{obs}", headers=A),
        lambda: client.patch(f"/observations/{obs}", json={"tags": ["t"]}, headers=A),
        lambda: client.get("/observations/recent", params=project, headers=A),
        lambda: client.get("/sessions/recent", params=project, headers=A),
        lambda: client.get("/search", params={"q": "recorded", **project}, headers=A),
        lambda: client.get("/context", params=project, headers=A),
        lambda: client.get("/timeline", params={"observation_id": obs}, headers=A),
        lambda: client.get("/export", params=project, headers=A),
    ):
        before = head(client)
        assert call().status_code == 200
        assert head(client) > before
    before = head(client)
    assert client.get("/stats", params=project, headers=A).status_code == 200
    assert head(client) == before  # counts only: no content shown, nothing appended
    reads = client.get(
        "/v1/sessions/_agentops:rec:project/items", headers={**A}
    ).json()  # the holder session is ours to read as well
    assert [i["metadata"]["session_id"] for i in reads["items"]] == ["rec"]


# ---- the model: a transcript at end, and the runtime's sessions block ------------------------


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", seg_bits=6, clock=Clock())
    yield memory
    memory.close()


def test_a_transcript_given_at_end_is_recorded_counted_and_replays(mem):
    s = mem.session("s")
    s.add("messages", "before the end", role="user")
    s.end([{"role": "assistant", "content": "ok"}, {"role": "user", "content": "last words"}])
    summary = s.summary()
    assert summary["messages"] == 3
    assert summary["first_user"]["text"] == "before the end"
    assert summary["last_user"]["text"] == "last words"
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_a_retried_end_with_its_key_records_the_transcript_once(mem):
    s = mem.session("s")
    transcript = [{"role": "user", "content": "only once"}]
    first = s.end(transcript, idempotency_key="k")
    again = s.end(transcript, idempotency_key="k")
    assert again.seq == first.seq and s.summary()["messages"] == 1


def test_a_bad_transcript_is_refused_and_nothing_is_appended(mem):
    s = mem.session("s")
    size = mem.writer.size
    with pytest.raises(InvalidInput, match=r"messages\[0\]"):
        s.end([{"role": "user"}])
    assert mem.writer.size == size
    s.add("messages", "still open", role="user")  # the session did not end


def _ended(mem, sid, first, last):
    s = mem.session(sid)
    s.add("messages", first, role="user")
    s.add("messages", "sure", role="assistant")
    s.add("messages", last, role="user")
    s.end()


def test_the_sessions_block_is_the_runtimes_and_context_at_replays_it(mem):
    _ended(mem, "old", "Fix the FTS5 index", 'Run the "test" suite again')
    _ended(mem, "new", "Deploy to staging", "Verify the rollout")
    s = mem.session("now")
    s.add("messages", "hello", role="user")
    record, messages = s.assemble(sessions=2)
    block = [m for m in messages if m["content"].startswith("<memory:sessions>")]
    assert block == [{"role": "system", "content": (
        '<memory:sessions>\n'
        '- Session with 3 messages. Started: "Deploy to staging" — Ended: "Verify the rollout"\n'
        '- Session with 3 messages. Started: "Fix the FTS5 index" — Ended: "Run the \\"test\\" suite again"\n'
        '</memory:sessions>'
    )}]  # fmt: skip
    assert record.payload["inject"]["sessions"] == 2
    assert mem.context_at(record.seq) == messages
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_without_the_option_the_context_has_no_sessions_block(mem):
    _ended(mem, "old", "first", "last")
    s = mem.session("now")
    s.add("messages", "hello", role="user")
    record, messages = s.assemble(summaries=1)
    assert not any("<memory:sessions>" in m["content"] for m in messages)
    assert "sessions" not in record.payload["inject"]
    assert not any(e.get("inject") == "session" for e in record.payload["manifest"])
    assert mem.context_at(record.seq) == messages


# ---- replay: the contract over HTTP on a test's memory, then rebuilt -----------------------


def test_the_contract_replays_the_live_state_and_answers(tmp_path):
    from helpers.live_api import LiveApi

    memory = Memory.open(tmp_path / "data", seg_bits=6, clock=Clock())
    api = LiveApi(memory).start()
    try:
        with httpx.Client(base_url=api.url, timeout=30) as c:
            for sid, project in (("a", "web"), ("b", "web"), ("c", "ops")):
                assert c.post("/sessions", json={"id": sid, "project": project}).status_code == 201
            for n, (sid, project) in enumerate((("a", "web"), ("b", "web"), ("c", "ops")) * 3):
                body = {"session_id": sid, "project": project, "type": "learning",
                        "title": f"t{n % 4}", "content": f"note {n % 5} on rollouts",
                        "topic_key": "k/1" if n == 4 else None}  # fmt: skip
                assert c.post("/observations", json=body).status_code == 201
            c.patch("/observations/" + str(c.get("/observations/recent").json()[0]["id"]),
                    json={"content": "patched rollout note"})  # fmt: skip
            dropped = c.get("/observations/recent", params={"project": "ops"}).json()[-1]["id"]
            assert c.delete(f"/observations/{dropped}").status_code == 204
            erased = c.get("/observations/recent", params={"project": "web"}).json()[-1]["id"]
            assert c.delete(f"/observations/{erased}", params={"hard": "true"}).status_code == 204
            transcript = [
                {"role": "user", "content": "roll out"},
                {"role": "assistant", "content": "ok"},
            ]
            assert c.post("/sessions/a/end", json={"messages": transcript}).status_code == 200
            asked = {"project": "web", "query": "rollouts"}
            before = (c.get("/context", params=asked).json(), c.get("/stats").json())
    finally:
        api.stop()
    assert memory.rebuild().state_hash() == memory.state_hash()
    memory.close()
    reopened = Memory.open(tmp_path / "data", seg_bits=6, clock=Clock())
    api = LiveApi(reopened).start()
    try:
        with httpx.Client(base_url=api.url, timeout=30) as c:
            assert (c.get("/context", params=asked).json(), c.get("/stats").json()) == before
    finally:
        api.stop()
        reopened.close()


def test_an_item_batch_added_into_a_holder_through_v1_breaks_no_read(client):
    """A batch's items (ids `seq.n`) added into a holder session through /v1 are not AgentOps
    observations (whose ids are integers): every AgentOps read leaves them out, answers 200, and
    reads of the real observations around them still work (issue 30, item 4)."""
    _session(client, "batched", "batched")
    obs = _observe(client, session_id="batched", project="batched", content="a real one")
    obs_id = obs.json()["id"]
    added = client.post(
        "/v1/sessions/_agentops:batched:project/sections/observations/items",
        json={"items": [{"kind": "note", "content": "first"}, {"content": "batched in"}]},
        headers=A,
    )
    assert added.status_code == 201, added.text
    first, second = (i["id"] for i in added.json()["items"])
    assert "." in second  # `seq.1`: an id no observation has
    project = {"project": "batched"}
    for call in (
        lambda: client.get("/export", params=project, headers=A),
        lambda: client.get("/export", headers=A),  # the whole tenant
        lambda: client.get("/observations/recent", params=project, headers=A),
        lambda: client.get("/timeline", params={"observation_id": obs_id}, headers=A),
        lambda: client.get("/search", params={"q": "batched", **project}, headers=A),
        lambda: client.get("/context", params=project, headers=A),
    ):
        answer = call()
        assert answer.status_code == 200, answer.text
        assert "batched in" not in answer.text
    assert client.get("/stats", params=project, headers=A).json()["total_observations"] == 2
    recent = client.get("/observations/recent", params=project, headers=A).json()
    assert [o["id"] for o in recent] == [int(first), obs_id]


def test_a_session_deleted_as_it_is_created_is_a_409_never_a_500(client):
    """A create and a delete of the same id at once: the delete may land between the create's
    write and its answer (schemathesis met a KeyError there: 500). The create answers its
    session, or 409 naming the deletion; never a 5xx (issue 30). Round after round, the delete
    sent 0-1 ms after the create, so many fall in that window (the create's fsync)."""
    url = str(client.base_url)

    async def round_of(http: httpx.AsyncClient, sid: str, delay: float) -> tuple[int, int, str]:
        async def delete() -> httpx.Response:
            await asyncio.sleep(delay)
            return await http.delete(f"/v1/sessions/{sid}", headers=A)

        create = http.post("/sessions", json={"id": sid, "project": "race"}, headers=A)
        made, gone = await asyncio.gather(create, delete())
        return made.status_code, gone.status_code, made.text

    async def rounds() -> list[tuple[int, int, str]]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            delays = (0, 0.0005, 0.001)
            return [await round_of(http, f"race-{n}", delays[n % 3]) for n in range(90)]

    answers = asyncio.run(rounds())
    assert all(made in (201, 409) and gone in (200, 204, 404) for made, gone, _ in answers), [
        a for a in answers if a[0] not in (201, 409)
    ]
    for made, _, text in answers:
        if made == 409:
            assert "deleted by another request" in text, text
