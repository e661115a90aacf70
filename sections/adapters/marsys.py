"""MARSYS's conversation memories over a ledgermem session (docs/adapters/marsys.md).

`ConversationMemory` and `ManagedConversationMemory` keep MARSYS's constructors, method names,
arguments and return shapes (message dicts in LLM API format, as MARSYS's `Message.to_llm_dict`
makes them; a message's own `message_id`), on one section of one session (`messages` by default).
Constructed as MARSYS constructs them, with no ledgermem argument, they keep the conversation in
an in-process memory of their own (a log in a temporary directory, removed when the adapter goes);
`memory=` hands them a durable `Memory`. Every call is a ledgermem command: an add is an
`item.added` record, a read leaves an `items.read` record, and the managed variant compacts
through the section's compaction settings (docs/compaction.md) when MARSYS asks it to, its
summaries kept in the log. Nothing here holds messages of its own: two adapters on the same
session see the same messages, and a reopened memory gives them back.

MARSYS is not a dependency. When it is installed, what MARSYS code expects is MARSYS's own: the
`Message` objects `get_raw_messages` gives, the `MemoryResetEvent` a reset emits, and the
refusals (a `MessageError` that is also ledgermem's `InvalidInput` or `ItemNotFound`). Without
it, the same names are this module's. `add(message=)` takes MARSYS's `Message`, a dict or any
object with its attributes (role, content, name, tool_calls, ...); tool calls may be dicts or
objects with `to_dict()`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eventstore.errors import InvalidInput
from sections.adapters.marsys_compaction import model_summarizer
from sections.adapters.marsys_messages import (
    ID_KEY,
    MemoryResetEvent,
    MessageError,
    MessageNotFound,
    StoredMessage,
    TokenEstimate,
    _default_memory,
    _message,
    _message_fields,
    _new_message_id,
    _newest_within,
    _not_found,
    _plain,
    _refuse,
    _seed,
    _view_fields,
    llm_dict,
    section_stats,
)
from sections.errors import CannotCompact, SummarizerFailed
from sections.model.commands import get_section, get_session
from sections.model.compaction import Summarizer
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session

STRATEGIES = "marsys.agents.memory_strategies"
UPDATABLE = ("role", "content")  # what an update may change in ledgermem's item model


__all__ = [
    "ActiveContextPolicy",
    "ConversationMemory",
    "ManagedConversationMemory",
    "ManagedMemoryConfig",
    "MemoryResetEvent",
    "MessageError",
    "MessageNotFound",
    "StoredMessage",
    "llm_dict",
]


class ConversationMemory:
    """MARSYS's `ConversationMemory`: the conversation as a list of messages, here the items of
    one section of a ledgermem session. `description` becomes the system message the session
    starts with (only when the session is new: reopening does not add it twice). Without
    `memory=`, an in-process memory of its own (see `_default_memory`)."""

    memory_type = "conversation_history"

    def __init__(
        self,
        description: str | None = None,
        *,
        memory: Memory | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        section: str = "messages",
        sections: dict[str, dict] | None = None,
    ) -> None:
        self._agent_name: str | None = None
        self._event_bus: Any = None
        self._session_id: str | None = None
        memory = memory if memory is not None else _default_memory(self)
        # The token counter's vocabulary (~0.3 s, once per process) loads here, when MARSYS
        # builds an agent, not inside its first add: MARSYS times parallel branches from it.
        warm = getattr(memory.counter, "warm", None)
        if callable(warm):
            warm()
        session_id = session_id or uuid.uuid4().hex
        _, created = memory.get_or_create(session_id, tenant=tenant, sections=sections)
        self.session: Session = memory.session(session_id, tenant=tenant, create=False)
        self.section = section
        if description and created:
            self.add(role="system", content=description)

    # -- MARSYS's event context

    def set_event_context(
        self, agent_name: str, event_bus: Any = None, session_id: str | None = None
    ) -> None:
        """Where reset (and compaction) events go: MARSYS's agent calls this each step. As in
        MARSYS, a bus or session id left out keeps the one set before."""
        self._agent_name = agent_name
        if event_bus is not None:
            self._event_bus = event_bus
        if session_id is not None:
            self._session_id = session_id

    def _emit_reset_event(self) -> None:
        if self._event_bus is not None and self._agent_name:
            event = _seed("marsys.agents.memory", "MemoryResetEvent") or MemoryResetEvent
            self._event_bus.emit_nowait(event(agent_name=self._agent_name))

    def _emit_compaction_event(self, **fields: Any) -> None:
        if self._event_bus is None or not self._session_id:
            return
        event = _seed("marsys.coordination.status.events", "CompactionEvent")
        if event is not None:
            self._event_bus.emit_nowait(event(session_id=self._session_id,
                                              agent_name=self._agent_name or "unknown",
                                              **fields))  # fmt: skip

    # -- writes

    def add(
        self,
        message: object | None = None,
        *,
        role: str | None = None,
        content: object = None,
        name: str | None = None,
        tool_calls: list | None = None,
        agent_calls: list | None = None,
        images: list[str] | None = None,
        tool_call_id: str | None = None,
        reasoning_details: list | None = None,
        structured_data: dict | None = None,
    ) -> str:
        """Add a message (a `message` object or dict, or its fields); returns its id: the
        message's own `message_id` (a new UUID for one given by its fields, as MARSYS makes it).
        A message's `structured_data` (a dict) is kept, given back by ledgermem's reads
        (`Session.get`) as it is, and rendered as JSON text after the content."""
        if message is not None:
            fields, message_id = _message_fields(message)
        elif role is not None:
            fields = {"role": role, "content": content, "name": name, "tool_calls": tool_calls,
                      "agent_calls": agent_calls, "images": images, "tool_call_id": tool_call_id,
                      "reasoning_details": reasoning_details,
                      "structured_data": structured_data}  # fmt: skip
            message_id = _new_message_id(fields)
        else:
            raise _refuse("Either a Message object or role must be provided to add.")
        self._append(fields, message_id)
        return message_id

    def _append(self, fields: dict, message_id: str) -> ItemView:
        item = {k: v for k, v in fields.items() if v is not None or k == "content"}
        for key in ("tool_calls", "agent_calls"):
            if isinstance(item.get(key), list):
                item[key] = [_plain(call) for call in item[key]]
        try:
            return self.session.add(
                self.section, item.pop("content"), metadata={ID_KEY: message_id}, **item
            )
        except InvalidInput as refused:
            if isinstance(refused, MessageError):
                raise
            raise _refuse(str(refused)) from refused

    def update(self, message_id: str, *, role: str | None = None, content: object = None,
               **unchangeable: object) -> None:  # fmt: skip
        """Change a message's role or content (MessageError, also ItemNotFound, for an unknown
        id). ledgermem keeps how a message was said (name, tool calls, images) as it was added:
        asking to change those is refused (MessageError, also InvalidInput), nothing appended."""
        given = {k: v for k, v in unchangeable.items() if v is not None}
        if given:
            raise _refuse(
                f"update changes {' and '.join(UPDATABLE)} only; {sorted(given)} stay as added "
                "(remove the message and add a new one)"
            )
        item = self.item_id(message_id)
        if item is None:
            raise _not_found(f"Message with ID {message_id!r} not found in memory.")
        changes: dict[str, Any] = {
            k: v for k, v in (("role", role), ("content", content)) if v is not None
        }
        if changes:  # nothing to change: only whether it is there (no content is read)
            self.session.update(self.section, item, **changes)

    def replace_memory(
        self,
        idx: int,
        message: object | None = None,
        *,
        role: str | None = None,
        content: object = None,
        message_id: str | None = None,
        name: str | None = None,
        tool_calls: list | None = None,
        agent_calls: list | None = None,
        images: list[str] | None = None,
    ) -> None:
        """Replace the message at index `idx` (IndexError when there is none): the message
        there is removed and the new one takes its place, in one record each (the log keeps
        both). The new message keeps `message_id` when given, else gets a new one."""
        ids = self._ids()
        if type(idx) is not int or not 0 <= idx < len(ids):
            raise IndexError("Memory index out of range.")
        if message is not None:
            fields, new_id = _message_fields(message)
        elif role is not None:
            fields = {"role": role, "content": content, "name": name, "tool_calls": tool_calls,
                      "agent_calls": agent_calls, "images": images}  # fmt: skip
            new_id = message_id or _new_message_id(fields)
        else:
            raise _refuse("Either a Message object or role must be provided to replace_memory.")
        later = [item for item, _ in ids[idx + 1 :]]
        kept = self.session.get(self.section, later, reader="operator") if later else []
        self.session.remove(self.section, [item for item, _ in ids[idx:]])
        self._append(fields, new_id)
        for view in kept:  # the messages after it, re-added in their order and with their ids
            self._append(_view_fields(view), view.metadata.get(ID_KEY, view.id))

    def delete_memory(self, idx: int) -> None:
        """Remove the message at index `idx` (IndexError when there is none)."""
        ids = self._ids()
        if type(idx) is not int or not 0 <= idx < len(ids):
            raise IndexError("Memory index out of range.")
        self.session.remove(self.section, [ids[idx][0]])

    def remove_by_id(self, message_id: str) -> bool:
        """Remove a message; False when there is none with this id."""
        item = self.item_id(message_id)
        if item is None:
            return False
        self.session.remove(self.section, [item])
        return True

    def reset_memory(self) -> None:
        """Remove every message but the system prompt (the first message, when it is one), and
        emit MARSYS's `MemoryResetEvent` when an event context is set."""
        views = self.session.get(self.section, reader="operator")
        keep = views[0].id if views and views[0].role == "system" else None
        self._remove_all(views, keep)
        self._emit_reset_event()

    def _remove_all(self, views: list[ItemView], keep: str | None = None) -> None:
        gone = [v.id for v in views if v.id != keep]
        if gone:
            self.session.remove(self.section, gone)

    # -- reads (each leaves an `items.read` record)

    def retrieve_all(self) -> list[dict]:
        return [llm_dict(v) for v in self.session.get(self.section)]

    def retrieve_recent(self, n: int = 1) -> list[dict]:
        if type(n) is not int:
            raise _refuse("n must be an integer")
        return [llm_dict(v) for v in self.session.get(self.section, recent=n)] if n > 0 else []

    def retrieve_by_id(self, message_id: str) -> dict | None:
        item = self.item_id(message_id)
        if item is None:
            return None
        (view,) = self.session.get(self.section, [item])
        return llm_dict(view)

    def retrieve_by_role(self, role: str, n: int | None = None) -> list[dict]:
        recent = n if n else None  # MARSYS: n=0 or None means all of them
        return [llm_dict(v) for v in self.session.get(self.section, role=role, recent=recent)]

    def get_messages(self) -> list[dict]:
        """The messages for the model: all of them, as `retrieve_all` gives them."""
        return self.retrieve_all()

    def get_raw_messages(self) -> list:
        """The messages as message objects (MARSYS's `Message` when installed, else
        `StoredMessage`), with their ids: copies, changing them changes nothing stored."""
        return [_message(v) for v in self.session.get(self.section, reader="operator")]

    @property
    def memory(self) -> list:
        """MARSYS's message list, read-only: `get_raw_messages()` (a snapshot, read from the
        log each time; change messages through the methods)."""
        return self.get_raw_messages()

    @property
    def raw_messages(self) -> list:
        """MARSYS's managed memory's name for the same read-only snapshot."""
        return self.get_raw_messages()

    # -- where a message is (read under the memory's lock, no record)

    def _ids(self) -> list[tuple[str, str]]:
        """(item id, message id) of each message, in order."""
        tenant, sid, name = self.session.tenant, self.session.id, self.section

        def ids(state: Any) -> list[tuple[str, str]]:
            items = get_section(get_session(state, tenant, sid), name).items.values()
            return [(i.id, i.metadata.get(ID_KEY, i.id)) for i in items]

        return self.session.memory.read(ids)

    def item_id(self, message_id: object) -> str | None:
        """The ledgermem item id of a message id (for `memory.session` calls; the item id also
        names the message); None when unknown."""
        if not isinstance(message_id, str):
            return None
        ids = self._ids()
        found = [item for item, mid in ids if mid == message_id]
        if found:
            return found[0]
        return message_id if any(item == message_id for item, _ in ids) else None


def _policy_value(policy: Any, part: str, name: str, default: Any) -> Any:
    return getattr(getattr(policy, part, None), name, default)


def _default_policy() -> Any:
    theirs = _seed("marsys.agents.memory", "ActiveContextPolicyConfig")
    return theirs() if theirs is not None else ActiveContextPolicy()


@dataclass
class ActiveContextPolicy:
    """The part of MARSYS's `ActiveContextPolicyConfig` compaction uses here (MARSYS's own
    class is the default when installed, and either is accepted): whether and how compaction
    runs, the share of the threshold it aims to free, and the settings of its tool-output cut
    (`tool_truncation`) and summary (`summarization`), as attribute namespaces."""

    enabled: bool = True
    mode: str = "compaction"  # or "sliding_window": `get_messages` packs the newest backward
    min_reduction_ratio: float = 0.4
    tool_truncation: Any = field(
        default_factory=lambda: _Settings(max_tool_message_tokens=1200, grace_recent_messages=1)
    )
    summarization: Any = field(default_factory=lambda: _Settings(grace_recent_messages=1))


class _Settings(dict):
    """Settings read as attributes (`policy.tool_truncation.max_tool_message_tokens`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass
class ManagedMemoryConfig:
    """MARSYS's `ManagedMemoryConfig` (its fields, mutable as MARSYS's `MemoryManager` needs):
    when to compact (`threshold_tokens`), how far (`compaction_target_tokens`: the threshold
    less `active_context.min_reduction_ratio`), how many recent assistant rounds stay whole
    (`active_context.summarization.grace_recent_messages`) and how long a tool output may stay
    (`active_context.tool_truncation.max_tool_message_tokens`, cut at about four characters a
    token). `grace_recent_messages` and `max_tool_message_tokens`, when set, override those two.
    `image_token_estimate`, `trigger_events`, `cache_invalidation_events` and `token_counter`
    are kept as given: ledgermem counts tokens with the memory's counter and has no cache."""

    threshold_tokens: int = 150_000
    image_token_estimate: int = 800
    trigger_events: list[str] = field(default_factory=lambda: ["add", "get_messages"])
    cache_invalidation_events: list[str] = field(
        default_factory=lambda: ["add", "remove_by_id", "delete_memory"]
    )
    token_counter: Callable | None = None
    active_context: Any = field(default_factory=_default_policy)
    grace_recent_messages: int | None = None
    max_tool_message_tokens: int | None = None

    @property
    def compaction_target_tokens(self) -> int:
        ratio = getattr(self.active_context, "min_reduction_ratio", 0.4)
        return int(self.threshold_tokens * (1 - ratio))

    def _grace(self) -> int:
        if self.grace_recent_messages is not None:
            return self.grace_recent_messages
        return int(_policy_value(self.active_context, "summarization", "grace_recent_messages", 1))

    def _tool_tokens(self) -> int:
        if self.max_tool_message_tokens is not None:
            return self.max_tool_message_tokens
        policy = self.active_context
        return int(_policy_value(policy, "tool_truncation", "max_tool_message_tokens", 1200))

    def section_settings(self) -> dict:
        """The section settings they become (docs/compaction.md): compaction when MARSYS asks
        for it (`compact_if_needed`), not inside an add; no budget evicts on top."""
        return {
            "budget_tokens": None,
            "compact_at_tokens": None,
            "compact_keep_turns": max(self._grace(), 1),
            "compact_tool_chars": self._tool_tokens() * 4,
        }


class ManagedConversationMemory(ConversationMemory):
    """MARSYS's `ManagedConversationMemory`: a conversation that compacts when asked. As in
    MARSYS, an add only adds (every message stays until compaction runs); `compact_if_needed`
    (MARSYS's `MemoryManager` calls it as `_run_compaction`) compacts once the messages pass
    `threshold_tokens`: long tool outputs cut, then the messages before the protected tail
    (the first user message, the last `grace_recent_messages` rounds) replaced by one summary,
    in one `section.compacted` record, written by the adapter's `summarizer` (the memory's when
    not given: a deterministic digest unless `Memory.open(summarizer=)` gives another).
    `summarizer` is (messages, max_tokens) -> str. MARSYS's strategies are accepted and kept as
    attributes; ledgermem's compaction does what they would. As in MARSYS, `description` is
    not stored: the agent sends its own system prompt."""

    memory_type = "managed_conversation"

    def __init__(
        self,
        config: ManagedMemoryConfig | None = None,
        trigger_strategy: object = None,
        process_strategy: object = None,
        retrieval_strategy: object = None,
        description: str | None = None,
        *,
        memory: Memory | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        section: str = "messages",
        summarizer: Summarizer | None = None,
    ) -> None:
        self.config = config or ManagedMemoryConfig()
        # MARSYS's own defaults when it is installed (kept as attributes, as MARSYS's code
        # reads them; ledgermem's compaction and window do what they would), else None.
        self.trigger_strategy = trigger_strategy or _seed_new(STRATEGIES, "SimpleThresholdTrigger")
        self.process_strategy = process_strategy or _seed_new(STRATEGIES, "NoOpProcessStrategy")
        self.retrieval_strategy = retrieval_strategy or _seed_new(
            STRATEGIES, "BackwardPackingRetrieval"
        )
        self.token_counter = getattr(self.config, "token_counter", None) or _seed_new(
            "marsys.utils.tokens", "DefaultTokenCounter",
            image_token_estimate=getattr(self.config, "image_token_estimate", 800),
        )  # fmt: skip
        self.metadata: dict[str, Any] = {}
        self._estimate = TokenEstimate()  # threshold_tokens is in the token counter's units
        settings = {section: _section_settings(self.config)}
        super().__init__(None, memory=memory, session_id=session_id, tenant=tenant,
                         section=section, sections=settings)  # fmt: skip
        self.summarizer = summarizer

    def reset_memory(self) -> None:
        """Remove every message (MARSYS's managed memory keeps no system prompt), and emit
        MARSYS's `MemoryResetEvent` when an event context is set."""
        self._remove_all(self.session.get(self.section, reader="operator"))
        self.metadata.clear()
        self._emit_reset_event()

    def get_messages(self) -> list[dict]:
        """The messages for the model. In MARSYS's `sliding_window` mode, once they pass
        `threshold_tokens`: the newest that fit `compaction_target_tokens` less the window's
        headroom, packed backward, a tool result never without its call (the newest alone when
        even it does not fit). Otherwise, as in MARSYS's compaction mode, all of them."""
        views = self.session.get(self.section)
        policy = self.config.active_context
        windowed = (
            getattr(policy, "enabled", True) and getattr(policy, "mode", "") == "sliding_window"
        )
        counted = self._estimate.of(self.token_counter, views, lambda view: view) if windowed else 0
        total = sum(v.tokens for v in views) if counted is None else counted
        if windowed and total > self.config.threshold_tokens:
            headroom = float(_policy_value(policy, "sliding_window", "headroom_percent", 0.1))
            budget = int(self.config.compaction_target_tokens * (1 - headroom))
            views = _newest_within(
                views, budget, None if counted is None else self._estimate.cost_of
            )
        return [llm_dict(v) for v in views]

    @property
    def _estimated_total_tokens(self) -> int:
        """MARSYS's running token estimate, which its code reads (`_section_stats`)."""
        return self._section_stats()["tokens"]

    def get_cache_stats(self) -> dict:
        """MARSYS's cache statistics. Nothing is cached here (every read is the log's state):
        `cache_valid` is False and `cached_count` 0; the counts are the section's."""
        stats = self._section_stats()
        return {"cache_valid": False, "cached_count": 0, "raw_count": stats["items"],
                "estimated_total_tokens": stats["tokens"], "messages_since_last_retrieval": 0,
                "tokens_since_last_retrieval": 0}  # fmt: skip

    def _section_stats(self) -> dict:
        return section_stats(self.session, self.section, self.token_counter, self._estimate)

    async def compact_if_needed(self, runtime: dict | None = None) -> bool:
        """Compact when the messages pass `threshold_tokens` (and `active_context` is enabled
        in its `compaction` mode), toward `compaction_target_tokens`. True when a
        `section.compacted` record was appended. With MARSYS's `runtime["compaction_model"]`,
        that model writes the summary (sections/adapters/marsys_compaction.py)."""
        policy = self.config.active_context
        if not getattr(policy, "enabled", True) or getattr(policy, "mode", "compaction") not in (
            "compaction",
            "destructive_compaction",
        ):
            return False
        before = self._section_stats()
        if before["tokens"] <= self.config.threshold_tokens:
            return False
        self._emit_compaction_event(status="started", pre_tokens=before["tokens"],
                                    pre_messages=before["items"])  # fmt: skip
        started = time.time()
        model = (runtime or {}).get("compaction_model")
        summarizer = self.summarizer
        if model is not None and hasattr(model, "arun"):  # the agent's model, as MARSYS does
            limit = _policy_value(policy, "summarization", "output_max_tokens", 6000)
            summarizer = model_summarizer(model, int(limit))
        size = await self._compact(2**62, summarizer)
        share = max(self.config.compaction_target_tokens, 1) / max(before["tokens"], 1)
        target = int(size["bytes_before"] * min(share, 1.0)) if size else 0
        done = await self._compact(target, summarizer) if target else None
        if done is None or not done["compacted"]:
            done = await self._compact(size["bytes_before"] - 1, summarizer) if size else None
        after = self._section_stats()
        compacted = bool(done and done["compacted"])
        self._emit_compaction_event(
            status="completed" if compacted else "failed", pre_tokens=before["tokens"],
            post_tokens=after["tokens"], pre_messages=before["items"],
            post_messages=after["items"], duration=time.time() - started,
        )  # fmt: skip
        if compacted:
            self.metadata["last_compaction"] = {
                "timestamp": time.time(),
                "pre_compaction_tokens": before["tokens"],
                "pre_compaction_messages": before["items"],
                "post_compaction_tokens": after["tokens"],
                "post_compaction_messages": after["items"],
            }
        return compacted

    async def _run_compaction(self, runtime: dict | None = None) -> None:
        """The name MARSYS's `MemoryManager.compact_if_needed` calls."""
        await self.compact_if_needed(runtime)

    async def _compact(self, target_bytes: int, summarizer: Any = None) -> dict | None:
        try:
            return await self.session.compact_for_payload_error_async(
                target_bytes, section=self.section, budget=2**31, sections=[self.section],
                summarizer=summarizer or self.summarizer,
            )  # fmt: skip
        except (CannotCompact, SummarizerFailed):
            return None

    async def compact_for_payload_error(
        self, runtime: dict | None = None, *, target_bytes: int | None = None
    ) -> bool:
        """After a payload-too-large: compact until the messages (as context renders them)
        fit `target_bytes`, or, as MARSYS does without one, until they are smaller than now.
        True when a `section.compacted` record was appended; False when no compaction helps
        or the summarizer failed (nothing appended). `runtime` is MARSYS's and unused."""
        if target_bytes is None:
            size = await self._compact(2**62)
            if size is None:
                return False
            target_bytes = size["bytes_before"] - 1
        outcome = await self._compact(target_bytes)
        return bool(outcome and outcome["compacted"])


def _section_settings(config: Any) -> dict:
    """A config's section settings: ours, or MARSYS's own `ManagedMemoryConfig` read the same
    way."""
    if isinstance(config, ManagedMemoryConfig):
        return config.section_settings()
    mirror = ManagedMemoryConfig(threshold_tokens=config.threshold_tokens,
                                 active_context=config.active_context)  # fmt: skip
    return mirror.section_settings()


def _seed_new(module: str, name: str, **kwargs: Any) -> Any:
    """A new instance of MARSYS's class `module.name` when MARSYS is installed, else None."""
    found = _seed(module, name)
    return found(**kwargs) if found is not None else None
