"""A request is parsed by the model that documents it (streams/apidoc/models.py, streams/web/json_body.py,
streams/routes/query.py), and what the model refuses is answered in one place
(streams/web/errors.py `invalid_input`): 400 invalid_input, naming the field and what was wrong,
with nothing appended. Served by a real uvicorn over a memory the test holds."""

from __future__ import annotations

import httpx
import pytest
from helpers.live_api import LiveApi

from sections.runtime.memory import Memory


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    mem = Memory.open(tmp_path_factory.mktemp("models") / "data")
    api = LiveApi(mem).start()
    with httpx.Client(base_url=api.url, timeout=30) as client:
        assert client.put("/v1/sessions/m").status_code == 201
        yield mem, client
    api.stop()
    mem.close()


def _refusal(live, method: str, path: str, **kwargs) -> str:
    mem, client = live
    head = mem.writer.next_seq
    answer = client.request(method, path, **kwargs)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_input"
    assert mem.writer.next_seq == head
    return error["message"]


@pytest.mark.parametrize("budget", [True, "5", 80.5, None])
def test_a_count_in_a_body_is_an_integer_not_a_bool_a_string_or_a_fraction(live, budget):
    message = _refusal(live, "POST", "/v1/sessions/m/context", json={"budget": budget})
    assert message.startswith("budget must be an integer"), message


def test_a_whole_number_float_in_a_body_is_the_integer_it_equals(live):
    _, client = live
    answer = client.put("/v1/sessions/m/sections/findings", json={"max_items": 7.0})
    assert answer.status_code == 200, answer.text
    assert client.get("/v1/sessions/m").json()["sections"]["findings"]["max_items"] == 7


def test_a_refusal_names_the_nested_field_and_what_was_wrong(live):
    body = {"sections": {"findings": {"items": [{"content": "x", "priority": "high"}]}}}
    message = _refusal(live, "POST", "/v1/sessions", json=body)
    assert message.startswith("sections.findings.items[0].priority must be a number"), message


def test_an_unknown_field_is_named_with_the_fields_the_body_takes(live):
    message = _refusal(live, "POST", "/v1/sessions/m/commit", json={"sectoin": "findings"})
    assert message == "unknown fields ['sectoin']; a commit takes section", message


def test_a_number_in_an_item_is_kept_as_given(live):
    _, client = live
    body = {"content": {"n": 2, "x": 2.5}, "priority": 3}
    added = client.post("/v1/sessions/m/sections/findings/items", json=body)
    assert added.status_code == 201, added.text
    item = added.json()["item"]
    assert (item["content"], item["priority"]) == ({"n": 2, "x": 2.5}, 3)
    assert type(item["priority"]) is int


def test_a_query_integer_is_ascii_digits_and_a_single_valued_one_is_given_once(live):
    for given in ("+5", " 5", "5.0", "1_0", "\u00b2"):
        message = _refusal(live, "GET", "/v1/sessions/m/items", params={"limit": given})
        assert message.startswith("query parameter limit must be an integer"), message
    twice = [("limit", "1"), ("limit", "2")]
    message = _refusal(live, "GET", "/v1/sessions/m/items", params=twice)
    assert message == "query parameter limit is given twice"


def test_an_empty_change_is_refused_naming_what_it_may_set(live):
    message = _refusal(live, "PUT", "/v1/sessions/m/sections/findings", json={})
    assert message.startswith("give one or more of budget_tokens, policy"), message


def test_an_agentops_observation_with_an_empty_scope_takes_the_default_scope(live):
    _, client = live
    assert client.post("/sessions", json={"id": "ao", "project": "p"}).status_code == 201
    body = {"session_id": "ao", "type": "decision", "title": "t", "content": "c",
            "project": "p", "scope": ""}  # fmt: skip
    made = client.post("/observations", json=body)
    assert made.status_code == 201, made.text
    assert client.get(f"/observations/{made.json()['id']}").json()["scope"] == "project"
