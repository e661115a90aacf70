"""A section's eviction order, kept as records apply, so an add to a full section costs
O(victims · log n) instead of ranking every unit of the section (issue 15).

`EvictionOrder` holds the section's units (group, or `#id` for an ungrouped item) with their
members, and for the ranked policies (lru, lfu, priority) a binary heap of (rank, unit) entries.
The rank is `unit_rank`, the one definition the policies use (sections/model/policies.py documents
it). Every change that can move a unit's rank pushes a fresh entry for it: a member added or
removed (SectionState.add / remove), an agent read or an update (SectionState.changed, from the
projection). Older entries of the unit become stale: an entry is current only while its rank
equals the unit's rank now, and stale entries are skipped when read and dropped from the top of
the heap as the state changes. The heap is rebuilt when stale entries outnumber the units.

fifo and lifo need no heap: a section holds its items in (seq, k) order, so walking the items
forwards (fifo) or backwards (lifo) meets each unit first at its rank.

The order is built lazily, by the first choice of victims that needs it (a section under its
budget, an unbounded one or a snapshot just loaded never builds one), and rebuilt when the
policy changes. Reading it (`ordered`) changes nothing, so a command that is then refused
leaves the state as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from heapq import heapify, heappop, heappush

from sections.model.item import Item

HEAP_POLICIES = frozenset({"lru", "lfu", "priority"})


def unit_rank(policy: str, members: Iterable[Item]) -> tuple:
    """The rank of a unit under `policy`: lowest leaves first. Ranks of different units never
    tie, since each ends with (or is) a member's unique (seq, k)."""
    members = list(members)
    if len(members) == 1:  # an ungrouped item, nearly every unit: the same ranks, read directly
        m = members[0]
        if policy == "fifo":
            return (m.order,)
        if policy == "lifo":
            return (-m.order[0], -m.order[1])
        if policy == "lru":
            return (m.last_use, m.order)
        if policy == "lfu":
            return (m.reads, m.last_use, m.order)
        if policy == "priority":
            return (m.priority, m.order)
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


class EvictionOrder:
    __slots__ = ("policy", "units", "heap")

    def __init__(self, policy: str, items: Iterable[Item]) -> None:
        self.policy = policy
        self.units: dict[str, dict[str, Item]] = {}
        for item in items:
            self.units.setdefault(item.unit, {})[item.id] = item
        self.heap: list[tuple[tuple, str]] | None = None
        if policy in HEAP_POLICIES:
            self._rebuild()

    def _rebuild(self) -> None:
        policy = self.policy
        self.heap = [(unit_rank(policy, m.values()), u) for u, m in self.units.items()]
        heapify(self.heap)

    def added(self, item: Item) -> None:
        unit = item.unit
        members = self.units.get(unit)
        if members is None:
            members = self.units[unit] = {}
        members[item.id] = item
        if self.heap is not None:
            self._push(unit, members)
            self._prune()

    def removed(self, item: Item) -> None:
        unit = item.unit
        members = self.units.get(unit)
        if members is None or members.pop(item.id, None) is None:
            return
        if not members:
            del self.units[unit]
        elif self.heap is not None:
            self._push(unit, members)
        if self.heap is not None:
            self._prune()

    def changed(self, item: Item) -> None:
        """`item`'s reads, last use or priority changed."""
        if self.heap is None:
            return
        members = self.units.get(item.unit)
        if members is not None:
            self._push(item.unit, members)
            self._prune()

    def _push(self, unit: str, members: dict[str, Item]) -> None:
        heap = self.heap
        assert heap is not None
        heappush(heap, (unit_rank(self.policy, members.values()), unit))
        if len(heap) > 2 * len(self.units) + 64:
            self._rebuild()

    def _current(self, rank: tuple, unit: str) -> dict[str, Item] | None:
        members = self.units.get(unit)
        if members is None or unit_rank(self.policy, members.values()) != rank:
            return None
        return members

    def _prune(self) -> None:
        heap = self.heap
        assert heap is not None
        while heap and self._current(*heap[0]) is None:
            heappop(heap)

    def ordered(self) -> Iterator[tuple[tuple, str, dict[str, Item]]]:
        """The units of a ranked policy in eviction order, as (rank, unit, members), lowest
        first. Walks the heap without changing it: a frontier of heap positions, smallest entry
        first, so k units cost O(k log k) plus the stale entries met on the way."""
        heap = self.heap
        assert heap is not None
        n = len(heap)
        if not n:
            return
        frontier = [(heap[0], 0)]
        seen: set[str] = set()
        while frontier:
            entry, i = heappop(frontier)
            child = 2 * i + 1
            if child < n:
                heappush(frontier, (heap[child], child))
                if child + 1 < n:
                    heappush(frontier, (heap[child + 1], child + 1))
            rank, unit = entry
            if unit in seen:
                continue
            members = self._current(rank, unit)
            if members is None:
                continue
            seen.add(unit)
            yield rank, unit, members
