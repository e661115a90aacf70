"""The projection's state: sessions, their sections and items (sections/model/item.py). Plain
data, no I/O."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import orjson

from sections.model.config import SectionConfig
from sections.model.eviction_order import EvictionOrder
from sections.model.item import Item
from sections.model.names import USER_ID

# Contents larger than this stay in the log and are read back by their record's seq, so memory
# grows with the number of live items rather than with their size. A string is measured in
# characters (what `len` gives without encoding it again); any other JSON content in bytes of
# its compact JSON (sections/model/projection.py `_inline`).
INLINE_CONTENT_LIMIT = 4096


@dataclass(slots=True)
class SectionState:
    config: SectionConfig
    # In (seq, k) order: the projection adds items in log order and snapshots keep the order.
    # The fifo policy relies on it.
    items: dict[str, Item] = field(default_factory=dict)
    tokens: int = 0
    evictions: int = 0
    # The eviction order (sections/model/eviction_order.py), built by the first choice of victims that
    # needs one and kept by add, remove and changed from then on. Derived from `items`: not part
    # of the state's JSON, hash or equality.
    order: EvictionOrder | None = field(default=None, compare=False, repr=False)

    def add(self, item: Item) -> None:
        self.items[item.id] = item
        self.tokens += item.tokens
        if self.order is not None:
            self.order.added(item)

    def remove(self, item_id_: str) -> Item | None:
        item = self.items.pop(item_id_, None)
        if item is not None:
            self.tokens -= item.tokens
            if self.order is not None:
                self.order.removed(item)
        return item

    def changed(self, item: Item) -> None:
        """Call after changing a live item's reads, last_use or priority: they rank it."""
        if self.order is not None:
            self.order.changed(item)

    def to_json(self) -> dict:
        return {
            "config": self.config.to_json(),
            "tokens": self.tokens,
            "evictions": self.evictions,
            "items": [item.to_json() for item in self.items.values()],
        }


@dataclass(slots=True)
class SessionState:
    tenant: str
    id: str
    created_seq: int
    metadata: dict
    counter: dict  # the token counter's name and version
    sections: dict[str, SectionState]
    version: int  # seq of the last record that changed this session's memory
    last_seq: int  # seq of the last record of this session of any type (reads too)
    turn: int = 0
    ended_seq: int | None = None
    idempotency: dict[str, tuple[int, int, str]] = field(
        default_factory=dict
    )  # key -> (seq, ts, type)
    # What a summary reports (sections/retrieval/summaries.py), counted as records are applied.
    messages: int = 0  # items ever added to `messages`
    first_user: str | None = None  # ids of the first and last user messages
    last_user: str | None = None
    touched: list[str] = field(default_factory=list)  # sections written, in first-write order
    roles: dict[str, int] = field(default_factory=dict)  # messages ever added, by role
    summary: dict | None = None  # the newest `session.summarized`, and where it is
    summary_at: tuple[int, str] | None = None  # (seq, h)
    # Times (record `ts`, microseconds): of `session.created`, and of the record at `version`,
    # the last change to the session's memory (reads are not activity). Retention ranks by it.
    created_ts: int = 0
    active_ts: int = 0

    @property
    def user(self) -> str | None:
        """The user the session belongs to (its metadata's `user_id`), or None: the tenant's.
        Recall, observations and search draw the line between users by it."""
        user = self.metadata.get(USER_ID) if isinstance(self.metadata, dict) else None
        return user if isinstance(user, str) else None

    def touch(self, section: str) -> None:
        if section not in self.touched:
            self.touched.append(section)

    def to_json(self) -> dict:
        return {
            "tenant": self.tenant,
            "session": self.id,
            "created_seq": self.created_seq,
            "metadata": self.metadata,
            "counter": self.counter,
            "version": self.version,
            "last_seq": self.last_seq,
            "turn": self.turn,
            "ended_seq": self.ended_seq,
            "idempotency": {k: list(v) for k, v in self.idempotency.items()},
            "messages": self.messages,
            "first_user": self.first_user,
            "last_user": self.last_user,
            "touched": self.touched,
            "roles": self.roles,
            "summary": self.summary,
            "summary_at": list(self.summary_at) if self.summary_at else None,
            "created_ts": self.created_ts,
            "active_ts": self.active_ts,
            "sections": {name: s.to_json() for name, s in self.sections.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> SessionState:
        sections = {}
        for name, s in data["sections"].items():
            section = SectionState(
                SectionConfig.from_json(name, s["config"]),
                tokens=s["tokens"],
                evictions=s["evictions"],
            )
            for item in s["items"]:
                section.items[item["id"]] = Item.from_json(item)
            sections[name] = section
        return cls(
            tenant=data["tenant"], id=data["session"], created_seq=data["created_seq"],
            metadata=data["metadata"], counter=data["counter"], sections=sections,
            version=data["version"], last_seq=data["last_seq"], turn=data["turn"],
            ended_seq=data["ended_seq"],
            idempotency={k: tuple(v) for k, v in data["idempotency"].items()},
            messages=data["messages"], first_user=data["first_user"], last_user=data["last_user"],
            touched=data["touched"], roles=data["roles"], summary=data["summary"],
            summary_at=tuple(data["summary_at"]) if data["summary_at"] else None,
            created_ts=data["created_ts"], active_ts=data["active_ts"],
        )  # fmt: skip


@dataclass(slots=True)
class MemoryState:
    """Every live session, keyed by (tenant, session id), and the position of the fold."""

    sessions: dict[tuple[str, str], SessionState] = field(default_factory=dict)
    seq: int = -1  # the last record applied
    h: str = ""  # its hash
    # Erase records whose `redaction` has not been appended yet: erase seq -> seqs to redact.
    # A fact about the log rather than about memory, so it is left out of the state hash.
    pending_erasures: dict[int, list[int]] = field(default_factory=dict)
    # Retention deletions with `erase` whose `session.erased` is not appended yet (also a fact
    # about the log, left out of the hash): deletion seq -> [tenant, session, reason].
    pending_retention: dict[int, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        ordered = sorted(self.sessions.items())
        return {
            "seq": self.seq,
            "h": self.h,
            "sessions": [s.to_json() for _, s in ordered],
            "pending_erasures": {str(k): v for k, v in self.pending_erasures.items()},
            "pending_retention": {str(k): v for k, v in self.pending_retention.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> MemoryState:
        state = cls(seq=data["seq"], h=data["h"])
        state.pending_erasures = {int(k): v for k, v in data.get("pending_erasures", {}).items()}
        state.pending_retention = {int(k): v for k, v in data.get("pending_retention", {}).items()}
        for s in data["sessions"]:
            session = SessionState.from_json(s)
            state.sessions[(session.tenant, session.id)] = session
        return state

    def state_hash(self) -> str:
        """A deterministic hash of every session's state. The fold's position (seq, h) is left
        out: control records such as log.close and log.resume move it without changing memory."""
        sessions = [s.to_json() for _, s in sorted(self.sessions.items())]
        return hashlib.sha256(orjson.dumps(sessions, option=orjson.OPT_SORT_KEYS)).hexdigest()
