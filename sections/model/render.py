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
the conversation, each section's items in the order they were written. The renderer's name goes
into every `context.assembled` record; `/2` changed only the choosing (rendered count, the order
of payment, skipping) and `/3` the conversation's trimming, so a manifest of any of them renders
the same way.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
            text = texts[item.id] = _text(content_of(item))
        return text

    def message_of(item: Item) -> dict:
        return _message(item, text_of(item))

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


# The item fields an OpenAI-style chat message carries as they are.
MESSAGE_FIELDS = ("name", "tool_calls", "tool_call_id")


def _message(item: Item, text: str) -> dict:
    message = {"role": item.role or "user", "content": text}
    extra = item.extra
    if extra:
        message.update((k, extra[k]) for k in MESSAGE_FIELDS if k in extra)
    return message


def _section_message(name: str, items: list[Item], text_of: Callable[[Item], str]) -> dict:
    if name == "role":
        return {"role": "system", "content": "\n\n".join(text_of(i) for i in items)}
    lines = "\n".join("- " + text_of(i) for i in items)
    return {"role": "system", "content": f"## {name}\n{lines}"}


def render(chosen: Chosen, content_of: ContentOf, injected: Sequence[dict] = ()) -> list[dict]:
    """The messages: the sections' system messages, then `injected` ones, then the conversation."""
    messages: list[dict] = []
    text_of = lambda item: _text(content_of(item))  # noqa: E731
    for name, items in chosen:
        if name == CONVERSATION:
            messages.extend(injected)
            injected = ()
            messages.extend(_message(item, text_of(item)) for item in items)
        else:
            messages.append(_section_message(name, items, text_of))
    messages.extend(injected)  # when no conversation was chosen
    return messages


def manifest(chosen: Chosen) -> list[dict]:
    return [
        {"id": item.id, "section": name, "h": item.h, "tokens": item.tokens}
        for name, items in chosen
        for item in items
    ]
