"""KAOS's agent memory over ledgermem (sections/adapters/kaos.py), walked through KAOS's own
documented example (docs/python-framework/memory.md of axsaucedo/kaos: sessions, events,
conversation context, statistics, serialization, the agent's logging, the memory endpoints)
end to end on a real memory and a real `ledgermem serve`.

Each step checks what KAOS documents (ids, event dicts, the "User: / Assistant:" context, the
statistics' keys) and what ledgermem adds: every call is a record, reads leave `items.read`
records, the timeline is in log order across sections, and everything replays (rebuild == live,
a reopened memory gives the same answers).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx
import pytest
from helpers.pg import pg_url  # noqa: F401
from helpers.replicas import leading, make_replicas, replica, wait_until
from helpers.tenant_server import A, B, two_tenants

from eventstore.errors import InvalidInput
from eventstore.file_sink import Durability
from sections.adapters.kaos import LocalMemory, MemoryEvent, NullMemory, memory_from_env
from sections.errors import ConfigError
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def mem(tmp_path):
    config = MemoryConfig(max_sessions=1000)  # KAOS's default bound, the memory's to keep
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC, config=config)
    yield memory
    memory.close()


def _types(mem: Memory, session: str) -> list[str]:
    return [r.type for r in mem.reader.records() if r.session == session]


async def _documented_walk(memory: LocalMemory) -> dict:
    # Session management
    session_id = await memory.create_session(app_name="agent", user_id="user123",
                                             session_id="custom-id")  # fmt: skip
    assert session_id == "custom-id"
    assert await memory.get_or_create_session(session_id="provided-id", app_name="agent",
                                              user_id="user") == "provided-id"  # fmt: skip
    assert await memory.get_or_create_session("provided-id") == "provided-id"  # exists: as is
    generated = await memory.create_session("agent", "user123")
    assert generated.startswith("session_") and len(generated) == len("session_") + 12
    assert await memory.list_sessions() == ["custom-id", "provided-id", generated]
    assert await memory.list_sessions(user_id="user123") == ["custom-id", generated]

    # Event management: create, add, read back (all, then by type)
    event = memory.create_event(event_type="user_message", content="Hello!",
                                metadata={"source": "api"})  # fmt: skip
    assert event.event_id.startswith("event_") and event.timestamp.tzinfo is not None
    assert await memory.add_event(session_id, event) is True
    assert await memory.add_event(session_id, "agent_response", "Hi there!") is True
    await memory.add_event(session_id, memory.create_event("user_message", "How are you?"))
    call = {"tool": "calc", "arguments": {"expression": "2+2"}}
    await memory.add_event(session_id, memory.create_event("tool_call", call))
    await memory.add_event(session_id, memory.create_event("tool_result", {"tool": "calc",
                                                                            "result": 4}))  # fmt: skip
    await memory.add_event(session_id, "delegation_request", {"agent": "worker", "task": "sum"})
    await memory.add_event(session_id, "delegation_response", {"agent": "worker",
                                                               "response": "4"})  # fmt: skip
    await memory.add_event(session_id, "error", "Connection failed")
    await memory.add_event(session_id, "custom", {"note": "anything"}, {"k": 1})
    assert await memory.add_event("no-such-session", "user_message", "lost") is False

    all_events = await memory.get_session_events(session_id)
    assert [e.event_type for e in all_events] == [
        "user_message", "agent_response", "user_message", "tool_call", "tool_result",
        "delegation_request", "delegation_response", "error", "custom",
    ]  # fmt: skip
    assert all_events[0].event_id == event.event_id  # the id it was created with
    assert all_events[0].metadata == {"source": "api"} and all_events[3].content == call
    stamps = [e.timestamp for e in all_events]
    assert stamps == sorted(stamps)  # time order
    messages = await memory.get_session_events(
        session_id, event_types=["user_message", "agent_response"]
    )
    assert [e.content for e in messages] == ["Hello!", "Hi there!", "How are you?"]
    assert await memory.get_session_events("no-such-session") == []

    # Conversation context
    context = await memory.build_conversation_context(session_id, max_events=20)
    assert context == "User: Hello!\nAssistant: Hi there!\nUser: How are you?"
    assert await memory.build_conversation_context(session_id, max_events=2) == (
        "Assistant: Hi there!\nUser: How are you?"
    )
    assert await memory.build_conversation_context("no-such-session") == ""

    # Statistics
    stats = await memory.get_memory_stats()
    assert stats == {"total_sessions": 3, "total_events": 9, "avg_events_per_session": 3}

    # Serialization
    event_dict = all_events[0].to_dict()
    assert set(event_dict) == {"event_id", "timestamp", "event_type", "content", "metadata"}
    assert MemoryEvent.from_dict(event_dict) == all_events[0]
    session = await memory.get_session(session_id)
    session_dict = session.to_dict()
    assert session_dict["user_id"] == "user123" and session_dict["app_name"] == "agent"
    assert len(session_dict["events"]) == 9
    assert session.created_at <= session.updated_at <= datetime.now(UTC)
    assert await memory.get_session("no-such-session") is None

    # Deleting
    assert await memory.delete_session(generated) is True
    assert await memory.delete_session(generated) is False
    return {"events": [e.to_dict() for e in all_events], "context": context,
            "sessions": await memory.list_sessions(), "stats": await memory.get_memory_stats()}  # fmt: skip


def test_the_documented_memory_example(mem, tmp_path):
    memory = LocalMemory(max_sessions=1000, max_events_per_session=500, memory=mem)
    seen = run(_documented_walk(memory))
    assert seen["sessions"] == ["custom-id", "provided-id"]
    types = _types(mem, "custom-id")
    assert types[0] == "session.created" and types.count("item.added") == 9
    assert "items.read" in types  # every read of events is traced
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()

    with Memory.open(tmp_path / "data") as reopened:  # a reopened memory gives the same answers
        again = LocalMemory(memory=reopened)
        events = run(again.get_session_events("custom-id"))
        assert [e.to_dict() for e in events] == seen["events"]
        assert run(again.build_conversation_context("custom-id")) == seen["context"]
        assert run(again.list_sessions()) == seen["sessions"]
        assert run(again.get_memory_stats()) == seen["stats"]


def test_the_agent_logs_its_turn_and_the_timeline_spans_sections(mem):
    memory = LocalMemory(memory=mem)
    run(memory.get_or_create_session("turn"))
    session = mem.session("turn", create=False)
    # The agent's own logging (KAOS's Agent.process_message), interleaved with messages another
    # client wrote into `messages`: the timeline is the session's, in the order written.
    run(memory.add_event("turn", memory.create_event("user_message", "What is 2+2?")))
    session.add("messages", "calling calc", role="assistant",
                tool_calls=[{"id": "c1", "type": "function",
                             "function": {"name": "calc", "arguments": "{}"}}])  # fmt: skip
    session.add("messages", "4", role="tool", tool_call_id="c1")
    session.add("documents", "a document is memory, not an event")
    run(memory.add_event("turn", memory.create_event("agent_response", "The answer is 4")))
    events = run(memory.get_session_events("turn"))
    assert [(e.event_type, e.content) for e in events] == [
        ("user_message", "What is 2+2?"),
        ("tool_call", "calling calc"),
        ("tool_result", "4"),
        ("agent_response", "The answer is 4"),
    ]
    only_tools = run(memory.get_session_events("turn", ["tool_call", "tool_result"]))
    assert [e.event_type for e in only_tools] == ["tool_call", "tool_result"]
    assert run(memory.build_conversation_context("turn")) == (
        "User: What is 2+2?\nAssistant: The answer is 4"
    )
    # A session made without the adapter gets the events section on its first event
    mem.session("plain")
    assert run(memory.add_event("plain", "user_message", "hi")) is True
    assert [e.content for e in run(memory.get_session_events("plain"))] == ["hi"]
    newest = run(memory.recent_events(3))
    assert [e.content for e in newest] == ["4", "The answer is 4", "hi"]  # across sessions
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_null_memory_accepts_everything_and_keeps_nothing(tmp_path):
    memory = memory_from_env(env={"MEMORY_ENABLED": "false",
                                  "LEDGERMEM_DATA": str(tmp_path / "data")})  # fmt: skip
    assert isinstance(memory, NullMemory)

    async def walk() -> None:
        assert await memory.create_session("agent", "user") == "null-session"
        assert await memory.create_session("agent", "user", "mine") == "mine"
        assert await memory.get_or_create_session("mine") == "mine"
        event = memory.create_event("user_message", "Hello!")
        assert await memory.add_event("mine", event) is True
        assert await memory.add_event("mine", "agent_response", "Hi") is True
        assert await memory.get_session_events("mine") == []
        assert await memory.get_session("mine") is None
        assert await memory.list_sessions() == [] and await memory.delete_session("mine")
        assert await memory.build_conversation_context("mine") == ""
        assert await memory.get_memory_stats() == {
            "total_sessions": 0, "total_events": 0, "avg_events_per_session": 0,
        }  # fmt: skip
        assert await memory.cleanup_old_sessions(1) == 0

    run(walk())
    assert not (tmp_path / "data").exists()  # no memory was opened: nothing stored anywhere


def test_configuration_from_kaos_environment_variables(tmp_path):
    env = {"MEMORY_ENABLED": "true", "MEMORY_TYPE": "local", "MEMORY_CONTEXT_LIMIT": "4",
           "MEMORY_MAX_SESSIONS": "50", "MEMORY_MAX_SESSION_EVENTS": "20",
           "LEDGERMEM_DATA": str(tmp_path / "data")}  # fmt: skip
    memory = memory_from_env(env=env)
    try:
        assert isinstance(memory, LocalMemory)
        assert (memory.max_sessions, memory.max_events_per_session, memory.context_limit) == (
            50, 20, 4,
        )  # fmt: skip
        assert run(memory.create_session("agent", "u", "s")) == "s"
    finally:
        run(memory.close())
    with Memory.open(tmp_path / "data") as reopened:  # LEDGERMEM_DATA: durable
        assert [s["session"] for s in reopened.list_sessions()] == ["s"]
    in_process = memory_from_env(env={"MEMORY_MAX_SESSIONS": "7"})  # KAOS's `local`: in memory
    assert isinstance(in_process, LocalMemory) and in_process.max_sessions == 7
    where = in_process.memory.data.root
    assert run(in_process.create_session("agent", "u", "chat 1")) == "chat 1"
    run(in_process.close())
    assert not where.exists()
    for bad in ({"MEMORY_TYPE": "redis"}, {"MEMORY_ENABLED": "maybe"},
                {"MEMORY_MAX_SESSIONS": "0"}, {"MEMORY_MAX_SESSION_EVENTS": "many"}):  # fmt: skip
        with pytest.raises(ConfigError):
            memory_from_env(env=bad)


def test_bad_input_is_refused_with_nothing_appended(mem):
    memory = LocalMemory(memory=mem)
    run(memory.create_session("agent", "u", "bad"))
    mem.observe("decision", "a tenant-wide observation", "kept in the reserved session _tenant")
    size = mem.writer.size
    for call in (memory.get_or_create_session("_tenant"), memory.add_event("_tenant", "error", 1),
                 memory.delete_session("_tenant"), memory.get_session_events("_tenant")):  # fmt: skip
        with pytest.raises(InvalidInput):  # the tenant's own session is no KAOS session
            run(call)
    with pytest.raises(InvalidInput):
        run(memory.create_session("agent", "u", "_tenant"))
    with pytest.raises(InvalidInput):
        run(memory.create_session("agent", "u", 42))  # a session id is a string
    bad_events = [
        ("bad", "user_message", object(), None),  # content of a class the encoding does not know
        ("bad", "user_message", "x", {"at": object()}),
        ("bad", "user_message", "x", {1: "not a string key"}),
        ("bad", "user_message", "x", {"event_time": "mine"}),  # the adapter's key
        ("bad", "", "x", None),  # no event type
        ("bad", "user_message", "x", "not a dict"),
        ("bad", "user_message", "x", {"event_id": "mine"}),  # the adapter's key
    ]
    for session_id, type_, content, metadata in bad_events:
        with pytest.raises(InvalidInput):
            run(memory.add_event(session_id, type_, content, metadata))
    with pytest.raises(InvalidInput):
        run(memory.add_event("bad", MemoryEvent("", datetime.now(UTC), "error", "x")))
    with pytest.raises(InvalidInput):
        run(memory.add_event("bad", 42))
    with pytest.raises(InvalidInput):
        run(memory.build_conversation_context("bad", max_events=-1))
    with pytest.raises(InvalidInput):
        run(memory.recent_events(-1))
    for limits in ({"max_sessions": 0}, {"max_sessions": 10}, {"max_events_per_session": 0}):
        with pytest.raises(ConfigError):
            LocalMemory(**limits, memory=mem)  # 10: the memory keeps 1000
    assert mem.writer.size == size


def test_kaos_limits_are_ledgermem_retention(tmp_path):
    now = [1_800_000_000_000_000_000]
    config = MemoryConfig(max_sessions=2)
    with Memory.open(tmp_path / "data", config=config, clock=lambda: now[0],
                     durability=Durability.UNSAFE_NO_FSYNC) as mem:  # fmt: skip
        memory = LocalMemory(max_sessions=2, max_events_per_session=3, memory=mem)
        for n in range(5):  # max_events_per_session: the oldest events go, one by one
            run(memory.add_event(run(memory.get_or_create_session("busy")), "custom", n))
        assert [e.content for e in run(memory.get_session_events("busy"))] == [2, 3, 4]
        evicted = [r.payload.get("evicted") for r in mem.reader.records() if r.type == "item.added"]
        assert [e[0]["reason"] for e in evicted if e] == ["max_items", "max_items"]

        now[0] += 3600 * 10**9
        run(memory.create_session("agent", "u", "second"))
        now[0] += 3600 * 10**9
        run(memory.create_session("agent", "u", "third"))  # max_sessions: the least active goes
        assert run(memory.list_sessions()) == ["second", "third"]
        reasons = [r.payload.get("reason") for r in mem.reader.records()
                   if r.type == "session.deleted"]  # fmt: skip
        assert reasons == ["max_sessions"]

        now[0] += 1800 * 10**9
        run(memory.add_event("third", "user_message", "still here"))
        assert run(memory.cleanup_old_sessions(max_age_hours=1)) == 1  # "second": idle 1.5 h
        assert run(memory.list_sessions()) == ["third"]
        assert run(memory.cleanup_old_sessions(max_age_hours=24)) == 0
        assert mem.rebuild().state_hash() == mem.state_hash()


# ---- the memory endpoints, on a real server with two tenants -------------------------------------


def test_memory_endpoints_answer_kaos_shapes_per_tenant(tmp_path):
    with two_tenants(tmp_path) as client:
        for session, headers in (("chat-1", A), ("chat-2", A), ("other", B)):
            assert client.put(f"/v1/sessions/{session}", headers=headers,
                              json={"metadata": {"user_id": "u"}}).status_code == 201  # fmt: skip
        items = "/v1/sessions/{}/sections/messages/items"
        client.post(items.format("chat-1"), json={"content": "Hello!", "role": "user"}, headers=A)
        client.post(items.format("chat-2"), json={"content": "Hey", "role": "user"}, headers=A)
        client.post(items.format("chat-1"), json={"content": {"tool": "calc"},
                                                  "kind": "tool_call"}, headers=A)  # fmt: skip
        client.post(items.format("chat-1"), json={"content": "4", "role": "assistant"}, headers=A)
        client.post(items.format("other"), json={"content": "secret", "role": "user"}, headers=B)

        answer = client.get("/memory/events", headers=A)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["agent"] == "acme" and body["total"] == 4
        assert [(e["event_type"], e["content"]) for e in body["events"]] == [
            ("user_message", "Hello!"), ("user_message", "Hey"),
            ("tool_call", {"tool": "calc"}), ("agent_response", "4"),
        ]  # fmt: skip
        assert set(body["events"][0]) == {"event_id", "timestamp", "event_type", "content",
                                          "metadata"}  # fmt: skip
        limited = client.get("/memory/events", params={"limit": 2}, headers=A).json()
        assert [e["content"] for e in limited["events"]] == [{"tool": "calc"}, "4"]
        one = client.get("/memory/events", params={"session_id": "chat-2"}, headers=A).json()
        assert [e["content"] for e in one["events"]] == ["Hey"]
        sessions = client.get("/memory/sessions", headers=A).json()
        assert sessions == {"agent": "acme", "sessions": ["chat-1", "chat-2"], "total": 2}
        encoded = client.put("/v1/sessions/+chat+201", headers=A)  # KAOS's "chat 1"
        assert encoded.status_code == 201
        client.post(items.format("+chat+201"), json={"content": "spaced", "role": "user"},
                    headers=A)  # fmt: skip
        spaced = client.get("/memory/events", params={"session_id": "+chat+201"}, headers=A)
        assert [e["content"] for e in spaced.json()["events"]] == ["spaced"]
        assert client.get("/memory/sessions", headers=A).json()["sessions"][-1] == "chat 1"
        theirs = client.get("/memory/events", headers=B).json()
        assert [e["content"] for e in theirs["events"]] == ["secret"]  # tenants stay apart
        assert client.get("/memory/events", params={"session_id": "other"},
                          headers=A).json()["events"] == []  # fmt: skip

        head = client.get("/readyz").json()["head"]
        for params in ({"limit": "x"}, {"limit": -1}, {"since": 1}, {"session_id": "_tenant"},
                       {"session_id": "a b"}):  # fmt: skip
            refused = client.get("/memory/events", params=params, headers=A)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_input"
        assert client.get("/memory/events").status_code == 401
        assert client.get("/readyz").json()["head"] == head  # refusals appended nothing


def test_memory_endpoints_on_any_replica_of_a_shared_store(pg_url, tmp_path):  # noqa: F811
    """In store mode the routes are the partition leader's: the replica that does not lead
    forwards them, and both answer the same."""
    _, (a_dir, b_dir) = make_replicas(pg_url, tmp_path, 2)
    with replica(a_dir, pg_url, 1.0) as a:
        wait_until(lambda: leading(a) == {0}, what="a to lead")
        with replica(b_dir, pg_url, 1.0) as b, httpx.Client(timeout=30) as client:

            def put() -> bool:  # forwarded to a, once b knows who leads (503 before)
                return client.put(f"{b.url}/v1/sessions/chat").status_code in (200, 201)

            wait_until(put, what="b to forward to the leader")
            items = f"{b.url}/v1/sessions/chat/sections/messages/items"
            for content, role in (("Hello!", "user"), ("Hi there!", "assistant")):
                assert (
                    client.post(items, json={"content": content, "role": role}).status_code == 201
                )
            answers = [client.get(f"{r.url}/memory/events").json() for r in (a, b)]
            assert answers[0] == answers[1]
            assert [(e["event_type"], e["content"]) for e in answers[0]["events"]] == [
                ("user_message", "Hello!"), ("agent_response", "Hi there!"),
            ]  # fmt: skip
            sessions = client.get(f"{b.url}/memory/sessions").json()
            assert sessions == {"agent": "default", "sessions": ["chat"], "total": 1}
