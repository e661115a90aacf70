"""Context assembly, pure: choose items within a token budget and render OpenAI-style messages.

The budget bounds what the model is sent: the rendered messages, each counted whole (role,
content and tool fields, as compact JSON) by the memory's token counter, injected ones included.
Sections are paid for in this order: immutable ones (the configured instructions), then the
conversation, then the other sections in the session's order. `documents` and `observations`
come in only when named.

The conversation is trimmed from its oldest end only: its units (a tool call with its results,
or a single message) are taken newest first, and the first that does not fit what is left ends
it, so what goes in is the newest run of the conversation, without holes. A unit goes in only
whole: no tool result without the call that issued it, no call without every one of its results
(one that is not whole yet is not part of the run). When older units were left out, the kept
part does not open with a reply (an assistant message, a tool call and its results) whose user
turn is gone: those are dropped too, until a user turn or a system message opens it.

In the other sections, units are taken in the order the section's policy would keep them (the
reverse of its eviction order: newest first for fifo, highest priority first for priority, most
recently used first for lru); a unit that does not fit what is left is skipped and the smaller
ones after it still compete. Groups are never split.

Rendering is independent of how items were chosen: immutable sections, then the others, then
the conversation, each section's items in the order they were written. Conversation messages
take their content as the model API does (`chat_message`): content parts as they are, an
item's images as `image_url` parts, `reasoning_details` beside them, structured data as JSON
text; tool results and section messages stay text (`section_text`: parts as their texts,
images as `[image: url]` markers). docs/sections.md says why each.

The renderer's name goes into every `context.assembled` record, and a record is rendered again
by its own renderer's rules (`render(renderer=)`). `/2` changed only the choosing (rendered
count, the order of payment, skipping); `/3` the conversation's trimming and how contents
render. So `/1` and `/2` manifests render as text contents with name, tool_calls and
tool_call_id (`TEXT_RENDERERS`), byte for byte as they did.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

import orjson

from sections.model import tool_calls
from sections.model.eviction_order import unit_rank
from sections.model.item import Item, units_of
from sections.model.names import CONVERSATION
from sections.model.state import SectionState, SessionState
from sections.model.tokens import TokenCounter

RENDERER = "ledgermem.render/3"
# The tokens a context is assembled within when the caller names no budget: the default of the
# Python API, of HTTP and of MCP alike.
DEFAULT_CONTEXT_BUDGET = 8000
ON_REQUEST = frozenset(("documents", "observations"))  # assembled only when named

ContentOf = Callable[[Item], object]
Chosen = list[tuple[str, list[Item]]]


@dataclass
class Injection:
    """Messages added before the conversation (sections/retrieval/inject.py), paid for first."""

    entries: list[dict] = field(default_factory=list)  # their manifest entries
    messages: list[dict] = field(default_factory=list)
    tokens: int = 0
    settings: dict | None = None  # what was asked for, kept in the record


@dataclass(frozen=True)
class RecallRequest:
    """Recall of the user's past for one assembly (sections/retrieval/recall.py builds it).

    `fill(already, limit)` gives the recalled message that fits `limit` tokens, leaving out the
    items `already` in the context ((session, id) pairs). `share` of what the injected blocks
    leave is kept for it when the sections would take it; it takes more when they leave more."""

    share: float
    fill: Callable[[set[tuple[str, str]], int], Injection]
    settings: dict  # kept in the record, beside the manifest


def default_sections(session: SessionState) -> list[str]:
    return [n for n in session.sections if n not in ON_REQUEST]


def tokens_of(messages: list[dict], counter: TokenCounter) -> int:
    """What rendered messages cost: each message counted whole, as the model is sent it."""
    return sum(counter.count(m) for m in messages)


def _keep_order(policy: str, units: list[list[Item]]) -> list[list[Item]]:
    if policy in ("none", "refuse"):
        return sorted(units, key=lambda m: min(i.order for i in m))
    return sorted(units, key=lambda m: unit_rank(policy, m), reverse=True)


def choose(
    session: SessionState,
    names: list[str] | None,
    budget: int,
    content_of: ContentOf,
    counter: TokenCounter,
) -> tuple[Chosen, int]:
    """The sections and items whose rendered messages fit `budget` tokens, in render order,
    and what they cost."""
    names = default_sections(session) if names is None else names
    sections = session.sections
    immutable = [n for n in names if not sections[n].config.mutable]
    others = [n for n in names if sections[n].config.mutable and n != CONVERSATION]
    conversation = [n for n in names if n == CONVERSATION]
    texts: dict[str, str] = {}

    def text_of(item: Item) -> str:
        text = texts.get(item.id)
        if text is None:
            text = texts[item.id] = section_text(item, content_of(item))
        return text

    def message_of(item: Item) -> dict:
        return chat_message(item, content_of(item))

    taken: dict[str, list[Item]] = {}
    remaining = budget
    for name in immutable + conversation + others:
        if name == CONVERSATION:
            items, cost = _conversation(sections[name], remaining, message_of, counter)
        else:
            items, cost = _fill(name, sections[name], remaining, text_of, counter)
        if items:
            taken[name] = items
            remaining -= cost
    chosen = [(n, taken[n]) for n in immutable + others + conversation if n in taken]
    return chosen, budget - remaining


REPLY_ROLES = frozenset(("assistant", "tool"))


def _conversation(
    section: SectionState,
    remaining: int,
    message_of: Callable[[Item], dict],
    counter: TokenCounter,
) -> tuple[list[Item], int]:
    """The conversation's newest whole units that fit `remaining` rendered tokens, and their
    cost: trimmed from the oldest end only. Units are taken newest first up to the first that
    does not fit (no older, smaller one after it: that would leave a hole in the conversation).
    When older units were left out, the kept part does not open with a reply (an assistant
    message, a tool call and its results) whose user turn is gone: such units are dropped too,
    until a user turn (or a system message) starts it. Each item is one message, so the costs
    add up exactly."""
    units = [m for m in units_of(section.items.values()).values() if tool_calls.whole(m)]
    units.sort(key=lambda m: min(i.order for i in m), reverse=True)
    kept: list[tuple[list[Item], int]] = []
    spent = 0
    for members in units:
        paid = sum(counter.count(message_of(m)) for m in members)
        if paid > remaining - spent:
            break
        spent += paid
        kept.append((members, paid))
    if len(kept) < len(units):  # trimmed: the oldest kept unit must not answer what is gone
        while kept and (min(kept[-1][0], key=lambda i: i.order).role or "user") in REPLY_ROLES:
            spent -= kept.pop()[1]
    return sorted((m for members, _ in kept for m in members), key=lambda i: i.order), spent


def _fill(
    name: str,
    section: SectionState,
    remaining: int,
    text_of: Callable[[Item], str],
    counter: TokenCounter,
) -> tuple[list[Item], int]:
    """One section's items that fit `remaining` rendered tokens, and their cost."""
    units = _keep_order(section.config.policy, list(units_of(section.items.values()).values()))
    if remaining <= 0 or not units:
        return [], 0
    everything = sorted((m for u in units for m in u), key=lambda i: i.order)
    whole = counter.count(_section_message(name, everything, text_of))
    if whole <= remaining:  # the common case: the whole section fits
        return everything, whole

    def cost(items: list[Item]) -> int:
        return counter.count(_section_message(name, items, text_of)) if items else 0

    def prefix(n: int) -> list[Item]:
        return sorted((m for u in units[:n] for m in u), key=lambda i: i.order)

    # The longest run of units, in keep order, that fits: found in a logarithmic number of
    # renders, since a longer run renders no shorter. Then each later unit is tried on its own.
    fits, too_many = 0, len(units)
    while too_many - fits > 1:
        middle = (fits + too_many) // 2
        fits, too_many = (middle, too_many) if cost(prefix(middle)) <= remaining else (fits, middle)
    taken = prefix(fits)
    spent = cost(taken)
    smallest_miss = sum(m.tokens for m in units[fits])
    for members in units[fits + 1 :]:
        # The rendered message holds the unit's text, so a unit whose stored count alone
        # exceeds what is left (give or take the counter's rounding) cannot fit; nor, as what
        # is left only shrinks, one no smaller than a unit that already missed. Both skip a
        # render; at worst they leave a token or two unused, never overspend.
        size = sum(m.tokens for m in members)
        if size > remaining - spent + 1 or size >= smallest_miss:
            continue
        trial = list(taken)
        for m in members:
            insort(trial, m, key=lambda i: i.order)
        trial_cost = cost(trial)
        if trial_cost <= remaining:
            taken, spent = trial, trial_cost
        else:
            smallest_miss = size
    return taken, spent


def _text(content: object) -> str:
    return content if isinstance(content, str) else orjson.dumps(content).decode()


# The item fields an OpenAI-style chat message carried as they are, up to `ledgermem.render/2`
# (compaction's summarizer is still shown these).
MESSAGE_FIELDS = ("name", "tool_calls", "tool_call_id")
# ... and since `/3`: `reasoning_details` too, the field OpenRouter (and MARSYS) send back so a
# reasoning model keeps its thought signatures across tool calls. Only what the caller stored is
# sent back, under the name it was stored with: no `reasoning_content` is made up (DeepSeek
# refuses one in its input).
CHAT_FIELDS = (*MESSAGE_FIELDS, "reasoning_details")
# The renderers that rendered every content as text (a string as it is, anything else as its
# compact JSON), and carried MESSAGE_FIELDS only: their manifests render that way again.
TEXT_RENDERERS = frozenset(("ledgermem.render/1", "ledgermem.render/2"))
STRUCTURED = "structured_data: "  # how an item's structured data shows in its text


def _message(item: Item, text: str) -> dict:
    message = {"role": item.role or "user", "content": text}
    extra = item.extra
    if extra:
        message.update((k, extra[k]) for k in MESSAGE_FIELDS if k in extra)
    return message


def is_parts(content: object) -> TypeGuard[list[dict]]:
    """OpenAI-style content parts: a non-empty list of objects, each with a string `type`."""
    return (
        type(content) is list
        and bool(content)
        and all(type(p) is dict and type(p.get("type")) is str for p in content)
    )


def _part_text(part: dict) -> str:
    kind = part["type"]
    if kind == "text" and type(part.get("text")) is str:
        return part["text"]
    if kind == "image_url":
        image = part.get("image_url")
        return f"[image: {image.get('url') if type(image) is dict else image}]"
    return _text(part)


def _with_structured(text: str, data: object) -> str:
    note = STRUCTURED + _text(data)
    return f"{text}\n\n{note}" if text else note


def section_text(item: Item, content: object) -> str:
    """An item as text (`/3`): a string as it is, content parts as their texts one per line
    (an image as `[image: url]`, another part as its JSON), None as nothing, anything else as
    its compact JSON; then its `images` as markers and its structured data as JSON."""
    if is_parts(content):
        text = "\n".join(_part_text(p) for p in content)
    else:
        text = "" if content is None else _text(content)
    extra = item.extra
    if extra:
        text += "".join(f"\n[image: {ref}]" for ref in extra.get("images", ()))
        if extra.get("structured_data") is not None:
            text = _with_structured(text, extra["structured_data"])
    return text


def chat_message(item: Item, content: object) -> dict:
    """A conversation item as the chat message a model API takes (`/3`). Content parts go as
    they are, with the item's `images` appended as `image_url` parts (a string content becomes
    a text part before them); other contents as text (`section_text`'s rule). A tool result is
    text always (APIs take text there). Structured data goes last, as JSON text (a text part
    when the content is parts): no API takes a field of that name. Then name, tool_calls,
    tool_call_id and reasoning_details as stored."""
    role = item.role or "user"
    extra = item.extra
    body: str | list
    if role == "tool" or not (extra or is_parts(content)):
        body = section_text(item, content)
    else:
        body = content if is_parts(content) else ("" if content is None else _text(content))
        images = extra.get("images")
        if images:
            parts = list(body) if isinstance(body, list) else []
            if isinstance(body, str) and body.strip():
                parts.append({"type": "text", "text": body})
            parts += [{"type": "image_url", "image_url": {"url": ref}} for ref in images]
            body = parts
        data = extra.get("structured_data")
        if data is not None:
            if isinstance(body, list):
                body = [*body, {"type": "text", "text": STRUCTURED + _text(data)}]
            else:
                body = _with_structured(body, data)
    message = {"role": role, "content": body}
    if extra:
        message.update((k, extra[k]) for k in CHAT_FIELDS if k in extra)
    return message


def _section_message(name: str, items: list[Item], text_of: Callable[[Item], str]) -> dict:
    if name == "role":
        return {"role": "system", "content": "\n\n".join(text_of(i) for i in items)}
    lines = "\n".join("- " + text_of(i) for i in items)
    return {"role": "system", "content": f"## {name}\n{lines}"}


def render(
    chosen: Chosen,
    content_of: ContentOf,
    injected: Sequence[dict] = (),
    renderer: str = RENDERER,
) -> list[dict]:
    """The messages: the sections' system messages, then `injected` ones, then the conversation,
    as `renderer` rendered them (a record's, to render it again: contents as text up to `/2`)."""
    messages: list[dict] = []
    if renderer in TEXT_RENDERERS:
        text_of = lambda item: _text(content_of(item))  # noqa: E731
        message_of = lambda item: _message(item, text_of(item))  # noqa: E731
    else:
        text_of = lambda item: section_text(item, content_of(item))  # noqa: E731
        message_of = lambda item: chat_message(item, content_of(item))  # noqa: E731
    for name, items in chosen:
        if name == CONVERSATION:
            messages.extend(injected)
            injected = ()
            messages.extend(message_of(item) for item in items)
        else:
            messages.append(_section_message(name, items, text_of))
    messages.extend(injected)  # when no conversation was chosen
    return messages


def chosen_ids(session_id: str, chosen: Chosen) -> set[tuple[str, str]]:
    return {(session_id, item.id) for _, items in chosen for item in items}


def manifest(chosen: Chosen) -> list[dict]:
    return [
        {"id": item.id, "section": name, "h": item.h, "tokens": item.tokens}
        for name, items in chosen
        for item in items
    ]
