"""What JAF's own suites found against the JAF adapter (issue 29; docs/adapters/jaf.md, "Drop-in"),
held here without JAF (the peer run: the peers script `jaf.sh provider`).

- Results are JAF's own classes when JAF is installed: a stand-in `jaf` package (written below, as
  small as the names the adapter takes from JAF) plays the installed JAF, so a `Failure` is the
  one JAF's engine tests `isinstance` against, never a look-alike it would take for success.
- Message ids of a `str` subclass (JAF's `MessageId`, on every message JAF makes) are accepted,
  and come back as that subclass.
- Any string is a conversation id, and comes back exactly (sections/adapters/foreign_ids.py).
- The provider constructs as JAF's do, with no ledgermem argument: an in-process memory that
  nothing outlives; JAF's factory variables; Redis refused with a clear error (issue 31).
- `mark_regeneration_point` (JAF's regeneration calls it), `cleanup_old_conversations` and
  `get_analytics`; every write a record.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from datetime import UTC, datetime, timedelta

import pytest

from eventstore.file_sink import Durability
from sections.adapters import jaf as adapter
from sections.adapters import jaf_shapes
from sections.adapters.jaf import (
    InMemoryProvider,
    LedgerMemoryProvider,
    create_in_memory_provider,
    create_memory_provider_from_env,
)
from sections.runtime.memory import Memory

# A stand-in for an installed JAF: the names the adapter takes from `jaf.memory.types` and
# `jaf.core.types`, with JAF's field names and the traits that matter (errors that are not
# exceptions, message ids of a `str` subclass generated on every message).
STAND_IN = {
    "jaf/__init__.py": "",
    "jaf/core/__init__.py": "",
    "jaf/memory/__init__.py": "",
    "jaf/core/types.py": """
        import itertools
        from dataclasses import dataclass
        from typing import Any, Optional

        _n = itertools.count()

        class MessageId(str):
            pass

        @dataclass(frozen=True)
        class ToolCallFunction:
            name: str
            arguments: str

        @dataclass(frozen=True)
        class ToolCall:
            id: str
            type: str
            function: ToolCallFunction

        @dataclass(frozen=True)
        class Attachment:
            kind: str
            mime_type: Optional[str] = None
            name: Optional[str] = None
            url: Optional[str] = None
            data: Optional[str] = None
            format: Optional[str] = None
            use_litellm_format: Optional[bool] = None

        @dataclass(frozen=True)
        class MessageContentPart:
            type: str
            text: Optional[str] = None
            image_url: Optional[dict] = None
            file: Optional[dict] = None

        @dataclass(frozen=True)
        class Message:
            role: str
            content: Any
            attachments: Optional[list] = None
            tool_call_id: Optional[str] = None
            tool_calls: Optional[list] = None
            message_id: Optional[MessageId] = None

            def __post_init__(self):
                if self.message_id is None:
                    object.__setattr__(self, "message_id", MessageId(f"stand-in-{next(_n)}"))
    """,
    "jaf/memory/types.py": """
        from dataclasses import dataclass, field
        from typing import Any, Optional

        @dataclass(frozen=True)
        class Success:
            data: Any

        @dataclass(frozen=True)
        class Failure:
            error: Any

        class MemoryError:  # not an Exception, as JAF's
            def __init__(self, message, provider, cause=None):
                self.message, self.provider, self.cause = message, provider, cause

        class MemoryConnectionError(MemoryError):
            pass

        class MemoryNotFoundError(MemoryError):
            def __init__(self, message, provider, conversation_id, cause=None):
                super().__init__(message, provider, cause)
                self.conversation_id = conversation_id

        class MemoryStorageError(MemoryError):
            def __init__(self, message, provider, operation, cause=None):
                super().__init__(message, provider, cause)
                self.operation = operation

        @dataclass(frozen=True)
        class ConversationMemory:
            conversation_id: str
            user_id: Optional[str] = None
            messages: Any = ()
            metadata: dict = field(default_factory=dict)

        @dataclass(frozen=True)
        class MemoryQuery:
            conversation_id: Optional[str] = None
            user_id: Optional[str] = None
            trace_id: Optional[str] = None
            limit: Optional[int] = None
            offset: Optional[int] = None
            since: Any = None
            until: Any = None
    """,
}


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The stand-in JAF on sys.path, the adapter's shapes decided again; undone after."""
    for path, text in STAND_IN.items():
        (tmp_path / "site" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / path).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    jaf_shapes.forget_shapes()
    import jaf.core.types as core
    import jaf.memory.types as memory

    yield memory, core
    for name in [n for n in sys.modules if n == "jaf" or n.startswith("jaf.")]:
        del sys.modules[name]
    jaf_shapes.forget_shapes()


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


def _types(mem: Memory, session: str) -> list[str]:
    return [r.type for r in mem.reader.records() if r.session == session]


def test_results_are_jafs_own_classes_when_jaf_is_installed(stand_in, mem):
    memory, core = stand_in
    assert jaf_shapes.shapes().origin == "jaf"
    assert adapter.Success is memory.Success and adapter.Failure is memory.Failure
    provider = LedgerMemoryProvider(mem)
    said = [core.Message(role="user", content="hi"), core.Message(role="assistant", content="yo")]
    assert type(said[0].message_id) is core.MessageId  # as every message JAF makes

    stored = run(provider.store_messages("chat", said, {"user_id": "ana"}))
    assert type(stored) is memory.Success  # JAF's engine logs "Stored" only on its Success
    assert _types(mem, "chat")[:2] == ["session.created", "item.added"]
    conversation = run(provider.get_conversation("chat")).data
    assert type(conversation) is memory.ConversationMemory
    assert list(conversation.messages) == said  # JAF's Message, equal to the ones given
    assert type(conversation.messages[0].message_id) is core.MessageId

    refused = run(provider.store_messages("chat", [{"role": "robot", "content": "x"}]))
    assert type(refused) is memory.Failure  # JAF's engine sees the failure: no silent loss
    assert type(refused.error) is memory.MemoryStorageError
    missing = run(provider.append_messages("none", said))
    assert type(missing.error) is memory.MemoryNotFoundError
    assert missing.error.conversation_id == "none"
    found = run(provider.find_conversations(memory.MemoryQuery(user_id="ana"))).data
    assert [c.conversation_id for c in found] == ["chat"]
    bad = run(create_memory_provider_from_env(env={"JAF_MEMORY_TYPE": "redis"}))
    assert type(bad) is memory.Failure and type(bad.error) is memory.MemoryConnectionError


def test_without_jaf_the_results_are_the_adapters_own(mem):
    jaf_shapes.forget_shapes()
    if "jaf" in sys.modules or __import__("importlib.util").util.find_spec("jaf"):
        pytest.skip("JAF is installed here")
    assert jaf_shapes.shapes() is jaf_shapes.OURS
    assert adapter.Success is jaf_shapes.Success and adapter.Message is jaf_shapes.Message
    answer = run(LedgerMemoryProvider(mem).store_messages("c", [adapter.Message("user", "x")]))
    assert type(answer) is jaf_shapes.Success


class Branded(str):
    """A `str` subclass, as JAF's MessageId, TraceId."""


def test_ids_of_a_str_subclass_are_accepted_and_kept(mem):
    provider = LedgerMemoryProvider(mem)
    message = adapter.Message("user", "hello", message_id=Branded("m-1"))
    answer = run(provider.store_messages(Branded("c 1"), [message], {"user_id": Branded("ana")}))
    assert isinstance(answer, adapter.Success), answer
    got = run(provider.get_conversation("c 1")).data
    assert got.messages[0].message_id == "m-1" and got.user_id == "ana"
    assert run(provider.truncate_conversation_after("c 1", Branded("m-1"))).data == 1


IDS = ["chat 1", "Zoë", "", "+plus", "a/b:c@d", "_tenant-like", "x" * 129, "é " * 200, "\n\t"]


def test_any_conversation_id_works_and_comes_back_exactly(mem, tmp_path):
    provider = LedgerMemoryProvider(mem)
    for n, conversation_id in enumerate(IDS):
        said = [adapter.Message("user", f"message {n}")]
        assert isinstance(run(provider.store_messages(conversation_id, said)), adapter.Success)
        got = run(provider.get_conversation(conversation_id)).data
        assert got.conversation_id == conversation_id and got.messages[0].content == f"message {n}"
        assert isinstance(run(provider.append_messages(conversation_id, said)), adapter.Success)
    assert sorted(c.conversation_id for c in run(provider.find_conversations()).data) == sorted(IDS)
    long_id = "é " * 200  # hashed: its id kept in the creation metadata, never shown as metadata
    assert "seed_id" not in run(provider.get_conversation(long_id)).data.metadata
    one = run(provider.find_conversations(conversation_id="chat 1")).data
    assert [c.conversation_id for c in one] == ["chat 1"]
    assert run(provider.delete_conversation("chat 1")).data is True
    mem.close()
    with Memory.open(tmp_path / "data") as reopened:  # the ids replay
        found = run(LedgerMemoryProvider(reopened).find_conversations()).data
        assert sorted(c.conversation_id for c in found) == sorted(i for i in IDS if i != "chat 1")


def test_jafs_constructors_give_an_in_process_memory_nothing_outlives():
    class Config:  # JAF's InMemoryConfig
        max_conversations = 2
        max_messages_per_conversation = 3

    for provider in (InMemoryProvider(Config()), create_in_memory_provider(Config())):
        root = provider.memory.data.root
        for n in range(3):
            said = [adapter.Message("user", f"{n}.{k}") for k in range(5)]
            run(provider.store_messages(f"c{n}", said))
        assert [c.conversation_id for c in run(provider.find_conversations()).data] == ["c2", "c1"]
        assert [m.content for m in run(provider.get_conversation("c2")).data.messages] == [
            "2.2", "2.3", "2.4"]  # fmt: skip
        assert "session.created" in _types(provider.memory, "c0")  # every call a record
        assert isinstance(run(provider.close()), adapter.Success)
        assert not os.path.exists(root)
    default = create_in_memory_provider()  # JAF's defaults
    assert default.max_messages == 1000 and default.memory.config.max_sessions == 1000
    root = default.memory.data.root
    del default  # the garbage collector removes it too
    __import__("gc").collect()
    assert not os.path.exists(root)


def test_the_factory_follows_jafs_variables(tmp_path):
    provider = run(create_memory_provider_from_env(env={})).data  # JAF's default: in-process
    assert isinstance(provider, InMemoryProvider) and provider.store == "in-process"
    assert provider.max_messages == 1000
    run(provider.close())
    bounded = run(create_memory_provider_from_env(env={"JAF_MEMORY_MAX_MESSAGES": "7"})).data
    assert bounded.max_messages == 7
    run(bounded.close())
    durable = {"JAF_MEMORY_TYPE": "memory", "JAF_LEDGERMEM_DATA": str(tmp_path / "d")}
    provider = run(create_memory_provider_from_env(env=durable)).data
    assert provider.store == "file"
    run(provider.close())
    # redis is a shared store (issue 31): like postgres it needs the data directory holding
    # the store's key, and says so.
    redis = run(create_memory_provider_from_env(env={"JAF_MEMORY_TYPE": "redis"}))
    assert isinstance(redis, adapter.Failure) and "JAF_LEDGERMEM_DATA" in redis.error.message
    with_clients = run(create_memory_provider_from_env({"redis": object()}, env={}))
    assert isinstance(with_clients, adapter.Success)  # JAF's external_clients: not used
    run(with_clients.data.close())


def test_regeneration_points_truncation_and_until(mem):
    provider = LedgerMemoryProvider(mem)
    said = [adapter.Message("user", "q"), adapter.Message("assistant", "a1")]
    run(provider.store_messages("r", said))
    answer = run(
        provider.mark_regeneration_point("r", said[1].message_id, {"regeneration_id": "g1"})
    )
    assert isinstance(answer, adapter.Success)
    meta = run(provider.get_conversation("r")).data.metadata
    assert meta["regeneration_count"] == 1 and meta["last_regeneration"]["regeneration_id"] == "g1"
    assert meta["regeneration_points"][0]["message_id"] == said[1].message_id
    records = [r for r in mem.reader.records() if r.session == "r" and r.type == "item.added"]
    assert records[-1].payload["items"][0]["kind"] == "conversation.regeneration"
    until = run(provider.get_conversation_until_message("r", said[1].message_id)).data
    assert until.messages == (said[0],) and until.metadata["truncated_for_regeneration"] is True
    assert until.metadata["original_message_count"] == 2
    assert run(provider.truncate_conversation_after("r", said[1].message_id)).data == 1
    meta = run(provider.get_conversation("r")).data.metadata
    assert meta["regeneration_truncated"] is True and meta["messages_removed"] == 1
    missing = run(provider.mark_regeneration_point("none", "m", {}))
    assert isinstance(missing.error, adapter.MemoryNotFoundError)
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_cleanup_old_conversations_and_analytics(mem):
    provider = LedgerMemoryProvider(mem)
    run(provider.store_messages("old", [adapter.Message("user", "x")], {"user_id": "ana"}))
    cutoff = datetime.now(UTC)
    run(provider.store_messages("new", [adapter.Message("user", "y"),
                                        adapter.Message("assistant", "z")], {"user_id": "bo"}))  # fmt: skip
    analytics = run(provider.get_analytics()).data
    assert analytics["total_conversations"] == 2 and analytics["total_messages"] == 3
    assert analytics["messages_by_role"]["assistant"] == 1
    assert analytics["conversations_by_user"] == {"ana": 1, "bo": 1}
    assert analytics["average_messages_per_conversation"] == 1.5
    assert run(provider.get_analytics(since=cutoff)).data["total_conversations"] == 1
    assert run(provider.cleanup_old_conversations(cutoff)).data == 1
    assert "session.deleted" in _types(mem, "old")
    assert run(provider.get_conversation("old")).data is None
    assert run(provider.cleanup_old_conversations(timedelta(days=1))).data == 0
    assert isinstance(run(provider.cleanup_old_conversations("soon")), adapter.Failure)
