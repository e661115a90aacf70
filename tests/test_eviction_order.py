"""The kept eviction order chooses exactly what ranking the whole section chooses.

`reference_victims` is choose_victims as it was before sections kept their order (a818173): it
builds every unit, ranks them all and sorts. Random sections under every policy, with groups,
reads, updates, removals, replacements, incoming groups and priority newcomers, are held to it:
same victims in the same order, or the same error with the same message.
"""

from __future__ import annotations

import random
import re

import pytest

from sections.errors import BudgetExceeded, ItemTooLarge, NotAdmitted
from sections.model.config import SectionConfig
from sections.model.eviction_order import unit_rank
from sections.model.item import Item
from sections.model.policies import choose_victims
from sections.model.state import SectionState


def _units(items):
    units: dict[str, list[Item]] = {}
    for item in items:
        units.setdefault(item.unit, []).append(item)
    return units


def reference_victims(section, incoming_tokens, incoming_units=frozenset(), replacing=None,
                      newcomers=None):  # fmt: skip
    config = section.config
    budget = config.budget_tokens
    if budget is None:
        return []
    if incoming_tokens > budget:
        raise ItemTooLarge("whole budget")
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
        raise ItemTooLarge("never split")
    if config.policy in ("refuse", "none"):
        raise BudgetExceeded("refused")
    if config.policy == "priority" and newcomers:
        newest = (float("inf"), 0)
        ranked = [
            (unit_rank("priority", m), None, sum(i.tokens for i in m)) for m in units.values()
        ]
        for unit, priority in newcomers.items():
            residents = joined.get(unit, ())
            top = max([priority, *(m.priority for m in residents)])
            oldest = min([newest, *(m.order for m in residents)])
            ranked.append(((top, oldest), unit, 0))
        left = excess
        for rank, newcomer, tokens in sorted(ranked, key=lambda r: r[0]):
            if newcomer is not None:
                raise NotAdmitted(f"priority {rank[0]} ranks below")
            left -= tokens
            if left <= 0:
                break
    ordered = sorted(units.values(), key=lambda m: unit_rank(config.policy, m))
    victims = []
    for members in ordered:
        victims.extend(sorted(members, key=lambda m: m.order))
        excess -= sum(m.tokens for m in members)
        if excess <= 0:
            return victims
    raise BudgetExceeded("cannot make room")


def _outcome(fn, *args, **kw):
    try:
        return [v.id for v in fn(*args, **kw)]
    except (ItemTooLarge, BudgetExceeded, NotAdmitted) as e:
        kind = type(e).__name__
        if isinstance(e, NotAdmitted):  # the priority named must agree
            return (kind, re.search(r"priority (\S+) ranks below", str(e)).group(1))
        return (kind,)


@pytest.mark.parametrize("seed", range(40))
def test_kept_order_matches_ranking_the_whole_section(seed):
    rng = random.Random(seed)
    policies = ["fifo", "lifo", "lru", "lfu", "priority"]
    section = SectionState(SectionConfig("s", 200, rng.choice(policies), "durable"))
    seq = 0
    groups = ["g1", "g2", "g3", "g4"]
    for _step in range(400):
        op = rng.random()
        live = list(section.items)
        if op < 0.45 or not live:
            seq += 1
            for k in range(rng.choice([1, 1, 1, 2, 3])):
                item = Item(
                    id=str(seq) if k == 0 else f"{seq}.{k}", seq=seq, k=k, content="x",
                    content_seq=seq, h="00" * 32, tokens=rng.randint(1, 30),
                    priority=rng.choice([0, 1, 2, 2.5, 5]),
                    group=rng.choice(groups) if rng.random() < 0.3 else None, last_use=seq,
                )  # fmt: skip
                section.add(item)
        elif op < 0.6:
            section.remove(rng.choice(live))
        elif op < 0.8:
            seq += 1
            item = section.items[rng.choice(live)]
            item.reads += 1
            item.last_use = seq
            section.changed(item)
        elif op < 0.88:
            seq += 1
            item = section.items[rng.choice(live)]
            item.priority = rng.choice([0, 1, 3, 7])
            item.last_use = seq
            section.changed(item)
        elif op < 0.9:
            section.config = SectionConfig("s", 200, rng.choice(policies), "durable")
        # Ask every kind of question of the same state.
        incoming = rng.randint(1, 120)
        units = frozenset(rng.sample(groups, rng.randint(0, 2)))
        newcomers = {u: rng.choice([0, 1, 2, 5]) for u in units} or {"#new.0": rng.choice([0, 2])}
        live = list(section.items)
        replacing = rng.choice(live) if live else None
        for kw in (
            {},
            {"incoming_units": units},
            {"incoming_units": units, "newcomers": newcomers},
            {"replacing": replacing},
            {"replacing": replacing, "incoming_units": frozenset({section.items[replacing].unit})}
            if replacing
            else {},
        ):
            if kw.get("replacing") is None:
                kw.pop("replacing", None)
            expected = _outcome(reference_victims, section, incoming, **kw)
            assert _outcome(choose_victims, section, incoming, **kw) == expected, (kw, incoming)
        # Apply an add's eviction now and then, as the projection would.
        if rng.random() < 0.3:
            try:
                victims = choose_victims(section, incoming)
            except (ItemTooLarge, BudgetExceeded):
                continue
            for v in victims:
                section.remove(v.id)


def test_the_order_survives_a_policy_change_and_is_not_state():
    section = SectionState(SectionConfig("s", 20, "lru", "durable"))
    for seq in range(1, 4):
        section.add(Item(str(seq), seq, 0, "x", seq, "00" * 32, 10, last_use=seq))
    assert [v.id for v in choose_victims(section, 10)] == ["1", "2"]
    assert section.order is not None
    section.config = SectionConfig("s", 20, "lifo", "durable")
    assert [v.id for v in choose_victims(section, 10)] == ["3", "2"]
    other = SectionState(section.config, dict(section.items), section.tokens, section.evictions)
    assert other == section and other.to_json() == section.to_json()
