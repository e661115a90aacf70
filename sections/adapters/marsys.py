"""MARSYS's conversation memories over a ledgermem session (docs/adapters/marsys.md).

`ConversationMemory` and `ManagedConversationMemory` keep MARSYS's method names, arguments and
return shapes (message dicts in LLM API format, as MARSYS's `Message.to_llm_dict` makes them;
ids as strings), on one section of one session (`messages` by default). Every call is a ledgermem
command: an add is an `item.added` record, a read leaves an `items.read` record, and the managed
variant compacts through the section's compaction settings (docs/compaction.md), its summaries
kept in the log. Nothing here holds state of its own: two adapters on the same session see the
same messages, and a reopened memory gives them back.

MARSYS's `Message` objects are not imported (ledgermem does not depend on MARSYS): `add(message=)`
takes a dict or any object with MARSYS's attributes (role, content, name, tool_calls, ...), and
tool calls may be dicts or objects with `to_dict()`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from eventstore.errors import InvalidInput
from sections.errors import CannotCompact, ItemNotFound, SummarizerFailed
from sections.model.commands import get_item, get_section, get_session
from sections.model.compaction import Summarizer
from sections.model.render import STRUCTURED
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session

MESSAGE_FIELDS = (
    "name",
    "tool_calls",
    "agent_calls",
    "images",
    "tool_call_id",
    "reasoning_details",
    "structured_data",
)
UPDATABLE = ("role", "content")  # what an update may change in ledgermem's item model


def _json_text(value: object) -> str:
    return orjson.dumps(value).decode()


def _with_structured(text: str, data: object) -> str:
    note = STRUCTURED + _json_text(data)
    return f"{text}\n\n{note}" if text else note


def _plain(value: object) -> object:
    """A tool call or agent call as a dict: MARSYS's objects give theirs with `to_dict()`."""
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def llm_dict(view: ItemView) -> dict:
    """An item as MARSYS's `Message.to_llm_dict` gives a message: tool messages with string
    content, their tool_call_id and name; other messages with their content (a dict as compact
    JSON, a list of parts as it is, images as `image_url` parts after the text), and name,
    tool_calls and reasoning_details when set. Image references pass through unchanged.
    Structured data (which MARSYS's dict leaves out) is kept as context renders it: JSON text
    after the content (`structured_data: {...}`; a text part when the content is parts)."""
    extra, role, content = view.extra, view.role or "user", view.content
    data = extra.get("structured_data")
    if role == "tool":
        text = (
            "" if content is None else content if isinstance(content, str) else _json_text(content)
        )
        if data is not None:
            text = _with_structured(text, data)
        answer = {"role": "tool", "content": text}
        if extra.get("tool_call_id"):
            answer["tool_call_id"] = extra["tool_call_id"]
        if extra.get("name"):
            answer["name"] = extra["name"]
        return answer
    if isinstance(content, dict):
        content = _json_text(content)
    if extra.get("images") and not isinstance(content, list):
        parts: list[dict] = (
            [{"type": "text", "text": str(content)}] if content and str(content).strip() else []
        )
        parts += [{"type": "image_url", "image_url": {"url": ref}} for ref in extra["images"]]
        content = parts
    if data is not None:
        if isinstance(content, list):
            content = [*content, {"type": "text", "text": STRUCTURED + _json_text(data)}]
        else:
            content = _with_structured("" if content is None else str(content), data)
    message: dict[str, object] = {"role": role, "content": content}
    for name in ("name", "tool_calls", "reasoning_details"):
        if extra.get(name):
            message[name] = extra[name]
    return message


class ConversationMemory:
    """MARSYS's `ConversationMemory`: the conversation as a list of messages, here the items of
    one section of a ledgermem session. `description` becomes the system message the session
    starts with (only when the session is new: reopening does not add it twice)."""

    memory_type = "conversation_history"

    def __init__(
        self,
        description: str | None = None,
        *,
        memory: Memory,
        session_id: str | None = None,
        tenant: str | None = None,
        section: str = "messages",
        sections: dict[str, dict] | None = None,
    ) -> None:
        session_id = session_id or uuid.uuid4().hex
        _, created = memory.get_or_create(session_id, tenant=tenant, sections=sections)
        self.session: Session = memory.session(session_id, tenant=tenant, create=False)
        self.section = section
        if description and created:
            self.add(role="system", content=description)

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
        """Add a message (a `message` object or dict, or its fields); returns its id. A
        message's `structured_data` (a dict) is kept, given back by ledgermem's reads
        (`Session.get`) as it is, and rendered as JSON text after the content."""
        if message is not None:
            fields = _message_fields(message)
        elif role is not None:
            fields = {"role": role, "content": content, "name": name, "tool_calls": tool_calls,
                      "agent_calls": agent_calls, "images": images, "tool_call_id": tool_call_id,
                      "reasoning_details": reasoning_details,
                      "structured_data": structured_data}  # fmt: skip
        else:
            raise InvalidInput("Either a Message object or role must be provided to add.")
        item = {k: v for k, v in fields.items() if v is not None or k == "content"}
        for key in ("tool_calls", "agent_calls"):
            if isinstance(item.get(key), list):
                item[key] = [_plain(call) for call in item[key]]
        return self.session.add(self.section, item.pop("content"), **item).id

    def update(self, message_id: str, *, role: str | None = None, content: object = None,
               **unchangeable: object) -> None:  # fmt: skip
        """Change a message's role or content (ItemNotFound for an unknown id). ledgermem keeps
        how a message was said (name, tool calls, images) as it was added: asking to change
        those is refused (InvalidInput), nothing appended."""
        given = {k: v for k, v in unchangeable.items() if v is not None}
        if given:
            raise InvalidInput(
                f"update changes {' and '.join(UPDATABLE)} only; {sorted(given)} stay as added "
                "(remove the message and add a new one)"
            )
        changes: dict[str, Any] = {
            k: v for k, v in (("role", role), ("content", content)) if v is not None
        }
        if not changes:  # nothing to change: only whether it is there (no content is read)
            tenant, sid, name = self.session.tenant, self.session.id, self.section
            self.session.memory.read(
                lambda state: get_item(
                    get_section(get_session(state, tenant, sid), name), message_id
                )  # fmt: skip
            )
            return
        self.session.update(self.section, message_id, **changes)

    def remove_by_id(self, message_id: str) -> bool:
        """Remove a message; False when there is none with this id."""
        try:
            self.session.remove(self.section, [message_id])
        except ItemNotFound:
            return False
        return True

    def reset_memory(self) -> None:
        """Remove every message but the system prompt (the first message, when it is one)."""
        views = self.session.get(self.section, reader="operator")
        keep = views[0].id if views and views[0].role == "system" else None
        gone = [v.id for v in views if v.id != keep]
        if gone:
            self.session.remove(self.section, gone)

    # -- reads (each leaves an `items.read` record)

    def retrieve_all(self) -> list[dict]:
        return [llm_dict(v) for v in self.session.get(self.section)]

    def retrieve_recent(self, n: int = 1) -> list[dict]:
        if type(n) is not int:
            raise InvalidInput("n must be an integer")
        return [llm_dict(v) for v in self.session.get(self.section, recent=n)] if n > 0 else []

    def retrieve_by_id(self, message_id: str) -> dict | None:
        try:
            (view,) = self.session.get(self.section, [message_id])
        except ItemNotFound:
            return None
        return llm_dict(view)

    def retrieve_by_role(self, role: str, n: int | None = None) -> list[dict]:
        recent = n if n else None  # MARSYS: n=0 or None means all of them
        return [llm_dict(v) for v in self.session.get(self.section, role=role, recent=recent)]

    def get_messages(self) -> list[dict]:
        """The messages for the model: all of them, as `retrieve_all` gives them."""
        return self.retrieve_all()


def _message_fields(message: object) -> dict:
    if isinstance(message, dict):
        unknown = set(message) - {"role", "content", "message_id", *MESSAGE_FIELDS}
        if unknown or "role" not in message:
            raise InvalidInput(f"a message needs a role; unknown fields {sorted(unknown)}")
        found = message
    else:
        if getattr(message, "role", None) is None:
            raise InvalidInput("a message needs a role")
        found = {k: getattr(message, k, None) for k in ("role", "content", *MESSAGE_FIELDS)}
    keys = ("role", "content", *MESSAGE_FIELDS)
    return {k: found.get(k) for k in keys}


@dataclass(frozen=True)
class ManagedMemoryConfig:
    """MARSYS's `ManagedMemoryConfig`, the settings compaction has here: when to compact
    (`threshold_tokens`), how many recent assistant rounds are kept whole
    (`grace_recent_messages`) and how long a tool output may stay (`max_tool_message_tokens`,
    cut at about four characters a token)."""

    threshold_tokens: int = 150_000
    grace_recent_messages: int = 1
    max_tool_message_tokens: int = 1200

    def section_settings(self) -> dict:
        """The section settings they become (docs/compaction.md); no budget evicts on top."""
        return {
            "budget_tokens": None,
            "compact_at_tokens": self.threshold_tokens,
            "compact_keep_turns": self.grace_recent_messages,
            "compact_tool_chars": self.max_tool_message_tokens * 4,
        }


class ManagedConversationMemory(ConversationMemory):
    """MARSYS's `ManagedConversationMemory`: a conversation that compacts itself. Past
    `threshold_tokens`, an add cuts long tool outputs and then replaces the messages before the
    protected tail (the first user message, the last `grace_recent_messages` rounds) by one
    summary, in the same record, written by the memory's summarizer (a deterministic digest
    unless `Memory.open(summarizer=)` gives another). `summarizer` (messages, max_tokens) -> str
    overrides it for `compact_for_payload_error` only.
    As in MARSYS, `description` is not stored: the agent sends its own system prompt."""

    memory_type = "managed_conversation"

    def __init__(
        self,
        config: ManagedMemoryConfig | None = None,
        description: str | None = None,
        *,
        memory: Memory,
        session_id: str | None = None,
        tenant: str | None = None,
        section: str = "messages",
        summarizer: Summarizer | None = None,
    ) -> None:
        self.config = config or ManagedMemoryConfig()
        settings = {section: self.config.section_settings()}
        super().__init__(None, memory=memory, session_id=session_id, tenant=tenant,
                         section=section, sections=settings)  # fmt: skip
        self.summarizer = summarizer

    async def compact_for_payload_error(
        self, runtime: dict | None = None, *, target_bytes: int | None = None
    ) -> bool:
        """After a payload-too-large: compact until the messages (as context renders them)
        fit `target_bytes`, or, as MARSYS does without one, until they are smaller than now.
        True when a `section.compacted` record was appended; False when no compaction helps
        or the summarizer failed (nothing appended). `runtime` is MARSYS's and unused."""
        budget, sections = 2**31, [self.section]
        if target_bytes is None:
            size = await self.session.compact_for_payload_error_async(
                2**62, section=self.section, budget=budget, sections=sections
            )
            target_bytes = size["bytes_before"] - 1
        try:
            outcome = await self.session.compact_for_payload_error_async(
                target_bytes, section=self.section, budget=budget, sections=sections,
                summarizer=self.summarizer,
            )  # fmt: skip
        except (CannotCompact, SummarizerFailed):
            return False
        return outcome["compacted"]
