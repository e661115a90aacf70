"""Reads that keep an item's whole shape, filtered reads, the event timeline, session times and
session list filters (issue 16's shared seams)."""

from __future__ import annotations

import pytest

from eventstore.errors import InvalidInput
from sections.runtime.memory import Memory


@pytest.fixture
def mem(tmp_path):
    with Memory.open(tmp_path / "data") as memory:
        yield memory


def test_reads_return_tool_calls_ids_names_and_time(mem):
    s = mem.session("s")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    added = s.add("messages", "", role="assistant", tool_calls=[call], name="planner")
    s.add("messages", "42", role="tool", tool_call_id="c1")
    got = [v.to_json() for v in s.get("messages")]
    assert got[0]["tool_calls"] == [call] and got[0]["name"] == "planner"
    assert got[1]["tool_call_id"] == "c1"
    assert got[0]["ts"] == added.record.ts > 0
    assert got[0]["ts"] <= got[1]["ts"]
    # The add's answer, built from the record alone, has the same shape.
    assert added.to_json() == got[0]


def test_events_in_write_order_across_sections_filtered_by_type_role_and_time(mem):
    s = mem.session("s")
    a = s.add("messages", "hi", role="user")
    b = s.add("actions", "search()", kind="tool_call")
    s.add("findings", "no event type")
    c = s.add("messages", "hello", role="assistant")
    d = s.add("actions", "boom", kind="error")
    timeline = s.events()
    assert [v.id for v in timeline] == [a.id, b.id, c.id, d.id]
    assert [v.id for v in s.events("error")] == [d.id]
    assert [v.id for v in s.events(["user_message", "agent_response"])] == [a.id, c.id]
    assert [v.id for v in s.events(role="assistant")] == [c.id]
    assert [v.id for v in s.events(since=c.ts)] == [c.id, d.id]
    assert [v.id for v in s.events(until=b.ts + 1)][:2] == [a.id, b.id]
    assert [v.id for v in s.events(recent=2)] == [c.id, d.id]
    assert [v.id for v in s.events(offset=1, limit=2)] == [b.id, c.id]
    assert [v.id for v in s.get("messages", role="user")] == [a.id]


def test_an_events_read_is_traced_with_what_it_returned(mem):
    s = mem.session("s")
    a = s.add("messages", "hi", role="user")
    s.add("messages", "yo", role="assistant")
    s.events("user_message")
    last = mem.record_at(mem.writer.size - 1)
    assert last.type == "items.read"
    assert last.payload["purpose"] == "events"
    assert last.payload["items"] == {"messages": [a.id]}


@pytest.mark.parametrize(
    "bad",
    [{"recent": -1}, {"limit": "3"}, {"since": 1.5}, {"kind": 3}, {"colour": "red"}],
)
def test_bad_filters_are_refused_and_append_nothing(mem, bad):
    s = mem.session("s")
    s.add("messages", "hi", role="user")
    size = mem.writer.size
    with pytest.raises(InvalidInput):
        s.get("messages", **bad)
    assert mem.writer.size == size


def test_sessions_carry_created_and_last_activity_times_and_list_filters_work(mem):
    first = mem.session("a", metadata={"user": "u1", "n": 3})
    mem.session("b", metadata={"user": "u2", "n": 4})
    mem.session("c", metadata={"user": "u1", "n": 5})
    info = first.info()
    assert info["created_ts"] > 0 and info["active_ts"] == info["created_ts"]
    added = first.add("messages", "hi", role="user")
    assert first.info()["active_ts"] == added.record.ts
    first.get("messages")  # reads are not activity
    assert first.info()["active_ts"] == added.record.ts
    ids = lambda found: [s["session"] for s in found]  # noqa: E731
    assert ids(mem.list_sessions()) == ["a", "b", "c"]  # creation order
    assert ids(mem.list_sessions(limit=1, offset=1)) == ["b"]
    assert ids(mem.list_sessions(user="u1")) == ["a", "c"]
    assert ids(mem.list_sessions(n=4.0)) == ["b"]  # JSON numbers compare by value
    assert ids(mem.list_sessions(since=added.record.ts)) == ["a"]
    with pytest.raises(InvalidInput):
        mem.list_sessions(limit=-1)


def test_session_times_rebuild_equal_live(mem):
    s = mem.session("s")
    s.add("messages", "hi", role="user")
    s.end_turn()
    assert mem.rebuild().state_hash() == mem.state_hash()
