"""Eviction policies are pure and exact: the victims, in order, for each policy."""

from __future__ import annotations

import pytest

from sections.errors import BudgetExceeded, ConfigError, ItemTooLarge
from sections.model.config import SectionConfig
from sections.model.item import Item
from sections.model.policies import choose_victims
from sections.model.state import SectionState


def _item(seq: int, tokens: int = 10, *, priority: float = 0, last_use: int | None = None,
          reads: int = 0, group: str | None = None) -> Item:  # fmt: skip
    return Item(
        id=str(seq), seq=seq, k=0, content=f"item {seq}", content_seq=seq, h="00" * 32, tokens=tokens,
        priority=priority, group=group, last_use=seq if last_use is None else last_use, reads=reads,
    )  # fmt: skip


def _section(policy: str, budget: int | None, items: list[Item]) -> SectionState:
    section = SectionState(SectionConfig("s", budget, policy, "durable"))
    for item in items:
        section.add(item)
    return section


def _victims(section: SectionState, tokens: int, **kw) -> list[str]:
    return [v.id for v in choose_victims(section, tokens, **kw)]


def test_nothing_is_evicted_while_the_item_fits():
    assert _victims(_section("fifo", 40, [_item(1), _item(2)]), 20) == []


def test_fifo_evicts_the_oldest_first_until_it_fits():
    # Sections hold their items in (seq, k) order, as the projection adds them.
    section = _section("fifo", 40, [_item(1), _item(2), _item(3), _item(4)])
    assert _victims(section, 25) == ["1", "2", "3"]


def test_lifo_evicts_the_newest_first():
    section = _section("lifo", 40, [_item(1), _item(2), _item(3), _item(4)])
    assert _victims(section, 15) == ["4", "3"]


def test_lru_evicts_the_least_recently_used_and_ties_break_by_seq():
    items = [
        _item(1, last_use=50),
        _item(2, last_use=7),
        _item(3, last_use=7),
        _item(4, last_use=60),
    ]
    assert _victims(_section("lru", 40, items), 25) == ["2", "3", "1"]


def test_lfu_evicts_the_least_read_then_least_recent():
    items = [
        _item(1, reads=5),
        _item(2, reads=1, last_use=90),
        _item(3, reads=1, last_use=20),
        _item(4, reads=9),
    ]
    assert _victims(_section("lfu", 40, items), 15) == ["3", "2"]


def test_priority_drops_the_lowest_first_and_among_equals_the_oldest():
    items = [_item(1, priority=5), _item(2, priority=1), _item(3, priority=1), _item(4, priority=9)]
    assert _victims(_section("priority", 40, items), 25) == ["2", "3", "1"]


def test_refuse_refuses_a_write_that_does_not_fit():
    with pytest.raises(BudgetExceeded, match="refuse"):
        choose_victims(_section("refuse", 20, [_item(1), _item(2)]), 1)


def test_an_item_larger_than_the_whole_budget_is_refused_under_every_policy():
    for policy in ("fifo", "lifo", "lru", "lfu", "priority", "refuse"):
        with pytest.raises(ItemTooLarge, match="whole budget of 20"):
            choose_victims(_section(policy, 20, []), 21)


def test_unbounded_sections_never_evict():
    section = _section("none", None, [_item(i, tokens=1000) for i in range(10)])
    assert _victims(section, 10**6) == []


def test_a_group_is_evicted_whole_and_ranks_by_its_newest_use_under_lru():
    items = [
        _item(1, last_use=1, group="g"),
        _item(2, last_use=80, group="g"),
        _item(3, last_use=40),
        _item(4, last_use=50),
    ]
    assert _victims(_section("lru", 40, items), 5) == ["3"]
    assert _victims(_section("lru", 40, items), 15) == ["3", "4"]
    assert _victims(_section("lru", 40, items), 25) == ["3", "4", "1", "2"]


def test_a_group_ranks_by_its_highest_priority():
    items = [_item(1, priority=1, group="g"), _item(2, priority=8, group="g"), _item(3, priority=5)]
    assert _victims(_section("priority", 30, items), 10) == ["3"]


def test_the_group_being_added_to_is_never_a_victim():
    items = [_item(1, group="g"), _item(2, group="g"), _item(3)]
    section = _section("fifo", 30, items)
    assert _victims(section, 10, incoming_units=frozenset({"g"})) == ["3"]
    with pytest.raises(ItemTooLarge, match="never split"):
        choose_victims(section, 15, incoming_units=frozenset({"g"}))


def test_an_update_gives_back_the_old_tokens_first():
    section = _section("fifo", 30, [_item(1), _item(2), _item(3)])
    assert _victims(section, 10, replacing="2") == []
    assert _victims(section, 15, replacing="2") == ["1"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"budget_tokens": 100, "policy": "none"}, "unbounded budget or an immutable"),
        ({"policy": "lru", "audit_reads": False}, "audit_reads cannot be false"),
        ({"policy": "lfu", "audit_reads": False}, "audit_reads cannot be false"),
        ({"policy": "random"}, "is not one of"),
        ({"lifetime": "forever"}, "is not one of"),
        ({"budget_tokens": 0}, "positive integer"),
    ],
)
def test_impossible_section_configs_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SectionConfig("s", **kwargs)


def test_policy_none_is_valid_for_an_immutable_bounded_section():
    SectionConfig("role", 2000, "none", "durable", mutable=False)
