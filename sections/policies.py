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
|          | the incoming items compete: if one would have to leave, none is admitted |
| refuse   | never evicts: a write that does not fit is refused                      |
| none     | never evicts: only for unbounded or immutable sections                  |
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import BudgetExceeded, ItemTooLarge, NotAdmitted
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
    newcomers: dict[str, float] | None = None,
) -> list[Item]:
    """The items to evict so that `incoming_tokens` more fit the budget, in eviction order.

    `incoming_units` are the groups the new items join: never victims, since evicting one would
    split it. `replacing` is an item being updated: its old tokens are given back first.
    `newcomers` (an add's units, each with its highest priority) makes the incoming items
    compete under the priority policy: an add whose own unit would rank among the victims is
    not admitted. Raises ItemTooLarge, BudgetExceeded or NotAdmitted; nothing is decided then.
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
    joined = {unit: units.pop(unit) for unit in incoming_units if unit in units}
    protected = sum(m.tokens for members in joined.values() for m in members)
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
    if config.policy == "priority" and newcomers:
        _compete(section, units, joined, newcomers, excess, incoming_tokens)
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


def _compete(
    section: SectionState,
    units: dict[str, list[Item]],
    joined: dict[str, list[Item]],
    newcomers: dict[str, float],
    excess: int,
    incoming_tokens: int,
) -> None:
    """Rank the incoming units with the residents by (highest priority, oldest member) and walk
    the eviction order as `choose_victims` will: if an incoming unit comes up before there is
    room, it is not admitted. Incoming items are newer than every resident, so among equal
    priorities the residents leave first and the newcomer is admitted; a group the add joins
    ranks by its members old and new together."""
    newest = (float("inf"), 0)
    ranked: list[tuple[tuple, str | None, int]] = []
    for members in units.values():
        ranked.append((_rank("priority", members), None, sum(m.tokens for m in members)))
    for unit, priority in newcomers.items():
        residents = joined.get(unit, ())
        top = max([priority, *(m.priority for m in residents)])
        oldest = min([newest, *(m.order for m in residents)])
        ranked.append(((top, oldest), unit, 0))
    for rank, newcomer, tokens in sorted(ranked, key=lambda r: r[0]):
        if newcomer is not None:
            config = section.config
            raise NotAdmitted(
                f"section {config.name!r} is full ({section.tokens} of {config.budget_tokens} "
                f"tokens) and its policy is 'priority': the incoming item of priority {rank[0]} "
                f"ranks below the residents that would have to leave to make room for its "
                f"{incoming_tokens} tokens, so it is not admitted and nothing was written"
            )
        excess -= tokens
        if excess <= 0:
            return
