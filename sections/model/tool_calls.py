"""Tool calls and their results, pure: the pairing rule OpenAI-style APIs enforce, kept in one
place. At write time a result joins its call's group (whether they come in one batch or one by
one); at context time a conversation unit goes in only whole."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from sections.model.item import Item
from sections.model.names import CONVERSATION
from sections.model.state import SectionState

GROUP_PREFIX = "call:"


def default_group(
    section: str, item: dict, existing: SectionState | None, batch: Sequence[dict]
) -> str | None:
    """In `messages`, an assistant message with tool calls and the tool results answering it
    form one group, named after the first call's id. A result's call is looked for among the
    items before it in its batch, then in the section, so a batch groups exactly as the same
    items added one by one."""
    if section != CONVERSATION:
        return None
    extra = item.get("extra", {})
    calls = extra.get("tool_calls")
    if calls:
        return GROUP_PREFIX + calls[0]["id"]
    answered = extra.get("tool_call_id")
    if answered is None:
        return None
    in_batch = ((o.get("group"), o.get("extra", {}).get("tool_calls", ())) for o in reversed(batch))
    residents = reversed(existing.items.values()) if existing is not None else ()
    in_section = ((o.group, o.extra.get("tool_calls", ())) for o in residents)
    for group, calls in chain(in_batch, in_section):
        if any(call.get("id") == answered for call in calls):
            return group
    return None


def whole(members: list[Item]) -> bool:
    """A conversation unit an OpenAI-style API accepts: every tool result answers a call the unit
    holds, and every call it holds has its result."""
    calls = {c.get("id") for m in members for c in m.extra.get("tool_calls", ())}
    answers = {m.extra["tool_call_id"] for m in members if "tool_call_id" in m.extra}
    return calls == answers
