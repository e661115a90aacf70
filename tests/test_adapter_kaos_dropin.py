"""KAOS's `LocalMemory` as a drop-in (issue 29): what KAOS's own test suite found, held here so
CI keeps it without the peer (docs/adapters/kaos.md, "Drop-in").

KAOS's code constructs `LocalMemory()` and `LocalMemory(max_sessions=..., max_events_per_session=
...)`, takes any string as a session id, replaces a session created again under its id, stores
any Python value as content, and gives each event the timestamp it was created with.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import pytest

from eventstore.errors import InvalidInput
from sections.adapters import foreign_ids
from sections.adapters.kaos import InMemorySessionService, LocalMemory, MemoryEvent, event_json
from sections.adapters.kaos_content import decode_content, encode_content
from sections.errors import ConfigError
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory


def run(coroutine):
    return asyncio.run(coroutine)


def _types(memory: LocalMemory) -> list[str]:
    return [r.type for r in memory.memory.reader.records()]


def test_constructs_as_kaos_constructs_it_in_process_and_removed_on_close():
    memory = LocalMemory()  # KAOS's Agent
    assert (memory.max_sessions, memory.max_events_per_session) == (1000, 500)
    where = memory.memory.data.root
    assert where.exists() and memory.memory.config.max_sessions == 1000
    run(memory.create_session("agent", "user", "s"))
    run(memory.add_event("s", memory.create_event("user_message", "hi")))
    assert "item.added" in _types(memory)  # every call is a record, in process too
    run(memory.close())
    assert not where.exists()
    run(memory.close())  # twice is fine

    bounded = LocalMemory(max_sessions=10, max_events_per_session=5)  # KAOS's server
    assert (bounded.max_sessions, bounded.max_events_per_session) == (10, 5)
    where = bounded.memory.data.root
    del bounded
    gc.collect()
    assert not where.exists()  # collected: closed and removed
    assert InMemorySessionService is LocalMemory  # KAOS's other name
    for bad in ({"max_sessions": 0}, {"max_events_per_session": 0}, {"max_sessions": "10"}):
        with pytest.raises(ConfigError):
            LocalMemory(**bad)


def test_data_dir_makes_it_durable_and_memory_is_the_callers(tmp_path):
    memory = LocalMemory(max_sessions=50, data_dir=tmp_path / "data")
    run(memory.create_session("agent", "u", "kept"))
    run(memory.add_event("kept", "user_message", "still here"))
    run(memory.close())
    with Memory.open(tmp_path / "data", config=MemoryConfig(max_sessions=50)) as mem:
        again = LocalMemory(memory=mem)
        assert again.max_sessions == 50
        assert [e.content for e in run(again.get_session_events("kept"))] == ["still here"]
        run(again.close())  # the caller's memory stays open
        assert run(again.list_sessions()) == ["kept"]
        with pytest.raises(ConfigError):
            LocalMemory(memory=mem, data_dir=tmp_path / "other")


def test_events_past_the_bound_go_oldest_first_as_in_kaos_deque():
    memory = LocalMemory(max_sessions=10, max_events_per_session=5)
    session_id = run(memory.create_session("test_app", "test_user"))
    for i in range(7):
        run(memory.add_event(session_id, memory.create_event("user_message", f"Message {i}")))
    events = run(memory.get_session_events(session_id))
    assert [e.content for e in events] == [f"Message {i}" for i in range(2, 7)]
    run(memory.close())


def test_max_sessions_removes_the_least_recently_active_tenth_before_a_creation():
    memory = LocalMemory(max_sessions=20)
    for n in range(20):
        run(memory.create_session("agent", "u", f"s{n}"))
    run(memory.add_event("s0", "user_message", "s0 is active again"))  # no longer the oldest
    run(memory.create_session("agent", "u", "new"))  # full: s1 and s2 go (20 // 10)
    sessions = run(memory.list_sessions())
    assert len(sessions) == 19 and "s0" in sessions and "new" in sessions
    assert "s1" not in sessions and "s2" not in sessions
    deleted = [r for r in memory.memory.reader.records() if r.type == "session.deleted"]
    assert [(r.session, r.payload["reason"]) for r in deleted] == [
        ("s1", "max_sessions"), ("s2", "max_sessions"),
    ]  # fmt: skip
    assert run(memory.get_or_create_session("s3")) == "s3"  # exists: nothing removed
    assert len(run(memory.list_sessions())) == 19
    small = LocalMemory(max_sessions=3)
    for n in range(5):
        run(small.get_or_create_session(f"t{n}"))
    assert run(small.list_sessions()) == ["t2", "t3", "t4"]  # at least one goes each time
    assert memory.memory.rebuild().state_hash() == memory.memory.state_hash()
    run(memory.close())
    run(small.close())


@pytest.mark.parametrize(
    "seed_id", ["chat 1", "Zoë", "", "+plain", "a/b?c#d", "x" * 300, "_tenant-like", "s" * 128]
)
def test_any_string_is_a_session_id_and_comes_back_exactly(seed_id):
    memory = LocalMemory()
    if seed_id:
        assert run(memory.create_session("agent", "u1", seed_id)) == seed_id
    else:  # as in KAOS, create_session makes an id for an empty one; get_or_create takes it
        assert run(memory.create_session("agent", "u1", "")).startswith("session_")
        run(memory.delete_session(run(memory.list_sessions())[0]))
        assert run(memory.get_or_create_session("", "agent", "u1")) == ""
    assert run(memory.add_event(seed_id, "user_message", "hello")) is True
    assert run(memory.list_sessions()) == [seed_id]
    assert run(memory.list_sessions(user_id="u1")) == [seed_id]
    session = run(memory.get_session(seed_id))
    assert session is not None and session.session_id == seed_id
    assert run(memory.build_conversation_context(seed_id)) == "User: hello"
    assert [e.content for e in run(memory.recent_events(5, seed_id))] == ["hello"]
    [log] = memory.memory.list_sessions()
    assert log["session"] == foreign_ids.encode(seed_id)  # the one encoding of every adapter
    assert (foreign_ids.ORIGINAL_KEY in log["metadata"]) == foreign_ids.needs_original(seed_id)
    assert run(memory.get_or_create_session(seed_id)) == seed_id
    assert run(memory.delete_session(seed_id)) is True
    assert run(memory.list_sessions()) == []
    run(memory.close())


def test_the_reserved_session_and_non_strings_are_refused():
    memory = LocalMemory()
    for call in (memory.create_session("a", "u", "_tenant"), memory.get_or_create_session(7)):
        with pytest.raises(InvalidInput):
            run(call)
    run(memory.close())


def test_creating_a_session_again_replaces_it_as_kaos_does():
    memory = LocalMemory()
    run(memory.create_session("agent", "alice", "chat 1"))
    run(memory.add_event("chat 1", "user_message", "old"))
    assert run(memory.create_session("other-app", "bob", "chat 1")) == "chat 1"
    session = run(memory.get_session("chat 1"))
    assert session is not None and session.events == []
    assert (session.app_name, session.user_id) == ("other-app", "bob")
    assert run(memory.list_sessions()) == ["chat 1"]
    types = _types(memory)
    assert types.index("session.deleted") < len(types) - types[::-1].index("session.created") - 1
    run(memory.close())


VALUES = [
    datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
    datetime(2024, 5, 1, 12, 30, 0, 7),  # naive
    date(2024, 5, 1), time(8, 15, 3), timedelta(days=2, seconds=5, microseconds=9),
    (1, "two", (3.5, None)), {1, 2}, frozenset({"a"}), b"\x00\xffbytes", bytearray(b"ba"),
    Decimal("1.10"), uuid.UUID(int=5), 3 + 4j, 2**70, -(2**60), 1.0, -0.0, math.inf, 2.5,
    {1: "int key", (2, 3): "tuple key"}, {"$kaos": "dict", "v": []}, {"nested": [b"x", (1,)]},
    "plain", 42, True, None, [1, {"a": [2.5]}],
]  # fmt: skip


def _same(a, b) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_content_and_metadata_of_any_standard_type_come_back_equal_and_typed(tmp_path):
    memory = LocalMemory(data_dir=tmp_path / "data")
    run(memory.create_session("agent", "u", "c"))
    for value in [*VALUES, math.nan]:
        run(memory.add_event("c", "custom", value, {"at": value, "n": 1}))
    run(memory.close())
    with Memory.open(tmp_path / "data") as mem:  # from the log, not from a cache
        events = run(LocalMemory(memory=mem).get_session_events("c"))
        stored = [v.content for v in mem.session("c", create=False).get("events")]
    for event, value in zip(events, [*VALUES, math.nan], strict=True):
        assert _same(event.content, value), (event.content, value)
        assert _same(event.metadata["at"], value) and event.metadata["n"] == 1
    assert stored[VALUES.index("plain")] == "plain"  # JSON stays plain for every other reader
    assert stored[VALUES.index(2.5)] == 2.5
    assert stored[0] == {"$kaos": "datetime", "v": "2024-05-01T12:30:00+00:00"}
    assert decode_content({"$kaos": "bytes", "v": 12}) == {"$kaos": "bytes", "v": 12}  # not ours
    with pytest.raises(InvalidInput):
        encode_content(object())


def test_an_event_keeps_the_timestamp_it_was_created_with(tmp_path):
    memory = LocalMemory(data_dir=tmp_path / "data")
    run(memory.create_session("agent", "u", "t"))
    past = datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    run(memory.add_event("t", MemoryEvent("event_old", past, "user_message", "then", {})))
    made = memory.create_event("agent_response", "now")
    run(memory.add_event("t", made))
    run(memory.close())
    with Memory.open(tmp_path / "data") as mem:
        events = run(LocalMemory(memory=mem).get_session_events("t"))
    assert [(e.event_id, e.timestamp) for e in events] == [
        ("event_old", past), (made.event_id, made.timestamp),
    ]  # fmt: skip
    assert events[0].timestamp.utcoffset() == timedelta(hours=2)
    assert MemoryEvent.from_dict(events[0].to_dict()) == events[0]


def test_get_memory_events_answers_any_content_in_its_typed_json_form():
    """What `GET /memory/events` answers (streams/seeds/kaos_api.py): KAOS's `to_dict`, with
    content and metadata that JSON cannot carry in the adapter's typed form."""
    event = MemoryEvent("e1", datetime(2024, 1, 1, tzinfo=UTC), "tool_result", (b"\x01", 1.0),
                        {"when": date(2024, 1, 2)})  # fmt: skip
    answer = event_json(event)
    assert json.loads(json.dumps(answer)) == answer
    assert answer["content"] == {"$kaos": "tuple", "v": [{"$kaos": "bytes", "v": "AQ=="},
                                                         {"$kaos": "float", "v": "1.0"}]}  # fmt: skip
    assert decode_content(answer["metadata"]["when"]) == date(2024, 1, 2)
    assert event_json(MemoryEvent("e2", event.timestamp, "x", "plain")) == {
        **MemoryEvent("e2", event.timestamp, "x", "plain").to_dict()
    }
