"""The message side of the MARSYS adapter (sections/adapters/marsys.py): MARSYS's own classes
when it is installed (looked up when used, never imported at import time) and this module's
stand-ins otherwise, the refusals, messages as MARSYS's `Message.to_llm_dict` gives them, and the
in-process memory an adapter constructed without one keeps its conversation in."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from eventstore.errors import InvalidInput
from sections.adapters.own_memory import open_scratch, release
from sections.errors import ItemNotFound
from sections.model.commands import get_section, get_session
from sections.model.render import STRUCTURED
from sections.retrieval.views import view_of
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session

# -- MARSYS's own classes, when it is installed

MESSAGE_FIELDS = (
    "name",
    "tool_calls",
    "agent_calls",
    "images",
    "tool_call_id",
    "reasoning_details",
    "structured_data",
)
ID_KEY = "message_id"  # item metadata: the message's own id (MARSYS's `Message.message_id`)


@functools.cache
def _seed_installed() -> bool:
    return importlib.util.find_spec("marsys") is not None


def _seed(module: str, name: str) -> Any:
    """MARSYS's `module.name` when MARSYS is installed (and the name is not this module's own,
    as when MARSYS's memory module re-exports ours); None otherwise."""
    if not _seed_installed():
        return None
    try:
        value = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    ours = str(getattr(value, "__module__", "")).startswith("sections.adapters.marsys")
    return None if ours else value


class MessageError(InvalidInput):
    """A message refused (MARSYS's `MessageError`): nothing was appended. When MARSYS is
    installed the refusal raised is also MARSYS's `MessageError`."""


class MessageNotFound(ItemNotFound):
    """No message with this id (MARSYS raises `MessageError`; so does this, when installed)."""


@functools.cache
def _refusal(ours: type[Exception]) -> type[Exception]:
    theirs = _seed("marsys.agents.exceptions", "MessageError")
    if theirs is None:
        return ours
    return type(ours.__name__, (theirs, ours), {"__module__": __name__, "__doc__": ours.__doc__})


def _refuse(text: str) -> Exception:
    return _refusal(MessageError)(text)


def _not_found(text: str) -> Exception:
    return _refusal(MessageNotFound)(text)


@dataclass
class MemoryResetEvent:
    """MARSYS's `MemoryResetEvent`: emitted on the event bus when a memory is reset (MARSYS's
    own class when installed)."""

    agent_name: str
    timestamp: float = field(default_factory=time.time)


@dataclass
class StoredMessage:
    """A message as `get_raw_messages` gives it when MARSYS is not installed (MARSYS's `Message`
    when it is): a copy, changing it changes nothing stored."""

    role: str
    content: object = None
    message_id: str = ""
    name: str | None = None
    tool_calls: list | None = None
    agent_calls: list | None = None
    structured_data: dict | None = None
    images: list | None = None
    tool_call_id: str | None = None
    reasoning_details: list | None = None


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


def _default_memory(owner: object) -> Memory:
    """An in-process memory for an adapter constructed without one, as MARSYS constructs it: a
    log in a temporary directory (no fsync), closed and removed when the adapter is collected or
    the process exits. Nothing in it outlives the process; pass `memory=` to keep it."""
    memory, path = open_scratch("ledgermem-marsys-")
    weakref.finalize(owner, release, memory, path)
    return memory


def _new_message_id(fields: dict) -> str:
    """A new message's id, as MARSYS makes it (its `Message`, when installed, also checks the
    fields as MARSYS does: a refusal is MARSYS's `MessageError`)."""
    message_class = _seed("marsys.agents.memory", "Message")
    if message_class is None:
        return str(uuid.uuid4())
    keys = ("role", "content", "name", "tool_calls", "agent_calls", "images", "tool_call_id")
    return message_class(**{k: fields.get(k) for k in keys}).message_id


def _message_fields(message: object) -> tuple[dict, str]:
    """A message's fields and its id (a new one when it has none)."""
    keys = ("role", "content", *MESSAGE_FIELDS)
    if isinstance(message, dict):
        unknown = set(message) - {"role", "content", ID_KEY, *MESSAGE_FIELDS}
        if unknown or "role" not in message:
            raise _refuse(f"a message needs a role; unknown fields {sorted(unknown)}")
        found = {k: message.get(k) for k in keys}
        given = message.get(ID_KEY)
    else:
        if getattr(message, "role", None) is None:
            raise _refuse("a message needs a role")
        found = {k: getattr(message, k, None) for k in keys}
        given = getattr(message, ID_KEY, None)
    if given is not None and (not isinstance(given, str) or not given):
        raise _refuse("a message_id must be a non-empty string")
    return found, str(given) if given else str(uuid.uuid4())


def _view_fields(view: ItemView) -> dict:
    return {"role": view.role, "content": view.content,
            **{k: view.extra.get(k) for k in MESSAGE_FIELDS}}  # fmt: skip


def _message(view: ItemView) -> Any:
    fields = {**_view_fields(view), ID_KEY: view.metadata.get(ID_KEY, view.id)}
    fields["role"] = fields["role"] or "user"
    message_class = _seed("marsys.agents.memory", "Message") or StoredMessage
    return message_class(**fields)


def _newest_within(
    views: list[ItemView], budget: int, cost_of: Callable[[ItemView], int] | None = None
) -> list[ItemView]:
    """The newest messages whose tokens (`cost_of`, else the stored count) fit `budget`, in
    order: packed backward, a tool result with every message back to the call that issued it
    (or the packing stops there)."""
    kept: list[ItemView] = []
    spent = 0
    at = len(views) - 1
    while at >= 0:
        start = at
        if views[at].role == "tool":  # back to the assistant message whose call it answers
            while start > 0 and views[start].role == "tool":
                start -= 1
        bundle = views[start : at + 1]
        cost = sum(cost_of(v) if cost_of else v.tokens for v in bundle)
        if spent + cost > budget:
            if not kept:
                kept = [views[-1]]  # MARSYS: the newest message alone rather than nothing
            break
        kept[:0] = bundle
        spent += cost
        at = start - 1
    return kept


class TokenEstimate:
    """MARSYS's running token estimate (its `_estimated_total_tokens`, which `threshold_tokens`
    is measured against): its token counter's `count_message` over each message as MARSYS's
    dict, role overheads included. Each message is counted once per content and role (the
    counts are kept by item id, content record and role). `of` gives None when the counter has
    no `count_message` (no MARSYS and no `token_counter` given): then the section's own count,
    by the memory's counter, stands."""

    def __init__(self) -> None:
        self._counter: object = None
        self._known: dict[tuple[str, int, str | None], int] = {}

    def of(
        self, counter: object, views: list[ItemView], fill: Callable[[ItemView], ItemView]
    ) -> int | None:
        """The estimate of `views` (`fill` gives a view its content when it is kept in the log,
        called only for a message not counted before)."""
        count = getattr(counter, "count_message", None)
        if not callable(count):
            return None
        known = self._known if counter is self._counter else {}
        self._counter, self._known = counter, {}
        for view in views:
            key = (view.id, view.content_seq, view.role)
            tokens = known.get(key)
            if tokens is None:
                tokens = int(count(llm_dict(fill(view) if view.content is None else view)))
            self._known[key] = tokens
        return sum(self._known.values())

    def cost_of(self, view: ItemView) -> int:
        """One message's count, as the last `of` counted it."""
        return self._known[(view.id, view.content_seq, view.role)]


def section_stats(session: Session, section: str, counter: object, estimate: TokenEstimate) -> dict:
    """A managed memory's message count and the tokens its `threshold_tokens` is measured in:
    `counter`'s (MARSYS's token counter) by `estimate`, else the section's own count. Read
    under the memory's lock: no record."""
    tenant, sid, memory = session.tenant, session.id, session.memory
    counting = callable(getattr(counter, "count_message", None))

    def stats(state: Any) -> tuple[int, int, list]:
        found = get_section(get_session(state, tenant, sid), section)
        copies = [  # views are copies; an item whose content is in the log, a copy too
            (view_of(section, i), replace(i) if i.content is None else None)
            for i in (found.items.values() if counting else ())
        ]
        return len(found.items), found.tokens, copies

    items, tokens, copies = memory.read(stats)
    logged = {view.id: item for view, item in copies}

    def fill(view: ItemView) -> ItemView:
        return replace(view, content=memory.content_of(logged[view.id]))

    counted = estimate.of(counter, [view for view, _ in copies], fill)
    return {"items": items, "tokens": tokens if counted is None else counted}
