"""JAF's memory shapes (xynehq/jaf-py, `jaf.memory`), and a conversation's messages as ledgermem
items and back: no memory here (the provider that uses them: sections/adapters/jaf.py).

ledgermem does not depend on JAF. This module defines the shapes with JAF's fields (`Success`,
`Failure`, its errors, `Message`, `ConversationMemory`, ...); `shapes()` gives the ones results
are made of: JAF's own classes when JAF is installed (so its engine's `isinstance(result,
Failure)` sees a failure), these otherwise. JAF is imported on the first call of `shapes()`,
never at import (JAF's own modules import the provider while JAF is being imported). Messages
given may be JAF's `Message` objects, this module's, or dicts with the same fields; roles may be
strings or enums, ids `str` or a `str` subclass (JAF's `MessageId`).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.util
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeAlias, TypeVar

import orjson

from eventstore.errors import InvalidInput
from sections.retrieval.views import ItemView

PROVIDER = "ledgermem"
MESSAGE_FIELDS = ("role", "content", "attachments", "tool_call_id", "tool_calls", "message_id")
ROLES = ("user", "assistant", "tool", "system")
T = TypeVar("T")
E = TypeVar("E")


# ---- JAF's result and error types ------------------------------------------------------------


@dataclass(frozen=True)
class Success(Generic[T]):
    data: T


@dataclass(frozen=True)
class Failure(Generic[E]):
    error: E


# A result is a `Success` or a `Failure` of `shapes()`: JAF's classes or this module's.
Result: TypeAlias = Any


class MemoryError(Exception):  # JAF's name; shadows the builtin within this module only
    """JAF's memory error: `message`, `provider`, `cause`. Returned in a `Failure`, never
    raised by the provider (it is an Exception so a caller may raise it)."""

    def __init__(self, message: str, provider: str = PROVIDER, cause: BaseException | None = None):
        super().__init__(message)
        self.message, self.provider, self.cause = message, provider, cause

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(self) == vars(other)

    __hash__ = Exception.__hash__


class MemoryConnectionError(MemoryError):
    """The store cannot be reached (or was closed)."""


class MemoryNotFoundError(MemoryError):
    def __init__(self, message: str, provider: str = PROVIDER, conversation_id: str = "",
                 cause: BaseException | None = None):  # fmt: skip
        super().__init__(message, provider, cause)
        self.conversation_id = conversation_id


class MemoryStorageError(MemoryError):
    def __init__(self, message: str, provider: str = PROVIDER, operation: str = "",
                 cause: BaseException | None = None):  # fmt: skip
        super().__init__(message, provider, cause)
        self.operation = operation


# ---- JAF's message and conversation shapes ------------------------------------------------------


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
class MessageContentPart:
    type: str
    text: str | None = None
    image_url: dict | None = None
    file: dict | None = None


@dataclass(frozen=True)
class Attachment:
    kind: str
    mime_type: str | None = None
    name: str | None = None
    url: str | None = None
    data: str | None = None
    format: str | None = None
    use_litellm_format: bool | None = None


def generate_message_id() -> str:
    """An id as JAF makes one (`msg_<ms>_<8 hex>`) for a message given without one."""
    return f"msg_{int(time.time() * 1000)}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Message:
    """JAF's `Message`: role, content (a string or content parts), attachments, tool call id,
    tool calls and a message id (generated when not given)."""

    role: str
    content: str | list[MessageContentPart]
    attachments: list[Attachment] | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    message_id: str | None = None

    def __post_init__(self) -> None:
        if self.message_id is None:
            object.__setattr__(self, "message_id", generate_message_id())

    @property
    def text_content(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return " ".join(p.text for p in self.content if p.type == "text" and p.text)


@dataclass(frozen=True)
class ConversationMemory:
    conversation_id: str
    user_id: str | None = None
    messages: tuple[Message, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryQuery:
    conversation_id: str | None = None
    user_id: str | None = None
    trace_id: str | None = None
    limit: int | None = None
    offset: int | None = None
    since: datetime | None = None
    until: datetime | None = None


# ---- messages as items, and back ---------------------------------------------------------------


def _plain(value: object) -> object:
    """JSON-able data from JAF's objects: dataclasses as dicts, enums as their values."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, str):
        return str(value)  # a str subclass (JAF's MessageId) is its string
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _drop_none(value: object) -> object:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def message_fields(message: object) -> dict:
    """A message's fields as JSON (what it is stored as, and what stored messages are compared
    by); InvalidInput for one JAF could not have made."""
    if isinstance(message, Mapping):
        unknown = set(message) - set(MESSAGE_FIELDS)
        if unknown:
            raise InvalidInput(f"unknown message fields {sorted(unknown)}")
        raw = {name: message.get(name) for name in MESSAGE_FIELDS}
    else:
        raw = {name: getattr(message, name, None) for name in MESSAGE_FIELDS}
    fields = {k: _drop_none(_plain(v)) for k, v in raw.items() if v is not None}
    for name in ("tool_calls", "attachments"):  # none at all, however said
        if fields.get(name) == []:
            del fields[name]
    role = fields.get("role")
    if role not in ROLES:
        raise InvalidInput(f"a message's role must be one of {', '.join(ROLES)}, not {role!r}")
    content = fields.get("content")
    if not isinstance(content, str) and not (
        isinstance(content, list) and all(isinstance(p, dict) and "type" in p for p in content)
    ):
        raise InvalidInput("a message's content must be a string or a list of content parts")
    if "message_id" not in fields:
        fields["message_id"] = generate_message_id()
    for name in ("message_id", "tool_call_id"):
        if name in fields and (not isinstance(fields[name], str) or not fields[name]):
            raise InvalidInput(f"{name} must be a non-empty string")
    try:  # JSON, as the log will hold it (tuples become lists, and so on)
        return orjson.loads(orjson.dumps(fields))
    except TypeError as exc:
        raise InvalidInput(f"a message must be JSON data: {exc}") from None


def item_of(fields: dict) -> dict:
    """The ledgermem item a message is: role and content as they are, tool calls and their id
    as the item's rendering fields, its id and attachments in its metadata."""
    item = {"content": fields["content"], "role": fields["role"]}
    if fields.get("tool_calls"):
        item["tool_calls"] = fields["tool_calls"]
    if fields.get("tool_call_id"):
        item["tool_call_id"] = fields["tool_call_id"]
    metadata = {"message_id": fields["message_id"]}
    if fields.get("attachments"):
        metadata["attachments"] = fields["attachments"]
    item["metadata"] = metadata
    return item


def stored_fields(view: ItemView) -> dict:
    """A stored message's fields, as `message_fields` gives the message it was stored from."""
    fields = {"role": view.role, "content": view.content}
    if view.extra.get("tool_calls"):
        fields["tool_calls"] = view.extra["tool_calls"]
    if view.extra.get("tool_call_id"):
        fields["tool_call_id"] = view.extra["tool_call_id"]
    if view.metadata.get("attachments"):
        fields["attachments"] = view.metadata["attachments"]
    fields["message_id"] = view.metadata.get("message_id") or view.id
    return fields


def message_of(fields: dict) -> Any:
    """A stored message as JAF's `Message` (of `shapes()`)."""
    seed = shapes()
    content = fields["content"]
    if isinstance(content, list):
        content = [seed.MessageContentPart(**p) for p in content]
    elif not isinstance(content, str):  # an item written another way: its JSON as text
        content = orjson.dumps(content).decode()
    calls = fields.get("tool_calls")
    return seed.Message(
        role=fields["role"],
        content=content,
        attachments=[seed.Attachment(**a) for a in fields["attachments"]]
        if fields.get("attachments")
        else None,
        tool_call_id=fields.get("tool_call_id"),
        tool_calls=[
            seed.ToolCall(
                c["id"], c.get("type", "function"), seed.ToolCallFunction(**c["function"])
            )
            for c in calls
        ]
        if calls
        else None,
        message_id=seed.MessageId(fields["message_id"]),
    )


def datetime_of(ts_us: int) -> datetime:
    return datetime.fromtimestamp(ts_us / 1_000_000, UTC)


def microseconds_of(when: datetime) -> int:
    """A datetime in microseconds; a naive one is local time, as JAF's `datetime.now()`."""
    return round(when.timestamp() * 1_000_000)


# ---- the shapes results are made of: JAF's when installed, these otherwise ----------------------


@dataclass(frozen=True)
class Shapes:
    """The classes a provider's results and messages are made of."""

    origin: str  # "jaf" (JAF's own classes) or "ledgermem" (this module's)
    Success: Any
    Failure: Any
    MemoryError: Any
    MemoryConnectionError: Any
    MemoryNotFoundError: Any
    MemoryStorageError: Any
    ConversationMemory: Any
    MemoryQuery: Any
    Message: Any
    MessageId: Any  # JAF's `str` subclass for message ids; `str` here
    ToolCall: Any
    ToolCallFunction: Any
    MessageContentPart: Any
    Attachment: Any


SEED_NAMES = ("Success", "Failure", "MemoryError", "MemoryConnectionError", "MemoryNotFoundError",
              "MemoryStorageError", "ConversationMemory", "MemoryQuery", "Message", "ToolCall",
              "ToolCallFunction", "MessageContentPart", "Attachment")  # fmt: skip
OURS = Shapes("ledgermem", Success, Failure, MemoryError, MemoryConnectionError,
              MemoryNotFoundError, MemoryStorageError, ConversationMemory, MemoryQuery, Message,
              str, ToolCall, ToolCallFunction, MessageContentPart, Attachment)  # fmt: skip
_resolved: Shapes | None = None


def shapes() -> Shapes:
    """JAF's classes when JAF (`jaf.memory.types`, `jaf.core.types`) can be imported, else this
    module's; decided on the first call, then kept (`forget_shapes()` decides again)."""
    global _resolved
    if _resolved is None:
        _resolved = _jaf_shapes() or OURS
    return _resolved


def forget_shapes() -> None:
    """Decide again on the next `shapes()` (for a JAF installed or removed since)."""
    global _resolved
    _resolved = None


def _jaf_shapes() -> Shapes | None:
    try:
        if importlib.util.find_spec("jaf") is None:
            return None
        memory = importlib.import_module("jaf.memory.types")
        core = importlib.import_module("jaf.core.types")
        found = {name: getattr(memory, name) for name in SEED_NAMES[:8]}
        found |= {name: getattr(core, name) for name in SEED_NAMES[8:]}
        return Shapes("jaf", MessageId=getattr(core, "MessageId", str), **found)
    except Exception:  # another package named jaf, or a JAF without these: ours
        return None
