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

from collections.abc import Iterator

from sections.errors import BudgetExceeded, ItemTooLarge, NotAdmitted
from sections.model.eviction_order import EvictionOrder, unit_rank
from sections.model.item import Item
from sections.model.state import SectionState


def _order(section: SectionState) -> EvictionOrder:
    """The section's eviction order, built on first use and whenever the policy changed."""
    order = section.order
    if order is None or order.policy != section.config.policy:
        order = section.order = EvictionOrder(section.config.policy, section.items.values())
    return order


def _residents(
    section: SectionState, order: EvictionOrder, skip: set[str], replacing: str | None
) -> Iterator[tuple[tuple | None, list[Item]]]:
    """The candidate units in eviction order, as (rank, members): every unit but those in
    `skip`, and without the item being replaced (its group ranks by the others). fifo and lifo
    walk the items, which are in (seq, k) order, and give no rank."""
    policy = section.config.policy
    units = order.units
    if policy in ("fifo", "lifo"):
        items = section.items.values()
        seen: set[str] = set()
        for item in items if policy == "fifo" else reversed(items):
            if item.id == replacing:
                continue
            unit = item.unit
            if unit in seen or unit in skip:
                continue
            seen.add(unit)
            yield None, [m for m in units[unit].values() if m.id != replacing]
        return
    extra = None
    if replacing is not None:
        unit = section.items[replacing].unit
        if unit not in skip:
            skip = skip | {unit}
            rest = [m for m in units[unit].values() if m.id != replacing]
            if rest:
                extra = (unit_rank(policy, rest), rest)
    for rank, unit, members in order.ordered():
        if unit in skip:
            continue
        if extra is not None and extra[0] < rank:
            yield extra
            extra = None
        yield rank, list(members.values())
    if extra is not None:
        yield extra


MAX_ITEMS = "max_items"  # the reason of a victim taken only to keep a section within max_items


def choose_victims(
    section: SectionState,
    incoming_tokens: int,
    incoming_units: frozenset[str] = frozenset(),
    replacing: str | None = None,
    newcomers: dict[str, float] | None = None,
    incoming_count: int = 0,
) -> list[Item]:
    """The items to evict so that `incoming_tokens` more fit the budget, in eviction order
    (`choose_evictions` without the reasons)."""
    return [item for item, _ in choose_evictions(
        section, incoming_tokens, incoming_units, replacing, newcomers, incoming_count
    )]  # fmt: skip


def choose_evictions(
    section: SectionState,
    incoming_tokens: int,
    incoming_units: frozenset[str] = frozenset(),
    replacing: str | None = None,
    newcomers: dict[str, float] | None = None,
    incoming_count: int = 0,
) -> list[tuple[Item, str]]:
    """The items to evict, each with its reason, so that `incoming_tokens` and `incoming_count`
    more items fit the section's budget and its `max_items`, in eviction order.

    `incoming_units` are the groups the new items join: never victims, since evicting one would
    split it. `replacing` is an item being updated: its old tokens are given back first (its
    place is kept: the count does not change). `newcomers` (an add's units, each with its
    highest priority) makes the incoming items compete under the priority policy: an add whose
    own unit would rank among the victims is not admitted. Raises ItemTooLarge, BudgetExceeded
    or NotAdmitted; nothing is decided then.

    A victim's reason is the policy when it was taken while the tokens did not fit yet, else
    `max_items` (taken only for the count). The order comes from the section's `EvictionOrder`
    (sections/model/eviction_order.py), walked only as far as the victims go. Reading it changes
    nothing in the section.
    """
    config = section.config
    budget = config.budget_tokens
    max_items = config.max_items
    if budget is None and max_items is None:
        return []
    name = config.name
    if budget is not None and incoming_tokens > budget:
        raise ItemTooLarge(
            f"the item needs {incoming_tokens} tokens, more than section {name!r}'s whole budget of {budget}"
        )
    if max_items is not None and incoming_count > max_items:
        raise ItemTooLarge(
            f"the write brings {incoming_count} items, more than section {name!r}'s max_items "
            f"of {max_items}"
        )
    used = section.tokens
    if replacing is not None:
        used -= section.items[replacing].tokens
    excess = used + incoming_tokens - budget if budget is not None else -1
    count = len(section.items)
    extra = count + incoming_count - max_items if max_items is not None else -1
    if excess <= 0 and extra <= 0:
        return []
    order = _order(section)
    joined: dict[str, list[Item]] = {}
    for unit in incoming_units:
        members_now = order.units.get(unit)
        if members_now:
            resident = [m for m in members_now.values() if m.id != replacing]
            if resident:
                joined[unit] = resident
    protected = sum(m.tokens for members in joined.values() for m in members)
    if budget is not None and protected + incoming_tokens > budget:
        raise ItemTooLarge(
            f"the groups being added to would hold {protected + incoming_tokens} tokens, more than "
            f"section {name!r}'s budget of {budget}; groups are never split"
        )
    held = sum(len(members) for members in joined.values()) + (replacing is not None)
    if max_items is not None and held + incoming_count > max_items:
        raise ItemTooLarge(
            f"the groups being added to would hold {held + incoming_count} items, more than "
            f"section {name!r}'s max_items of {max_items}; groups are never split"
        )
    if config.policy in ("refuse", "none"):
        if excess > 0:
            raise BudgetExceeded(
                f"section {name!r} is full ({used} of {budget} tokens) and its policy is "
                f"{config.policy!r}: the write of {incoming_tokens} tokens is refused"
            )
        raise BudgetExceeded(
            f"section {name!r} is full ({count} of {max_items} items, max_items) and its "
            f"policy is {config.policy!r}: the write of {incoming_count} items is refused"
        )
    skip = set(incoming_units)
    if config.policy == "priority" and newcomers:
        _compete(section, _residents(section, order, skip, replacing), joined, newcomers, excess,
                 incoming_tokens, extra)  # fmt: skip
    victims: list[tuple[Item, str]] = []
    for _, members in _residents(section, order, skip, replacing):
        reason = config.policy if excess > 0 else MAX_ITEMS
        victims.extend((m, reason) for m in sorted(members, key=lambda m: m.order))
        excess -= sum(m.tokens for m in members)
        extra -= len(members)
        if excess <= 0 and extra <= 0:
            return victims
    raise BudgetExceeded(f"section {name!r} cannot make room for {incoming_tokens} tokens")


def _compete(
    section: SectionState,
    residents: Iterator[tuple[tuple | None, list[Item]]],
    joined: dict[str, list[Item]],
    newcomers: dict[str, float],
    excess: int,
    incoming_tokens: int,
    extra: int = -1,
) -> None:
    """Rank the incoming units with the residents by (highest priority, oldest member) and walk
    the eviction order as `choose_victims` will: if an incoming unit comes up before there is
    room, it is not admitted. Incoming items are newer than every resident, so among equal
    priorities the residents leave first and the newcomer is admitted; a group the add joins
    ranks by its members old and new together."""
    newest = (float("inf"), 0)
    first = None  # the rank of the incoming unit that comes up first
    for unit, priority in newcomers.items():
        residents_of_unit = joined.get(unit, ())
        top = max([priority, *(m.priority for m in residents_of_unit)])
        oldest = min([newest, *(m.order for m in residents_of_unit)])
        if first is None or (top, oldest) < first:
            first = (top, oldest)
    assert first is not None
    for rank, members in residents:
        assert rank is not None  # `priority` ranks every resident
        if first < rank:
            break
        excess -= sum(m.tokens for m in members)
        extra -= len(members)
        if excess <= 0 and extra <= 0:
            return
    config = section.config
    full = []
    if config.budget_tokens is not None:
        full.append(f"{section.tokens} of {config.budget_tokens} tokens")
    if config.max_items is not None:
        full.append(f"{len(section.items)} of {config.max_items} items")
    raise NotAdmitted(
        f"section {config.name!r} is full ({', '.join(full)}) and its policy is 'priority': "
        f"the incoming item of priority {first[0]} ranks below the residents that would have "
        f"to leave to make room for it ({incoming_tokens} tokens), so it is not admitted and "
        "nothing was written"
    )
