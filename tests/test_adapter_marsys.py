"""MARSYS's conversation memories over ledgermem (sections/adapters/marsys.py), walked through
MARSYS's own documented examples (docs/concepts/memory.md of rezaho/MARSYS: "ConversationMemory",
"Message Addition Examples", "ManagedConversationMemory"), end to end on a real memory.

Each step checks what MARSYS documents (ids from add, message dicts in LLM format, reset keeping
the system prompt, compaction within the threshold) and what ledgermem adds: the calls are
records, reads leave `items.read` records, and everything replays (rebuild == live, reopen).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.machinery
import sys
import types
import uuid
from dataclasses import dataclass

import orjson
import pytest

from eventstore.errors import InvalidInput
from eventstore.file_sink import Durability
from sections.adapters import marsys_messages as marsys_parts
from sections.adapters.marsys import (
    ConversationMemory,
    ManagedConversationMemory,
    ManagedMemoryConfig,
    MemoryResetEvent,
    MessageError,
)
from sections.errors import ItemNotFound
from sections.runtime.memory import Memory


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


def _types(mem: Memory, session: str) -> list[str]:
    return [r.type for r in mem.reader.records() if r.session == session]


def test_the_documented_conversation_memory_example(mem, tmp_path):
    # Create memory with optional system prompt
    memory = ConversationMemory(description="You are a helpful assistant", memory=mem,
                                session_id="demo")  # fmt: skip
    # Add a message
    message_id = memory.add(role="user", content="Hello")
    assert isinstance(message_id, str)
    # Or add a Message object directly (a dict, or any object with MARSYS's attributes)
    msg = {"role": "assistant", "content": "Hi there!"}
    second = memory.add(message=msg)
    assert second != message_id

    everything = [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
    ]
    assert memory.retrieve_all() == everything
    assert memory.retrieve_recent(n=5) == everything
    assert memory.retrieve_recent(n=1) == everything[-1:]
    assert memory.retrieve_recent(n=0) == []
    assert memory.get_messages() == everything

    assert memory.retrieve_by_id(message_id) == {"role": "user", "content": "Hello"}
    assert memory.retrieve_by_id("no-such-id") is None
    assert memory.retrieve_by_role("user", n=3) == [{"role": "user", "content": "Hello"}]
    memory.update(second, content="Hi! How can I help?")
    assert memory.retrieve_by_id(second)["content"] == "Hi! How can I help?"
    assert memory.remove_by_id(message_id) is True
    assert memory.remove_by_id(message_id) is False
    memory.reset_memory()  # Clears all except system message
    assert memory.retrieve_all() == everything[:1]

    types = _types(mem, "demo")
    assert types[:3] == ["session.created", "item.added", "item.added"]
    assert types.count("items.read") >= 8 and "item.updated" in types and "item.removed" in types
    assert mem.rebuild().state_hash() == mem.state_hash()

    again = ConversationMemory(description="You are a helpful assistant", memory=mem,
                               session_id="demo")  # fmt: skip
    assert again.retrieve_all() == everything[:1]  # the description is not added twice


def test_the_documented_message_addition_examples(mem):
    memory = ConversationMemory(memory=mem, session_id="tools")
    memory.add(role="user", content="Analyze the quarterly sales data")
    memory.add(role="assistant", content="I'll analyze the data for you.")
    call = {"id": "call_123", "type": "function",
            "function": {"name": "analyze_sales", "arguments": '{"quarter": "Q4"}'}}  # fmt: skip
    memory.add(role="assistant", content=None, tool_calls=[call])
    result = memory.add(role="tool", content='{"total_sales": 1500000, "growth": "15%"}',
                        tool_call_id="call_123", name="analyze_sales")  # fmt: skip
    assert memory.retrieve_all()[2:] == [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": '{"total_sales": 1500000, "growth": "15%"}',
         "tool_call_id": "call_123", "name": "analyze_sales"},
    ]  # fmt: skip
    assert memory.item_id(result) != result  # MARSYS's message id; the item has its own
    views = mem.session("tools", create=False).get("messages", [memory.item_id(result)],
                                                    reader="operator")  # fmt: skip
    assert views[0].group == "call:call_123"  # the result joined its call: never split

    # The shape MARSYS's Message.to_llm_dict gives: dict content as JSON, images as parts
    memory.add(role="tool", content={"rows": 3}, tool_call_id="call_123")
    assert memory.retrieve_recent(1) == [
        {"role": "tool", "content": '{"rows":3}', "tool_call_id": "call_123"}
    ]
    memory.add(role="user", content="What is in this chart?", images=["https://x.test/c.png"])
    assert memory.retrieve_recent(1)[0]["content"] == [
        {"type": "text", "text": "What is in this chart?"},
        {"type": "image_url", "image_url": {"url": "https://x.test/c.png"}},
    ]


def test_bad_input_is_refused_with_nothing_appended(mem):
    memory = ConversationMemory(memory=mem, session_id="bad")
    kept = memory.add(role="user", content="hello")
    size = mem.writer.size
    with pytest.raises(InvalidInput):
        memory.add(content="no role")
    with pytest.raises(InvalidInput):
        memory.add(message={"content": "no role"})
    with pytest.raises(InvalidInput):
        memory.add(role="user", content="x", tool_calls="not a list")
    with pytest.raises(InvalidInput):
        memory.update(kept, name="renamed")  # how a message was said stays as added
    with pytest.raises(ItemNotFound):
        memory.update("12345", content="x")
    with pytest.raises(ItemNotFound):
        memory.update("12345")
    memory.update(kept)  # nothing to change: no record
    with pytest.raises(InvalidInput):
        memory.retrieve_recent("2")
    assert mem.writer.size == size


def _long_task(memory, rounds: int) -> None:
    memory.add(role="user", content="Research the market and write the report.")
    for n in range(rounds):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "search", "arguments": "{}"},
        }
        memory.add(role="assistant", content=f"searching, step {n}", tool_calls=[call])
        memory.add(role="tool", content=f"page {n}\n" + "text " * 400, tool_call_id=f"c{n}",
                   name="search")  # fmt: skip


def test_the_documented_managed_memory_example_compacts_within_the_threshold(mem):
    config = ManagedMemoryConfig(threshold_tokens=2000, max_tool_message_tokens=100)
    memory = ManagedConversationMemory(config=config, memory=mem, session_id="managed")
    memory.add(role="user", content="Hello")  # usage is identical to ConversationMemory
    assert memory.get_messages() == [{"role": "user", "content": "Hello"}]
    _long_task(memory, rounds=20)
    assert len(memory.get_messages()) == 42  # as in MARSYS: an add only adds
    assert "section.compacted" not in _types(mem, "managed")
    assert asyncio.run(memory.compact_if_needed()) is True  # MARSYS's MemoryManager asks
    assert asyncio.run(memory.compact_if_needed()) is False  # under the threshold now

    messages = memory.get_messages()
    assert messages[0] == {"role": "user", "content": "Hello"}  # the original instruction stays
    summaries = [m for m in messages if m["content"].startswith("[Summary of")]
    assert len(summaries) == 1
    calls = {c["id"] for m in messages for c in m.get("tool_calls", ())}
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert calls == answered  # no call without its result, no result without its call
    assert messages[-1]["tool_call_id"] == "c19"
    section = mem.read(lambda s: s.sessions[("default", "managed")].sections["messages"])
    assert section.tokens <= config.threshold_tokens and section.evictions == 0
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_compact_for_payload_error_shrinks_what_the_model_is_sent(mem):
    config = ManagedMemoryConfig(threshold_tokens=100_000)  # never reached here
    seen = []

    def summarizer(messages, max_tokens):
        seen.append(len(messages))
        return f"{len(messages)} messages of searching"

    memory = ManagedConversationMemory(config=config, memory=mem, session_id="payload",
                                       summarizer=summarizer)  # fmt: skip
    _long_task(memory, rounds=10)
    before = len(orjson.dumps(memory.get_messages()))
    assert asyncio.run(memory.compact_for_payload_error()) is True  # MARSYS's call: smaller
    after = len(orjson.dumps(memory.get_messages()))
    assert after < before and seen
    assert "messages of searching" in orjson.dumps(memory.get_messages()).decode()
    fitted = asyncio.run(memory.compact_for_payload_error(target_bytes=after // 2))
    assert fitted is True and len(orjson.dumps(memory.get_messages())) <= after // 2
    size = mem.writer.size
    assert asyncio.run(memory.compact_for_payload_error(target_bytes=10)) is False
    assert mem.writer.size == size  # nothing fits 10 bytes: nothing appended
    assert "section.compacted" in _types(mem, "payload")
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_message_objects_with_marsys_attributes_are_taken_as_they_are(mem):
    class ToolCallMsg:  # the shape of MARSYS's, without depending on it
        def __init__(self, id_, name):
            self.id, self.name = id_, name

        def to_dict(self):
            return {"id": self.id, "type": "function",
                    "function": {"name": self.name, "arguments": "{}"}}  # fmt: skip

    class Message:
        def __init__(self, role, content=None, **fields):
            self.role, self.content, self.message_id = role, content, "uuid-ignored"
            self.__dict__.update(fields)

    memory = ConversationMemory(memory=mem, session_id="objects")
    memory.add(message=Message("assistant", tool_calls=[ToolCallMsg("call_9", "lookup")],
                               reasoning_details=[{"type": "thought", "signature": "abc"}]))  # fmt: skip
    memory.add(message=Message("tool", "found", tool_call_id="call_9", name="lookup"))
    assert memory.retrieve_all() == [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_9", "type": "function",
                         "function": {"name": "lookup", "arguments": "{}"}}],
         "reasoning_details": [{"type": "thought", "signature": "abc"}]},
        {"role": "tool", "content": "found", "tool_call_id": "call_9", "name": "lookup"},
    ]  # fmt: skip
    with pytest.raises(InvalidInput):
        memory.add(message=Message(None, "no role"))


# -- what MARSYS's own suites (their memory tests, in the "hybrid" mode) found, held here without
#    MARSYS installed (its own classes are stood in for by modules of the same names)


def test_constructed_as_marsys_constructs_it_with_an_in_process_memory():
    memory = ConversationMemory("You are a helpful assistant.")  # MARSYS: no ledgermem argument
    memory.add(role="user", content="Hello")
    assert memory.retrieve_all() == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello"},
    ]
    path = memory.session.memory.data.root
    assert path.exists()
    other = ManagedConversationMemory(ManagedMemoryConfig(threshold_tokens=100))
    assert other.get_messages() == []  # each its own conversation
    del memory
    gc.collect()
    assert not path.exists()  # closed and removed with the adapter


def test_the_config_has_marsys_fields_and_is_mutable():
    config = ManagedMemoryConfig(threshold_tokens=1000, image_token_estimate=1000)
    config.token_counter = len  # MARSYS's MemoryManager sets it on the config
    assert config.trigger_events == ["add", "get_messages"]
    assert config.cache_invalidation_events == ["add", "remove_by_id", "delete_memory"]
    assert config.active_context.mode == "compaction" and config.compaction_target_tokens == 600
    config.active_context.tool_truncation.max_tool_message_tokens = 50
    assert config.section_settings() == {"budget_tokens": None, "compact_at_tokens": None,
                                         "compact_keep_turns": 1, "compact_tool_chars": 200}  # fmt: skip
    config.max_tool_message_tokens = 10  # ours, when set, overrides
    assert config.section_settings()["compact_tool_chars"] == 40


def test_message_ids_are_the_messages_own(mem):
    memory = ConversationMemory(memory=mem, session_id="ids")
    made = memory.add(role="user", content="first")
    assert str(uuid.UUID(made)) == made  # a new UUID, as MARSYS's Message makes
    given = memory.add(message={"role": "assistant", "content": "second", "message_id": "m 2"})
    assert given == "m 2"
    assert memory.retrieve_by_id("m 2") == {"role": "assistant", "content": "second"}
    item = memory.item_id("m 2")
    assert item is not None and memory.retrieve_by_id(item) == memory.retrieve_by_id("m 2")
    memory.update("m 2", content="changed")
    assert memory.retrieve_by_id("m 2")["content"] == "changed"
    assert [m.message_id for m in memory.get_raw_messages()] == [made, "m 2"]
    assert memory.remove_by_id("m 2") is True and memory.remove_by_id("m 2") is False
    assert memory.item_id("m 2") is None and memory.retrieve_by_id("m 2") is None


def test_replace_and_delete_by_index(mem):
    memory = ConversationMemory(memory=mem, session_id="index")
    ids = [memory.add(role="user", content=f"m{n}") for n in range(3)]
    memory.replace_memory(1, role="assistant", content="replaced", message_id="r")
    assert [(m.message_id, m.role, m.content) for m in memory.memory] == [
        (ids[0], "user", "m0"), ("r", "assistant", "replaced"), (ids[2], "user", "m2")
    ]  # fmt: skip
    memory.replace_memory(0, message={"role": "user", "content": "new first"})
    assert memory.retrieve_all()[0] == {"role": "user", "content": "new first"}
    memory.delete_memory(2)
    assert [m["content"] for m in memory.retrieve_all()] == ["new first", "replaced"]
    size = mem.writer.size
    for bad in (2, -1):
        with pytest.raises(IndexError, match="out of range"):
            memory.delete_memory(bad)
        with pytest.raises(IndexError, match="out of range"):
            memory.replace_memory(bad, role="user", content="x")
    with pytest.raises(InvalidInput):
        memory.replace_memory(0)  # neither a message nor a role
    assert mem.writer.size == size
    assert "item.removed" in _types(mem, "index")


def test_reset_emits_the_reset_event_to_the_agents_bus(mem):
    class Bus:
        def __init__(self):
            self.events = []

        def emit_nowait(self, event):
            self.events.append(event)

    bus = Bus()
    memory = ConversationMemory("system prompt", memory=mem, session_id="reset")
    memory.add(role="user", content="hi")
    memory.reset_memory()  # no event context: nothing emitted, nothing fails
    memory.set_event_context("Researcher", bus, session_id="run-1")
    memory.set_event_context("Researcher")  # MARSYS's agent calls it each step: the bus stays
    memory.add(role="user", content="again")
    memory.reset_memory()
    assert [type(e) for e in bus.events] == [MemoryResetEvent]
    assert bus.events[0].agent_name == "Researcher"
    assert memory.retrieve_all() == [{"role": "system", "content": "system prompt"}]

    managed = ManagedConversationMemory(memory=mem, session_id="reset-managed")
    managed.set_event_context("Writer", bus)
    managed.add(role="user", content="hi")
    managed.reset_memory()  # MARSYS's managed memory keeps no system prompt
    assert managed.get_messages() == [] and bus.events[-1].agent_name == "Writer"


def test_managed_add_only_adds_and_reports_its_counts(mem):
    memory = ManagedConversationMemory(ManagedMemoryConfig(threshold_tokens=50), memory=mem,
                                       session_id="lazy")  # fmt: skip
    for n in range(10):
        memory.add(role="user", content=f"This is message number {n} with some content")
    assert len(memory.get_messages()) == 10  # past the threshold, all of them until compaction
    assert "section.compacted" not in _types(mem, "lazy")
    stats = memory.get_cache_stats()
    assert stats["raw_count"] == 10 and stats["estimated_total_tokens"] > 50
    assert len(memory.raw_messages) == 10 and memory.raw_messages[0].role == "user"


def test_refusals_are_marsys_message_errors_when_marsys_is_installed(mem, monkeypatch):
    memory = ConversationMemory(memory=mem, session_id="errors")
    with pytest.raises(MessageError):  # ours without MARSYS: also InvalidInput
        memory.add()
    with pytest.raises(ItemNotFound):
        memory.update("nonexistent_id", content="x")

    class TheirMessageError(Exception):
        def __init__(self, message, **context):
            super().__init__(message)
            self.context = context

    @dataclass
    class TheirResetEvent:
        agent_name: str

    stand_ins = {"marsys": {}, "marsys.agents": {},
                 "marsys.agents.exceptions": {"MessageError": TheirMessageError},
                 "marsys.agents.memory": {"MemoryResetEvent": TheirResetEvent}}  # fmt: skip
    for name, attrs in stand_ins.items():
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    for cached in (marsys_parts._seed_installed, marsys_parts._refusal):
        cached.cache_clear()
    try:
        size = mem.writer.size
        with pytest.raises(TheirMessageError) as refused:
            memory.add()
        assert isinstance(refused.value, InvalidInput)
        with pytest.raises(TheirMessageError) as missing:
            memory.update("nonexistent_id", content="x")
        assert isinstance(missing.value, ItemNotFound)
        with pytest.raises(TheirMessageError):
            memory.add(role="user", content="x", tool_calls="not a list")
        assert mem.writer.size == size
        events = []
        memory.set_event_context("A", types.SimpleNamespace(emit_nowait=events.append))
        memory.reset_memory()
        assert [type(e) for e in events] == [TheirResetEvent]
    finally:
        marsys_parts._seed_installed.cache_clear()
        marsys_parts._refusal.cache_clear()


def test_the_sliding_window_packs_the_newest_backward_and_keeps_tool_bundles(mem):
    """MARSYS's `sliding_window` mode: above the threshold, `get_messages` gives the newest
    messages within the target (less the headroom), a tool result never without its call, the
    newest alone when even it does not fit; below it, everything. The messages stay stored."""
    from sections.adapters.marsys import ActiveContextPolicy

    window = ActiveContextPolicy(mode="sliding_window")
    memory = ManagedConversationMemory(ManagedMemoryConfig(threshold_tokens=60,
                                                           active_context=window), memory=mem)  # fmt: skip
    memory.add(role="user", content="a short question")
    assert len(memory.get_messages()) == 1  # below the threshold: all of them
    for i in range(8):
        memory.add(role="user", content=f"message number {i} with some words in it")
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    memory.add(role="assistant", content="", tool_calls=[call])
    memory.add(role="tool", content="the result of the look", tool_call_id="c1")
    got = memory.get_messages()
    target = int(memory.config.compaction_target_tokens * 0.9)
    views = memory.session.get("messages", reader="operator")
    kept = views[-len(got) :]
    assert 2 <= len(got) < len(views) and sum(v.tokens for v in kept) <= target
    assert [m["role"] for m in got[-2:]] == ["assistant", "tool"]  # the bundle whole
    assert len(memory.get_raw_messages()) == 11  # nothing removed: a view, not a compaction
    tight = ManagedConversationMemory(ManagedMemoryConfig(threshold_tokens=5,
                                                          active_context=window), memory=mem,
                                      session_id="tight")  # fmt: skip
    tight.add(role="user", content="one message far longer than the whole window allows " * 3)
    tight.add(role="user", content="and the newest, also longer than the window " * 3)
    assert [m["content"] for m in tight.get_messages()] == [
        "and the newest, also longer than the window " * 3
    ]


def test_the_agents_compaction_model_writes_the_summary(mem):
    """With MARSYS's `runtime["compaction_model"]`, compaction asks that model (its `arun`)
    and its JSON answer becomes the summary: a user message opening with the requests' roll-up.
    A model that answers something else fails the compaction, which appends nothing."""
    answer = orjson.dumps({"user_request_summary": "ship the report", "summary": "drafted",
                           "salient_facts": ["due Friday"], "open_threads": []}).decode()  # fmt: skip

    class Model:
        def __init__(self, content: str) -> None:
            self.content, self.asked = content, []

        async def arun(self, **kwargs):
            self.asked.append(kwargs)
            return types.SimpleNamespace(content=self.content)

    def conversation(session_id: str) -> ManagedConversationMemory:
        memory = ManagedConversationMemory(ManagedMemoryConfig(threshold_tokens=50), memory=mem,
                                           session_id=session_id)  # fmt: skip
        for i in range(12):
            memory.add(role="user", content=f"request {i}: " + "detail " * 15)
            memory.add(role="assistant", content=f"answer {i}: " + "words " * 15)
        return memory

    memory, model = conversation("with-model"), Model(answer)
    assert asyncio.run(memory._run_compaction({"compaction_model": model})) is None
    assert model.asked and model.asked[0]["json_mode"] is True
    rollups = [m for m in memory.get_messages() if "[User Requests Summary]" in str(m["content"])]
    assert len(rollups) == 1 and rollups[0]["role"] == "user"
    assert "ship the report" in rollups[0]["content"] and "- due Friday" in rollups[0]["content"]
    bad = conversation("bad-model")
    before = len(_types(mem, "bad-model"))
    assert asyncio.run(bad.compact_if_needed({"compaction_model": Model("not json")})) is False
    assert "section.compacted" not in _types(mem, "bad-model")[before:]


class _PerMessage:
    """A MARSYS-shaped token counter (its `count_message`): a fixed count per message."""

    def __init__(self, each: int) -> None:
        self.each, self.seen = each, []

    def count_message(self, message: dict) -> int:
        self.seen.append(message)
        return self.each


def test_the_threshold_is_measured_by_the_token_counter(mem):
    """MARSYS measures `threshold_tokens` (and `_estimated_total_tokens`) with its token counter
    over its message dicts: the config's `token_counter`, else MARSYS's default. The adapter
    does too, so the same messages compact under a counter that puts them past the threshold and
    not under one that does not, whatever the section's own count. Each message is counted once
    (a content kept in the log is read back whole for it). The tail is MARSYS's: the last
    assistant round; the user turn before it is summarized, the first user message stays."""
    big = "a long pasted page " * 300  # past the inline limit: its content is read from the log

    def conversation(session_id: str, counter: _PerMessage) -> ManagedConversationMemory:
        config = ManagedMemoryConfig(threshold_tokens=500, token_counter=counter)
        memory = ManagedConversationMemory(config, memory=mem, session_id=session_id)
        memory.add(role="user", content=big)
        for i in range(15):
            memory.add(role="user", content=f"Old message {i} with padding " + "x " * 30)
        memory.add(role="user", content="RECENT_MESSAGE_ONE")
        memory.add(role="assistant", content="RECENT_MESSAGE_TWO")
        return memory

    low = conversation("low", _PerMessage(20))  # 18 messages: 360 of the counter's tokens
    section = mem.read(lambda s: s.sessions[("default", "low")].sections["messages"])
    assert section.tokens > 500  # past the threshold by the memory's own counter
    assert low._estimated_total_tokens == 360 == low.get_cache_stats()["estimated_total_tokens"]
    size = mem.writer.size
    assert asyncio.run(low.compact_if_needed()) is False and mem.writer.size == size
    assert len(low.token_counter.seen) == 18  # counted once each, across three estimates
    assert {"role": "user", "content": big} in low.token_counter.seen

    high = conversation("high", _PerMessage(40))  # 720: past it
    assert asyncio.run(high.compact_if_needed()) is True
    contents = [m["content"] for m in high.get_messages()]
    assert contents[0] == big and contents[-1] == "RECENT_MESSAGE_TWO"
    assert "RECENT_MESSAGE_ONE" not in contents  # summarized, as MARSYS's processor does
    assert high._estimated_total_tokens == 40 * len(contents)
    assert mem.rebuild().state_hash() == mem.state_hash()
