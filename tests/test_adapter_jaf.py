"""JAF's MemoryProvider over ledgermem (sections/adapters/jaf.py), walked through JAF's own
documented example (docs/memory-system.md of xynehq/jaf-py: "Manual Memory Operations",
"Conversation Search and Management", "Error Handling", "Health Checks") end to end, on the file
log and on a real PostgreSQL shared store.

Each step checks what JAF documents (Success/Failure results, conversations with their messages
and metadata, user-wide deletion, statistics, health with latency) and what ledgermem adds: the
calls are records, reads leave `items.read` records, storing the whole conversation again
appends only what changed, and everything replays (rebuild == live, a reopened memory gives the
same answers).
"""

from __future__ import annotations

import asyncio
import enum
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from helpers.pg import pg_url  # noqa: F401
from helpers.redis_server import redis_server, redis_url  # noqa: F401

from eventstore.file_sink import Durability
from eventstore.pg.schema import init_store
from sections.adapters.jaf import (
    ConversationMemory,
    Failure,
    LedgerMemoryProvider,
    MemoryConnectionError,
    MemoryNotFoundError,
    MemoryQuery,
    MemoryStorageError,
    Message,
    Success,
    create_memory_provider_from_env,
)
from sections.adapters.jaf_shapes import ToolCall, ToolCallFunction
from sections.runtime.memory import Memory


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


def _types(mem: Memory, session: str) -> list[str]:
    return [r.type for r in mem.reader.records() if r.session == session]


def _data(result):
    assert isinstance(result, Success), result
    return result.data


async def _documented_walk(provider) -> dict:
    # Manual Memory Operations: store a new conversation, append to it, retrieve it
    messages = [
        Message(role="user", content="What's the weather like?"),
        Message(role="assistant", content="I'd need your location to check the weather."),
    ]
    result = await provider.store_messages(
        conversation_id="weather-chat-1",
        messages=messages,
        metadata={"topic": "weather", "user_location": "unknown", "user_id": "user-123"},
    )
    assert isinstance(result, Success)
    new_messages = [
        Message(role="user", content="I'm in New York"),
        Message(role="assistant", content="It's currently 72°F and sunny in New York!"),
    ]
    result = await provider.append_messages(conversation_id="weather-chat-1",
                                            messages=new_messages)  # fmt: skip
    assert isinstance(result, Success)
    conversation = _data(await provider.get_conversation("weather-chat-1"))
    assert isinstance(conversation, ConversationMemory)
    assert len(conversation.messages) == 4
    assert [f"{m.role}: {m.content}" for m in conversation.messages][2] == "user: I'm in New York"
    assert [m.message_id for m in conversation.messages] == [
        m.message_id for m in messages + new_messages
    ]
    meta = conversation.metadata
    assert meta["topic"] == "weather" and meta["total_messages"] == 4
    assert meta["created_at"] <= meta["updated_at"] == meta["last_activity"]
    assert conversation.user_id == "user-123"
    assert _data(await provider.get_conversation("no-such-chat")) is None

    # Conversation Search and Management
    await provider.store_messages("user-123-session-1",
                                  [Message(role="user", content=f"question {n}") for n in range(30)],
                                  {"user_id": "user-123"})  # fmt: skip
    await provider.store_messages("other-chat", [Message(role="user", content="hi")],
                                  {"user_id": "user-456"})  # fmt: skip
    query = MemoryQuery(user_id="user-123", limit=10,
                        since=datetime.now() - timedelta(days=7))  # fmt: skip
    conversations = _data(await provider.find_conversations(query))
    assert [c.conversation_id for c in conversations] == ["user-123-session-1", "weather-chat-1"]
    assert [len(c.messages) for c in conversations] == [30, 4]
    assert (
        _data(await provider.find_conversations(user_id="user-123", limit=1, offset=1))[
            0
        ].conversation_id
        == "weather-chat-1"
    )
    assert _data(await provider.find_conversations(since=datetime.now() + timedelta(days=1))) == []
    recent = _data(await provider.get_recent_messages("user-123-session-1", limit=20))
    assert [m.content for m in recent] == [f"question {n}" for n in range(10, 30)]
    stats = _data(await provider.get_stats(user_id="user-123"))
    assert stats["total_conversations"] == 2 and stats["total_messages"] == 34
    assert stats["oldest_conversation"] <= stats["newest_conversation"]

    # Health Checks
    health = _data(await provider.health_check())
    assert health["healthy"] is True and health["latency_ms"] >= 0
    assert health["provider"] == "ledgermem"

    # Error Handling: results, never exceptions
    missing = await provider.append_messages("no-such-chat", new_messages)
    assert isinstance(missing, Failure) and isinstance(missing.error, MemoryNotFoundError)
    assert missing.error.conversation_id == "no-such-chat"
    missing = await provider.get_recent_messages("no-such-chat")
    assert isinstance(missing.error, MemoryNotFoundError)

    # Clear user data (GDPR compliance)
    assert _data(await provider.clear_user_conversations("user-456")) == 1
    assert _data(await provider.get_conversation("other-chat")) is None
    assert _data(await provider.delete_conversation("other-chat")) is False
    return {
        "weather": _data(await provider.get_conversation("weather-chat-1")).messages,
        "stats": _data(await provider.get_stats()),
        "found": [c.conversation_id for c in _data(await provider.find_conversations())],
    }


def test_the_documented_memory_example(mem, tmp_path):
    seen = run(_documented_walk(LedgerMemoryProvider(mem)))
    types = _types(mem, "weather-chat-1")
    assert types[:3] == ["session.created", "item.added", "item.added"]
    assert "items.read" in types and "session.deleted" in _types(mem, "other-chat")
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()

    with Memory.open(tmp_path / "data") as reopened:  # a reopened memory gives the same answers
        again = LedgerMemoryProvider(reopened)
        assert _data(run(again.get_conversation("weather-chat-1"))).messages == seen["weather"]
        assert _data(run(again.get_stats())) == seen["stats"]
        assert [c.conversation_id for c in _data(run(again.find_conversations()))] == seen["found"]


def test_storing_the_whole_conversation_again_appends_only_what_changed(mem):
    provider = LedgerMemoryProvider(mem)
    turn = [Message(role="user", content="Book a flight to Oslo")]
    run(provider.store_messages("trip", turn, {"user_id": "ana"}))
    call = ToolCall("call_1", "function", ToolCallFunction("search_flights", '{"to": "OSL"}'))
    turn += [
        Message(role="assistant", content="", tool_calls=[call]),
        Message(role="tool", content='{"flights": 3}', tool_call_id="call_1"),
        Message(role="assistant", content="I found 3 flights."),
    ]
    size = mem.writer.size
    run(provider.store_messages("trip", turn))  # the engine stores the whole conversation
    added = [r for r in mem.reader.records(after=size - 1) if r.type == "item.added"]
    assert len(added) == 1 and len(added[0].payload["items"]) == 3  # only the new ones
    assert not [r for r in mem.reader.records(after=size - 1) if r.type == "item.removed"]
    stored = _data(run(provider.get_conversation("trip"))).messages
    assert stored == tuple(turn)  # tool calls, their results and ids as JAF made them

    size = mem.writer.size
    run(provider.store_messages("trip", turn))  # nothing new: no write at all
    assert {r.type for r in mem.reader.records(after=size - 1)} == {"items.read"}

    regenerated = turn[:3] + [Message(role="assistant", content="Three flights: 8:00, ...")]
    run(provider.store_messages("trip", regenerated))
    assert _data(run(provider.get_conversation("trip"))).messages == tuple(regenerated)
    assert _data(run(provider.truncate_conversation_after("trip", turn[1].message_id))) == 3
    assert _data(run(provider.get_conversation("trip"))).messages == tuple(turn[:1])
    assert _data(run(provider.truncate_conversation_after("trip", "unknown"))) == 0
    until = _data(run(provider.get_conversation_until_message("trip", turn[0].message_id)))
    assert until.messages == ()

    later = run(provider.append_messages("trip", [], {"stage": "booked"}))
    assert isinstance(later, Success)
    assert _data(run(provider.get_conversation("trip"))).metadata["stage"] == "booked"
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_jaf_limits_are_ledgermem_retention(tmp_path):
    env = {"JAF_LEDGERMEM_DATA": str(tmp_path / "data"), "JAF_MEMORY_MAX_CONVERSATIONS": "2",
           "JAF_MEMORY_MAX_MESSAGES": "3"}  # fmt: skip
    provider = _data(run(create_memory_provider_from_env(env=env)))
    mem = provider.memory
    try:
        conversation = []
        for n in range(5):  # the engine stores the whole conversation after every turn
            conversation.append(Message(role="user", content=f"turn {n}"))
            size = mem.writer.size
            assert isinstance(run(provider.store_messages("long", conversation)), Success)
            written = [r.type for r in mem.reader.records(after=size - 1) if r.type != "items.read"]
            assert written == (["session.created"] if n == 0 else []) + ["item.added"]
        kept = _data(run(provider.get_conversation("long"))).messages
        assert [m.content for m in kept] == ["turn 2", "turn 3", "turn 4"]  # the newest 3
        for name in ("b", "c"):  # max_conversations: the least recently active goes
            run(provider.store_messages(name, [Message(role="user", content=name)]))
        assert _data(run(provider.get_conversation("long"))) is None
        assert [c.conversation_id for c in _data(run(provider.find_conversations()))] == ["c", "b"]
        assert mem.rebuild().state_hash() == mem.state_hash()
    finally:
        run(provider.close())
    bad = run(create_memory_provider_from_env(env={**env, "JAF_MEMORY_MAX_MESSAGES": "0"}))
    assert isinstance(bad, Failure) and isinstance(bad.error, MemoryConnectionError)


def test_jaf_message_objects_and_dicts_are_taken_as_they_are(mem):
    class ContentRole(enum.StrEnum):  # the shape of JAF's, without depending on it
        USER = "user"
        ASSISTANT = "assistant"

    @dataclass(frozen=True)
    class JafMessage:
        role: ContentRole
        content: object
        attachments: list | None = None
        tool_call_id: str | None = None
        tool_calls: list | None = None
        message_id: str | None = None

    @dataclass(frozen=True)
    class Part:
        type: str
        text: str | None = None
        image_url: dict | None = None
        file: dict | None = None

    provider = LedgerMemoryProvider(mem)
    given = [
        JafMessage(ContentRole.USER, [Part("text", "What is in this chart?"),
                                      Part("image_url", image_url={"url": "https://x.test/c.png"})],
                   message_id="m1"),  # fmt: skip
        {"role": "assistant", "content": "A bar chart.", "message_id": "m2",
         "attachments": [{"kind": "document", "url": "https://x.test/r.pdf", "name": "r.pdf"}]},
    ]  # fmt: skip
    assert isinstance(run(provider.store_messages("chart", given)), Success)
    first, second = _data(run(provider.get_conversation("chart"))).messages
    assert first.role == "user" and first.text_content == "What is in this chart?"
    assert first.content[1].image_url == {"url": "https://x.test/c.png"}
    assert second.attachments[0].name == "r.pdf" and second.message_id == "m2"


def test_bad_input_is_a_failure_with_nothing_appended(mem):
    provider = LedgerMemoryProvider(mem)
    run(provider.store_messages("kept", [Message(role="user", content="hello")]))
    mem.observe("decision", "a tenant-wide observation", "kept in the reserved session _tenant")
    size = mem.writer.size
    bad_calls = [
        provider.store_messages("kept", [{"role": "robot", "content": "x"}]),
        provider.store_messages("kept", [{"role": "user", "content": 42}]),
        provider.store_messages("kept", [{"role": "user", "content": "x", "colour": "red"}]),
        provider.store_messages("new", [Message(role="user", content="x")], "not a dict"),
        provider.store_messages("new", [Message(role="user", content="x")], {"at": object()}),
        provider.append_messages("kept", [{"role": "user", "content": "x", "message_id": ""}]),
        provider.store_messages(42, [Message(role="user", content="x")]),  # not a string
        provider.get_recent_messages("kept", limit=-1),
        provider.find_conversations(colour="red"),
        provider.store_messages("_tenant", [Message(role="user", content="x")]),  # reserved
        provider.delete_conversation("_tenant"),
        provider.get_conversation("_tenant"),
    ]
    for call in bad_calls:
        answer = run(call)
        assert isinstance(answer, Failure) and isinstance(answer.error, MemoryStorageError), answer
        assert answer.error.provider == "ledgermem" and answer.error.operation
    assert mem.writer.size == size
    assert [m.content for m in _data(run(provider.get_conversation("kept"))).messages] == ["hello"]


def test_the_factory_picks_the_file_store_from_the_environment(tmp_path):
    env = {"JAF_MEMORY_TYPE": "memory", "JAF_LEDGERMEM_DATA": str(tmp_path / "data")}
    provider = _data(run(create_memory_provider_from_env(env=env)))
    run(provider.store_messages("c", [Message(role="user", content="kept")]))
    assert isinstance(run(provider.close()), Success)
    closed = run(provider.health_check())
    assert isinstance(closed, Failure) and isinstance(closed.error, MemoryConnectionError)
    again = _data(run(create_memory_provider_from_env(env={**env, "JAF_MEMORY_TYPE": "file"})))
    assert [m.content for m in _data(run(again.get_conversation("c"))).messages] == ["kept"]
    run(again.close())
    for bad in ({"JAF_MEMORY_TYPE": "redis"},  # no data directory
                {"JAF_MEMORY_TYPE": "file"},  # no data directory
                {"JAF_MEMORY_TYPE": "postgres", "LEDGERMEM_DATA": str(tmp_path / "data")}):  # fmt: skip
        answer = run(create_memory_provider_from_env(env=bad))
        assert isinstance(answer, Failure) and isinstance(answer.error, MemoryConnectionError)


def test_the_factory_opens_the_postgresql_shared_store(pg_url, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    init_store(pg_url, 2, data, origin="test.local/jaf")
    env = {"JAF_MEMORY_TYPE": "postgres", "JAF_POSTGRES_CONNECTION_STRING": pg_url,
           "JAF_LEDGERMEM_DATA": str(data), "JAF_LEDGERMEM_TENANT": "acme"}  # fmt: skip
    provider = _data(run(create_memory_provider_from_env(env=env)))
    seen = run(_documented_walk(provider))
    health = _data(run(provider.health_check()))
    assert health["details"]["store"] == "postgresql"
    assert provider.memory.rebuild().state_hash() == provider.memory.state_hash()
    size = provider.memory.writer.size
    assert isinstance(run(provider.close()), Success)

    from eventstore.pg.schema import connect

    with connect(pg_url) as conn:  # the records are the table's rows
        rows = conn.execute("SELECT count(*) FROM lm_record").fetchone()[0]
    assert rows > size  # every record, then log.close
    again = _data(run(create_memory_provider_from_env(env=env)))  # the lease was released
    try:
        assert _data(run(again.get_conversation("weather-chat-1"))).messages == seen["weather"]
        assert _data(run(again.get_stats())) == seen["stats"]
    finally:
        run(again.close())


def test_the_factory_opens_the_redis_shared_store(redis_url, tmp_path):  # noqa: F811
    from eventstore.redis.schema import init_store as init_redis_store

    data = tmp_path / "data"
    init_redis_store(redis_url, 2, data, origin="test.local/jaf-redis")
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    env = {"JAF_MEMORY_TYPE": "redis", "JAF_REDIS_HOST": host, "JAF_REDIS_PORT": port,
           "JAF_REDIS_DB": "0", "JAF_LEDGERMEM_DATA": str(data), "JAF_LEDGERMEM_TENANT": "acme"}  # fmt: skip
    provider = _data(run(create_memory_provider_from_env(env=env)))
    seen = run(_documented_walk(provider))
    assert _data(run(provider.health_check()))["details"]["store"] == "redis"
    assert isinstance(run(provider.close()), Success)
    again = _data(run(create_memory_provider_from_env(env={**env, "JAF_REDIS_URL": redis_url})))
    try:  # the lease was released; the records are the store's
        assert _data(run(again.get_conversation("weather-chat-1"))).messages == seen["weather"]
        assert _data(run(again.get_stats())) == seen["stats"]
    finally:
        run(again.close())
    lossy = {**env, "JAF_REDIS_URL": redis_url.replace("/0", "/0?fsync=maybe")}
    answer = run(create_memory_provider_from_env(env=lossy))
    assert isinstance(answer, Failure) and isinstance(answer.error, MemoryConnectionError)


def test_one_leader_at_a_time_on_the_store(pg_url, tmp_path):  # noqa: F811
    from sections.runtime.store_memory import StoreBusy, StoreMemory

    init_store(pg_url, 1, tmp_path / "data", origin="test.local/jaf-busy")
    shutil.copytree(tmp_path / "data" / "keys", tmp_path / "other" / "keys")  # a second replica
    with StoreMemory.open(pg_url, tmp_path / "data") as first:
        first.memory.session("s").add("messages", "kept", role="user")
        with pytest.raises(StoreBusy):  # a second process waits for the lease, then gives up
            StoreMemory.open(pg_url, tmp_path / "other", wait=0.5)
    with StoreMemory.open(pg_url, tmp_path / "data", wait=0) as again:  # released at close
        views = again.memory.session("s", create=False).get("messages")
        assert [v.content for v in views] == ["kept"]
