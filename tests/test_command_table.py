"""Every command of the table (sections/specs/command_specs.py) answers the same through each runner:
the sync API, the async API and its HTTP route record the same idempotency type (the spec's)
and give results of the same shape for the same inputs; a retry answers the first record."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx
import pytest
from helpers.live_api import LiveApi

from sections.runtime.memory import ItemView, Memory
from sections.specs import command_specs

RUNNERS = ("sync", "async", "http")


def _shape(result) -> object:
    """What must agree between runners: record types and sections, payload and item fields,
    without what depends on where in the log the command landed (seqs, ids, hashes, times)."""
    if isinstance(result, (list, tuple)):
        return [_shape(r) for r in result]
    if isinstance(result, str):  # an erased item's id
        return "id"
    if isinstance(result, ItemView):
        result = result.to_json()
    if isinstance(result, dict) and "type" not in result:  # an item, or a message
        return {k: v for k, v in result.items() if k not in ("id", "seq", "h", "ts")}
    if isinstance(result, dict):  # a record's JSON
        return (result["type"], result["section"], sorted(result.get("payload") or {}))
    return (result.type, result.section, sorted(result.payload or {}))


# name -> (the Session method and its arguments, the HTTP request, the part of its answer)
WRITES = {
    "add_items": (
        lambda item: ("add_many", ("findings", [{"content": "a b", "tags": ["t"]}]), {}),
        lambda item: (
            "POST",
            "/sections/findings/items",
            {"items": [{"content": "a b", "tags": ["t"]}]},
        ),
        "items",
    ),
    "update_item": (
        lambda item: ("update", ("findings", item), {"content": "new"}),
        lambda item: ("PATCH", f"/sections/findings/items/{item}", {"content": "new"}),
        "record",
    ),
    "remove_items": (
        lambda item: ("remove", ("findings", item), {}),
        lambda item: ("DELETE", f"/sections/findings/items/{item}", None),
        "record",
    ),
    "configure_section": (
        lambda item: ("configure", ("findings",), {"budget_tokens": 500}),
        lambda item: ("PUT", "/sections/findings", {"budget_tokens": 500}),
        "record",
    ),
    "commit": (
        lambda item: ("commit", (), {}),
        lambda item: ("POST", "/commit", None),
        "record",
    ),
    "end_turn": (
        lambda item: ("end_turn", (), {}),
        lambda item: ("POST", "/turns/end", None),
        "record",
    ),
    "end_session": (
        lambda item: ("end", (), {}),
        lambda item: ("POST", "/end", None),
        "record",
    ),
    "compact_for_payload_error": (  # on the conversation `_prepared` adds for it
        lambda item: ("compact_for_payload_error", (1500,), {"budget": 100_000}),
        lambda item: ("POST", "/compact", {"target_bytes": 1500, "budget": 100_000}),
        "compaction",
    ),
    "delete_session": (
        lambda item: ("delete", (), {}),
        lambda item: ("DELETE", "", None),
        "record",
    ),
}
UNKEYED = {  # commands that take no idempotency key
    "read_items": (
        lambda item: ("get", ("findings", [item]), {"reader": "operator"}),
        lambda item: ("GET", "/sections/findings/items", {"id": item, "reader": "operator"}),
        "items",
    ),
    "assemble_context": (
        lambda item: ("assemble", (100,), {}),
        lambda item: ("POST", "/context", {"budget": 100}),
        ("record", "messages"),
    ),
    "erase_items": (
        lambda item: ("erase_items", ([item],), {"reason": "gdpr"}),
        lambda item: ("POST", "/erase", {"ids": [item], "reason": "gdpr"}),
        ("record", "erased"),
    ),
    "erase_session": (
        lambda item: ("erase_all", (), {"reason": "gdpr"}),
        lambda item: ("POST", "/erase", {"all": True, "reason": "gdpr"}),
        "record",
    ),
}
# Reached through Memory's own methods (tests/test_search*.py, test_observations.py, the session
# routes in test_http_api.py), not through a Session.
ELSEWHERE = {"create_session", "get_or_create_session", "search", "observe"}
ELSEWHERE |= {"read_state", "read_summaries", "trace_stream"}  # tests/test_traced_reads.py
KEYED_ELSEWHERE = {"create_session"}  # POST /v1/sessions: tests/test_rest_sessions.py
ELSEWHERE |= {"cleanup", "erase_deleted"}  # tests/test_retention.py, test_retention_http.py


def test_the_table_is_covered():
    assert {s.name for s in command_specs.SPECS} == set(WRITES) | set(UNKEYED) | ELSEWHERE
    for spec in command_specs.SPECS:
        keyed = spec.name in WRITES or spec.name in KEYED_ELSEWHERE
        assert (spec.idempotency_type is not None) == keyed, spec.name


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    mem = Memory.open(tmp_path_factory.mktemp("table") / "data", seg_bits=5)
    api = LiveApi(mem).start()
    with httpx.Client(base_url=api.url, timeout=30) as client:
        yield mem, client
    api.stop()
    mem.close()


def _call(live, via: str, session: str, command, item: str, key: str | None):
    mem, client = live
    method, args, kwargs = command[0](item)
    if via != "http":
        if key is not None:
            kwargs = {**kwargs, "idempotency_key": key}
        s = mem.session(session, create=False)
        if via == "sync":
            return getattr(s, method)(*args, **kwargs)
        return asyncio.run(getattr(s, method + "_async")(*args, **kwargs))
    verb, path, body = command[1](item)
    url = f"/v1/sessions/{quote(session, safe='')}{path}"
    headers = {"Idempotency-Key": key} if key is not None else {}
    if verb == "GET":
        response = client.get(url, params=body, headers=headers)
    else:
        response = client.request(verb, url, json=body, headers=headers)
    assert response.status_code in (200, 201), response.text
    answer = response.json()
    pick = command[2]
    return tuple(answer[p] for p in pick) if isinstance(pick, tuple) else answer[pick]


def _prepared(mem: Memory, name: str, via: str) -> tuple[str, str]:
    session = f"{name}/{via}"
    s = mem.session(session)
    s.add("findings", "first finding")
    if name == "compact_for_payload_error":  # something to compact
        s.add("messages", "the task", role="user")
        for n in range(4):
            call = {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            s.add("messages", f"step {n}", role="assistant", tool_calls=[call])
            s.add("messages", "out " * 300, role="tool", tool_call_id=f"c{n}")
    return session, s.add("findings", "the target", tags=["x"]).id


def _recorded_type(mem: Memory, session: str, key: str) -> str | None:
    def made(state):
        found = state.sessions.get(("default", session))
        entry = found.idempotency.get(key) if found is not None else None
        return entry[2] if entry is not None else None

    return mem.read(made)


@pytest.mark.parametrize("name", sorted(WRITES))
def test_each_runner_records_the_specs_idempotency_type_and_answers_alike(live, name):
    mem, _ = live
    spec = next(s for s in command_specs.SPECS if s.name == name)
    shapes = {}
    for via in RUNNERS:
        session, item = _prepared(mem, name, via)
        first = _call(live, via, session, WRITES[name], item, "key-1")
        records = [r for r in mem.reader.records() if r.session == session]
        keyed = [r for r in records if r.has_payload and r.payload.get("idem") == "key-1"]
        assert [r.type for r in keyed] == [spec.idempotency_type], via
        if name != "delete_session":  # a deleted session keeps no keys
            assert _recorded_type(mem, session, "key-1") == spec.idempotency_type, via
            head = mem.writer.next_seq
            again = _call(live, via, session, WRITES[name], item, "key-1")
            assert _shape(again) == _shape(first), via
            assert mem.writer.next_seq == head, f"{via}: the retry appended a record"
            if not isinstance(first, list):
                seq = first["seq"] if isinstance(first, dict) else first.seq
                assert seq == keyed[0].seq, via
        shapes[via] = _shape(first)
    assert shapes["sync"] == shapes["async"] == shapes["http"]


@pytest.mark.parametrize("name", sorted(UNKEYED))
def test_each_runner_answers_alike_for_commands_without_a_key(live, name):
    mem, _ = live
    shapes = {}
    for via in RUNNERS:
        session, item = _prepared(mem, name, via)
        shapes[via] = _shape(_call(live, via, session, UNKEYED[name], item, None))
    assert shapes["sync"] == shapes["async"] == shapes["http"]
