"""Eviction policies: pure functions from a section and an incoming item to the victims.

Policies run when a command is written; the record stores the victims and the reason, and replay
applies what the record says. Eviction works on units: a group is evicted whole, an ungrouped
item alone. How a unit ranks (lowest rank leaves first; ties break by the oldest (seq, k)):

| policy   | rank of a unit                                                         |
|----------|------------------------------------------------------------------------|
| fifo     | its oldest member: the oldest unit leaves first                         |
| lifo     | its newest member, negated: the newest unit leaves first               |
| lru      | its most recent use (write or agent read, by seq): least recent first   |
| lfu      | its most-read member's agent reads, then its most recent use            |
| priority | its highest priority: the lowest leaves first, among equals the oldest  |
| refuse   | never evicts: a write that does not fit is refused                      |
| none     | never evicts: only for unbounded or immutable sections                  |
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import BudgetExceeded, ItemTooLarge
from .state import Item, SectionState


def _units(items: Iterable[Item]) -> dict[str, list[Item]]:
    units: dict[str, list[Item]] = {}
    for item in items:
        units.setdefault(item.unit, []).append(item)
    return units


def _rank(policy: str, members: list[Item]) -> tuple:
    oldest = min(m.order for m in members)
    if policy == "fifo":
        return (oldest,)
    if policy == "lifo":
        newest = max(m.order for m in members)
        return (-newest[0], -newest[1])
    if policy == "lru":
        return (max(m.last_use for m in members), oldest)
    if policy == "lfu":
        return (max(m.reads for m in members), max(m.last_use for m in members), oldest)
    if policy == "priority":
        return (max(m.priority for m in members), oldest)
    raise ValueError(f"policy {policy!r} does not rank")


def choose_victims(
    section: SectionState,
    incoming_tokens: int,
    incoming_units: frozenset[str] = frozenset(),
    replacing: str | None = None,
) -> list[Item]:
    """The items to evict so that `incoming_tokens` more fit the budget, in eviction order.

    `incoming_units` are the groups the new items join: never victims, since evicting one would
    split it. `replacing` is an item being updated: its old tokens are given back first.
    Raises ItemTooLarge or BudgetExceeded; nothing is decided then.
    """
    config = section.config
    budget = config.budget_tokens
    if budget is None:
        return []
    name = config.name
    if incoming_tokens > budget:
        raise ItemTooLarge(
            f"the item needs {incoming_tokens} tokens, more than section {name!r}'s whole budget of {budget}"
        )
    used = section.tokens
    if replacing is not None:
        used -= section.items[replacing].tokens
    excess = used + incoming_tokens - budget
    if excess <= 0:
        return []
    candidates = [i for i in section.items.values() if i.id != replacing]
    units = _units(candidates)
    protected = sum(m.tokens for unit in incoming_units for m in units.pop(unit, ()))
    if protected + incoming_tokens > budget:
        raise ItemTooLarge(
            f"the groups being added to would hold {protected + incoming_tokens} tokens, more than "
            f"section {name!r}'s budget of {budget}; groups are never split"
        )
    if config.policy in ("refuse", "none"):
        raise BudgetExceeded(
            f"section {name!r} is full ({used} of {budget} tokens) and its policy is "
            f"{config.policy!r}: the write of {incoming_tokens} tokens is refused"
        )
    victims: list[Item] = []
    if config.policy == "fifo":
        # Items are kept in (seq, k) order, so units come out of _units by their oldest member:
        # already fifo's order. Skipping the sort is most of the cost of an add to a full section.
        ordered = list(units.values())
    else:
        ordered = sorted(units.values(), key=lambda m: _rank(config.policy, m))
    for members in ordered:
        victims.extend(sorted(members, key=lambda m: m.order))
        excess -= sum(m.tokens for m in members)
        if excess <= 0:
            return victims
    raise BudgetExceeded(f"section {name!r} cannot make room for {incoming_tokens} tokens")
