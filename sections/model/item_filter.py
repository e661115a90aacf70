"""Which items a read returns, pure: by event type, role and time, the newest N, then a page.

A session's timeline is its items across sections in the order they were written (log order,
which is also time order: a log's `ts` never goes back). An item's **event type** is its `kind`
when it has one (`user_message`, `agent_response`, `tool_call`, `tool_result`,
`delegation_request`, `delegation_response`, `error`, or any custom name), else the type its
role implies (a user message is a `user_message`, an assistant message an `agent_response`, or a
`tool_call` when it calls tools, a tool message a `tool_result`). Items with neither have no
event type: they are memory (a finding, a document), not something that happened in the
conversation, and are left out of the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from eventstore.errors import InvalidInput
from sections.model.item import Item

MAX_PAGE = 10_000  # offset and limit beyond any session's item count; bounds the input only


class Typed(Protocol):
    """What an item's event type is read from (an `Item`, or an `ItemView` of one)."""

    @property
    def kind(self) -> str | None: ...

    @property
    def role(self) -> str | None: ...

    @property
    def extra(self) -> dict: ...


def event_type(item: Typed) -> str | None:
    """The item's event type (see the module's docstring), or None."""
    if item.kind is not None:
        return item.kind
    role = item.role
    if role == "user":
        return "user_message"
    if role == "assistant":
        return "tool_call" if item.extra.get("tool_calls") else "agent_response"
    if role == "tool":
        return "tool_result"
    return None


def _names(what: str, value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple | set | frozenset) or not all(
        type(v) is str for v in value
    ):
        raise InvalidInput(f"{what} must be a string or a list of strings")
    return frozenset(value)


def _time(what: str, value: object) -> int | None:
    if value is not None and type(value) is not int:
        raise InvalidInput(f"{what} must be an integer time in microseconds")
    return value


def _count(what: str, value: object, top: int = MAX_PAGE) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= top:
        raise InvalidInput(f"{what} must be an integer from 0 to {top}")
    return value


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """What to keep of a session's items, in this order: the event `types` and `roles` asked
    for, content set at `since` <= ts < `until` (microseconds), the `recent` newest of those,
    then `offset` items skipped and at most `limit` returned. None: no such filter."""

    types: frozenset[str] | None = None
    roles: frozenset[str] | None = None
    since: int | None = None
    until: int | None = None
    recent: int | None = None
    offset: int = 0
    limit: int | None = None
    timeline: bool = False  # keep only items with an event type (`events()`)

    @classmethod
    def of(
        cls,
        types: object = None,
        roles: object = None,
        since: object = None,
        until: object = None,
        recent: object = None,
        offset: object = 0,
        limit: object = None,
        timeline: bool = False,
    ) -> ItemFilter:
        """A filter from a caller's arguments, each checked (InvalidInput names the bad one)."""
        return cls(
            _names("types", types),
            _names("roles", roles),
            _time("since", since),
            _time("until", until),
            _count("recent", recent),
            _count("offset", offset) or 0,
            _count("limit", limit),
            timeline,
        )

    @property
    def is_empty(self) -> bool:
        return self == NO_FILTER

    def keeps(self, item: Item) -> bool:
        if self.types is not None or self.timeline:
            type_ = event_type(item)
            if type_ is None or (self.types is not None and type_ not in self.types):
                return False
        if self.roles is not None and item.role not in self.roles:
            return False
        if self.since is not None and item.ts < self.since:
            return False
        return self.until is None or item.ts < self.until

    def select(self, found: list[tuple[str, Item]]) -> list[tuple[str, Item]]:
        """`found`, (section, item) pairs in the order to return them, filtered and paged."""
        if self.is_empty:
            return found
        kept = [pair for pair in found if self.keeps(pair[1])]
        if self.recent is not None:
            kept = kept[max(0, len(kept) - self.recent) :] if self.recent else []
        end = None if self.limit is None else self.offset + self.limit
        return kept[self.offset : end]


NO_FILTER = ItemFilter()  # what a read without filters keeps: everything
