"""Context assembly, pure: choose items within a token budget and render OpenAI-style messages.

Choosing: immutable sections first, then the others, then `messages`. Within a section, units
(groups, or single items) are taken in the order the section's policy would keep them (the
reverse of its eviction order: newest first for fifo, highest priority first for priority, most
recently used first for lru), and taking stops at the first unit that does not fit, so groups are
never split and a conversation is never cut in the middle. Rendering shows each section's
chosen items in the order they were written.

The renderer's name and version go into every `context.assembled` record, so "what exactly did
the model see" can be rebuilt with the same rules later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from .policies import _rank, _units
from .state import Item, SessionState

RENDERER = "ledgermem.render/1"
CONVERSATION = "messages"

ContentOf = Callable[[Item], object]


@dataclass
class Injection:
    """Messages added before the conversation (sections/inject.py), paid for first."""

    entries: list[dict] = field(default_factory=list)  # their manifest entries
    messages: list[dict] = field(default_factory=list)
    tokens: int = 0
    settings: dict | None = None  # what was asked for, kept in the record


def _keep_order(policy: str, units: list[list[Item]]) -> list[list[Item]]:
    if policy in ("none", "refuse"):
        return sorted(units, key=lambda m: min(i.order for i in m))
    return sorted(units, key=lambda m: _rank(policy, m), reverse=True)


def choose(
    session: SessionState, names: list[str] | None, budget: int
) -> list[tuple[str, list[Item]]]:
    """The sections and items that fit `budget` tokens, in render order."""
    names = list(session.sections) if names is None else names
    sections = session.sections
    immutable = [n for n in names if not sections[n].config.mutable]
    others = [n for n in names if sections[n].config.mutable and n != CONVERSATION]
    conversation = [n for n in names if n == CONVERSATION]
    remaining = budget
    chosen: list[tuple[str, list[Item]]] = []
    for name in immutable + others + conversation:
        section = sections[name]
        taken: list[Item] = []
        for members in _keep_order(
            section.config.policy, list(_units(section.items.values()).values())
        ):
            cost = sum(m.tokens for m in members)
            if cost > remaining:
                break
            remaining -= cost
            taken.extend(members)
        if taken:
            chosen.append((name, sorted(taken, key=lambda i: i.order)))
    return chosen


def _text(content: object) -> str:
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def render(
    chosen: list[tuple[str, list[Item]]], content_of: ContentOf, injected: list[dict] = ()
) -> list[dict]:
    """The messages: the sections' system messages, then `injected` ones, then the conversation."""
    messages: list[dict] = []
    for name, items in chosen:
        if name == CONVERSATION:
            messages.extend(injected)
            injected = ()
            for item in items:
                message = {"role": item.role or "user", "content": _text(content_of(item))}
                message.update(item.extra)
                messages.append(message)
        elif name == "role":
            messages.append(
                {"role": "system", "content": "\n\n".join(_text(content_of(i)) for i in items)}
            )
        else:
            lines = "\n".join("- " + _text(content_of(i)) for i in items)
            messages.append({"role": "system", "content": f"## {name}\n{lines}"})
    messages.extend(injected)  # when no conversation was chosen
    return messages


def manifest(chosen: list[tuple[str, list[Item]]]) -> list[dict]:
    return [
        {"id": item.id, "section": name, "h": item.h, "tokens": item.tokens}
        for name, items in chosen
        for item in items
    ]
