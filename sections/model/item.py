"""An item of a section, and its id.

Item ids derive from the record that added the item: the k-th item a record adds is `"<seq>"`
for k = 0 and `"<seq>.<k>"` otherwise, so a single add's id is its record's seq and every item
of a batch has a stable id. Items keep the (seq, k) pair for ordering; ties break by it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


def item_id(seq: int, k: int) -> str:
    return str(seq) if k == 0 else f"{seq}.{k}"


def parse_item_id(text: str) -> tuple[int, int]:
    seq, _, k = text.partition(".")
    if not seq.isdigit() or (k and not k.isdigit()):
        raise ValueError(f"{text!r} is not an item id")
    return int(seq), int(k or 0)


@dataclass(slots=True)
class Item:
    id: str
    seq: int  # the record that added it
    k: int  # its index in that record
    content: object  # None when `content_seq` must be read back from the log
    content_seq: int  # the record that last set the content (added or updated it)
    h: str  # that record's hash: context manifests cite it
    tokens: int
    kind: str | None = None
    role: str | None = None
    tags: tuple[str, ...] = ()
    priority: float = 0
    metadata: dict = field(default_factory=dict)
    group: str | None = None
    extra: dict = field(default_factory=dict)  # rendering fields: name, tool_calls, tool_call_id
    last_use: int = 0  # seq of the last write or agent read: the lru clock
    reads: int = 0  # agent reads: the lfu count
    committed: bool = False
    ts: int = 0  # `ts` of the record that set the content: search's time filter, dedup windows

    @property
    def order(self) -> tuple[int, int]:
        return (self.seq, self.k)

    @property
    def unit(self) -> str:
        """What eviction and context assembly treat as one: the group, or the item alone."""
        return self.group if self.group is not None else "#" + self.id

    def to_json(self) -> dict:
        data = {
            "id": self.id,
            "seq": self.seq,
            "content_seq": self.content_seq,
            "h": self.h,
            "tokens": self.tokens,
            "kind": self.kind,
            "role": self.role,
            "tags": list(self.tags),
            "priority": self.priority,
            "metadata": self.metadata,
            "group": self.group,
            "last_use": self.last_use,
            "reads": self.reads,
            "committed": self.committed,
            "ts": self.ts,
        }
        if self.extra:
            data["extra"] = self.extra
        data["content"] = self.content
        return data

    @classmethod
    def from_json(cls, data: dict) -> Item:
        # Positional, in field order: a restart runs this once per live item.
        id_ = data["id"]
        seq, k = parse_item_id(id_)
        return cls(
            id_, seq, k, data["content"], data["content_seq"], data["h"], data["tokens"],
            data["kind"], data["role"], tuple(data["tags"]), data["priority"], data["metadata"],
            data["group"], data.get("extra", {}), data["last_use"], data["reads"],
            data["committed"], data["ts"],
        )  # fmt: skip


def units_of(items: Iterable[Item]) -> dict[str, list[Item]]:
    """The items by unit (`Item.unit`), each unit's members in the items' order."""
    units: dict[str, list[Item]] = {}
    for item in items:
        units.setdefault(item.unit, []).append(item)
    return units
