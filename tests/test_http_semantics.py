"""Issue 13, items 12, 13 and 16 over HTTP, against a real `ledgermem serve`: a batch groups a
tool result with its call, a priority write that ranks lowest is 422 `not_admitted`, writes to
an ended session are 409 `session_ended`, and `_tenant` is not listed. Every refusal appends
nothing."""

from __future__ import annotations

import httpx
import pytest
from server import Server

S = "/v1/sessions/agent-1"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with (
        Server(tmp_path_factory.mktemp("semantics") / "data", "--seg-bits", "6") as srv,
        httpx.Client(base_url=srv.url, timeout=30) as c,
    ):
        yield c


def _head(client: httpx.Client) -> int:
    return client.get("/v1/log/status").json()["head"]


def test_a_batch_post_groups_the_result_with_its_call(client):
    session = "/v1/sessions/batch"
    client.put(session)
    call = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    client.post(f"{session}/sections/messages/items", json={"content": "margin?", "role": "user"})
    batch = {"items": [{"content": "", "role": "assistant", "tool_calls": call},
                       {"content": "40%" * 30, "role": "tool", "tool_call_id": "call_1"}]}  # fmt: skip
    added = client.post(f"{session}/sections/messages/items", json=batch)
    assert added.status_code == 201
    assert [i["group"] for i in added.json()["items"]] == ["call:call_1", "call:call_1"]
    for budget in range(1, 80, 3):
        body = {"budget": budget, "sections": ["messages"]}
        roles = [m["role"] for m in client.post(f"{session}/context", json=body).json()["messages"]]
        assert ("assistant" in roles) == ("tool" in roles), (budget, roles)


def test_a_priority_write_that_ranks_lowest_is_422_not_admitted(client):
    session = "/v1/sessions/prio"
    client.put(session)
    assert client.put(f"{session}/sections/findings", json={"budget_tokens": 3}).status_code == 200
    for priority in (5, 1, 3):
        item = {"content": "f", "priority": priority}
        assert client.post(f"{session}/sections/findings/items", json=item).status_code == 201
    head = _head(client)
    refused = client.post(f"{session}/sections/findings/items", json={"content": "g"})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "not_admitted"
    assert "not admitted" in refused.json()["error"]["message"]
    assert _head(client) == head, "a refused write appended a record"
    held = client.get(f"{session}/sections/findings/items").json()["items"]
    assert sorted(i["priority"] for i in held) == [1, 3, 5]


def test_writes_to_an_ended_session_are_409_session_ended(client):
    client.put(S)
    client.post(f"{S}/sections/messages/items", json={"content": "hi", "role": "user"})
    first = client.post(f"{S}/end", headers={"Idempotency-Key": "end-once"})
    assert first.status_code == 200
    head = _head(client)
    refusals = [
        client.post(f"{S}/sections/messages/items", json={"content": "more", "role": "user"}),
        client.put(f"{S}/sections/findings", json={"budget_tokens": 10}),
        client.post(f"{S}/turns/end"),
        client.post(f"{S}/end"),
    ]
    for answer in refusals:
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "session_ended"
    assert _head(client) == head, "a refused write appended a record"
    retry = client.post(f"{S}/end", headers={"Idempotency-Key": "end-once"})
    assert retry.status_code == 200 and retry.json()["record"] == first.json()["record"]
    assert client.post(f"{S}/context", json={"budget": 100}).status_code == 200  # reads go on


def test_the_tenant_session_is_not_listed(client):
    client.put("/v1/sessions/listed")
    answer = client.post(
        "/v1/observations", json={"type": "learning", "title": "t", "content": "lesson"}
    )
    assert answer.status_code in (200, 201)
    listed = [s["session"] for s in client.get("/v1/sessions").json()["sessions"]]
    assert "listed" in listed and "_tenant" not in listed
