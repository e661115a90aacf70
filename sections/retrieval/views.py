"""What callers get back: item views, search hits, and the extras context assembly injects."""

from __future__ import annotations

from dataclasses import dataclass, field

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.model.commands import payload
from sections.model.config import check_share
from sections.model.item import Item, item_id
from sections.retrieval import inject

MAX_TOP_K = 1000


@dataclass(frozen=True)
class ItemView:
    """An item as returned to callers: a copy, safe to keep."""

    id: str
    section: str
    content: object
    tokens: int
    kind: str | None
    role: str | None
    tags: tuple[str, ...]
    priority: float
    metadata: dict
    group: str | None
    seq: int
    h: str
    content_seq: int  # the record holding the current content
    # name, tool_calls, tool_call_id, images, reasoning_details, agent_calls: those it has
    extra: dict = field(default_factory=dict)
    ts: int = 0  # when its content was set (the record's ts, microseconds)
    record: Record | None = field(default=None, compare=False, repr=False)  # set on writes

    def to_json(self) -> dict:
        data = {
            "id": self.id, "section": self.section, "content": self.content, "tokens": self.tokens,
            "kind": self.kind, "role": self.role, "tags": list(self.tags), "priority": self.priority,
            "metadata": self.metadata, "group": self.group, "seq": self.seq, "h": self.h,
            "ts": self.ts,
        }  # fmt: skip
        data.update(self.extra)
        return data


def view_of(section: str, item: Item) -> ItemView:
    """A live item's view; its content is None while it is kept in the log (see `fill`)."""
    return ItemView(
        item.id, section, item.content, item.tokens, item.kind, item.role, item.tags,
        item.priority, dict(item.metadata), item.group, item.seq, item.h, item.content_seq,
        dict(item.extra), item.ts,
    )  # fmt: skip


def added_views(record: Record) -> list[ItemView]:
    """The items an `item.added` record added, built from the durable record alone (so an
    idempotent retry, which has only the first record, answers the same)."""
    return [
        ItemView(
            item_id(record.seq, k),
            record.section,
            data.get("content"),
            data["tokens"],
            data.get("kind"),
            data.get("role"),
            tuple(data.get("tags", ())),
            data.get("priority", 0),
            data.get("metadata", {}),
            data.get("group"),
            record.seq,
            record.h,
            record.seq,
            data.get("extra", {}),
            record.ts,
            record,
        )
        for k, data in enumerate(payload(record)["items"])
    ]


@dataclass(frozen=True)
class SearchHit:
    """A search result: the item, its session, its score (higher is better) and a snippet with
    the matched words between the markers. A search with a `scope` ranks as recall does
    (sections/retrieval/recall.py) and says which `signals` make up the score (`bm25`,
    `neighbours`, `session`, `semantic`) and when the hit's session took place (`time`)."""

    session: str
    item: ItemView
    score: float
    snippet: str
    signals: dict[str, float] | None = None
    time: str | None = None

    def to_json(self) -> dict:
        data = {"session": self.session, "score": self.score, "snippet": self.snippet,
                "item": self.item.to_json()}  # fmt: skip
        if self.signals is not None:
            data["signals"] = self.signals
            data["time"] = self.time
        return data


@dataclass(frozen=True)
class Extra:
    """What context assembly injects besides the sections (sections/retrieval/inject.py)."""

    query: str | None = None
    observations: int = 0
    summaries: int = 0
    observation_chars: int = inject.OBSERVATION_CHARS
    facts: int = 0  # valid facts: the query's hits, then this session's, then the newest
    sessions: int = 0  # recent sessions as a `<memory:sessions>` block (AgentOps' runtime)
    # Recall of the user's past (sections/retrieval/recall.py): None or True, on with a query, at
    # the memory's share; False, off; a number from 0 to 1, on, with that share of the budget.
    recall: bool | float | None = None

    @classmethod
    def of(cls, query: str | None = None, observations: int = 0, summaries: int = 0,
           observation_chars: int = inject.OBSERVATION_CHARS, facts: int = 0,
           sessions: int = 0, recall: bool | float | None = None) -> Extra:  # fmt: skip
        if query is not None and not isinstance(query, str):
            raise InvalidInput("query must be a string")
        for name, value, top in (("observations", observations, MAX_TOP_K),
                                 ("summaries", summaries, MAX_TOP_K),
                                 ("facts", facts, MAX_TOP_K),
                                 ("sessions", sessions, MAX_TOP_K),
                                 ("observation_chars", observation_chars, 1 << 20)):  # fmt: skip
            if type(value) is not int or not 0 <= value <= top:
                raise InvalidInput(f"{name} must be an integer from 0 to {top}")
        if observation_chars < 1:
            raise InvalidInput("observation_chars must be at least 1")
        if recall is not None and type(recall) is not bool:
            check_share(recall, InvalidInput)
        return cls(query, observations, summaries, observation_chars, facts, sessions, recall)

    def recall_share(self, configured: float) -> float | None:
        """The share of the budget recall keeps, or None when there is no recall."""
        if not self.query or self.recall is False:
            return None
        return configured if self.recall is None or self.recall is True else float(self.recall)
