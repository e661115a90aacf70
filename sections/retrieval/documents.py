"""What the retrieval indexes hold: one document per live item of a searchable section, and the
changes each record makes to them (docs/search.md, "The index is a projection").

`changes_of` is the one place that says which documents a record adds, replaces or removes;
the BM25 index (search.py) and the embedding index (semantic.py) both follow its changes, so
an evicted, removed, erased or deleted item leaves both with the record that removed it. A
document's row is the item's (seq, k) packed into one integer, so ids order as rows do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eventstore.record import Record
from sections.model.item import Item, item_id, parse_item_id
from sections.model.names import TENANT_SESSION, USER_ID
from sections.model.state import MemoryState, SessionState

K_BITS = 20  # rowid = seq << K_BITS | k: ids order as (seq, k) does


def rowid(seq: int, k: int) -> int:
    return seq << K_BITS | k


def title_of(item: Item) -> str:
    """What is indexed beside the content: an observation's title, a message's speaker (its
    `name`: "what did Caroline say" finds Caroline's turns)."""
    title = item.metadata.get("title") if isinstance(item.metadata, dict) else None
    if isinstance(title, str):
        return title
    name = item.extra.get("name") if item.extra else None
    return name if isinstance(name, str) else ""


def text_of(content: object) -> str:
    """The text of a content: itself, or every string in a JSON value."""
    parts: list[str] = []
    _strings(content, parts)
    return "\n".join(parts)


def _strings(value: object, out: list[str]) -> None:
    """The string leaves of a JSON value (structured contents are searched by their text)."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


ContentOf = Callable[[Item], object]
_MISSING = object()  # a record that does not set an item's content (None is a content)


@dataclass(frozen=True)
class Doc:
    """One document as the index keeps it, taken from the state when its record was applied."""

    row: int
    tenant: str
    session: str
    section: str
    ts: int
    content_seq: int
    tags: tuple[str, ...]
    title: str
    text: str | None  # None: the content is unchanged (only title, tags or metadata changed)
    owner: str | None  # the user it belongs to (the module's docstring), or None


# The changes `follow` queues, applied by the index's own thread.
@dataclass(frozen=True, slots=True)
class Put:
    docs: list[Doc]
    replace: bool = False  # documents already indexed (an update): replace them


@dataclass(frozen=True, slots=True)
class Remove:
    tenant: str
    rows: list[int]


@dataclass(frozen=True, slots=True)
class RemoveWhere:  # every document of a session, or of one of its sections
    tenant: str
    session: str
    section: str | None = None


Change = Put | Remove | RemoveWhere


_FOLLOWED = frozenset(
    (
        "session.created", "session.deleted", "session.erased", "section.configured",
        "section.compacted", "item.added", "item.updated", "item.removed", "items.erased", "turn.ended",
        "sections.cleared",
    )
)  # fmt: skip


def owner_of(session: SessionState, item: Item) -> str | None:
    """The user a document belongs to: the module's docstring."""
    if session.id != TENANT_SESSION:
        return session.user
    user = item.metadata.get(USER_ID) if isinstance(item.metadata, dict) else None
    return user if isinstance(user, str) else None


def _doc(session: SessionState, section: str, item: Item, content: object) -> Doc:
    return Doc(
        rowid(item.seq, item.k), session.tenant, session.id, section, item.ts, item.content_seq,
        item.tags, title_of(item), None if content is _MISSING else text_of(content),
        owner_of(session, item),
    )  # fmt: skip


def section_docs(session: SessionState, name: str, content_of: ContentOf) -> list[Doc]:
    """The documents of a section as it is now: none unless it is searchable."""
    section = session.sections[name]
    if not section.config.searchable:
        return []
    return [_doc(session, name, item, content_of(item)) for item in section.items.values()]


def changes_of(state: MemoryState, record: Record, content_of: ContentOf) -> list[Change]:
    """The index changes of one record, with what they need taken from the state now: the one
    place that says which documents a record adds, replaces or removes (the semantic index,
    sections/retrieval/semantic.py, follows the same changes)."""
    type_ = record.type
    payload = record.payload
    if type_ not in _FOLLOWED or not isinstance(payload, dict):  # control, reads, or erased
        return []
    tenant = record.tenant
    if type_ in ("session.deleted", "session.erased"):
        if "deleted_seq" in payload:  # retention's erase of a deleted incarnation: gone already
            return []
        return [RemoveWhere(tenant, record.session)]
    session = state.sessions.get((tenant, record.session))
    if session is None:
        return []
    # `searchable` may have changed, or a compaction replaced and cut items: index it anew
    if type_ in ("section.configured", "section.compacted") or "compacted" in payload:
        changes: list[Change] = [RemoveWhere(tenant, session.id, record.section)]
        if record.section in session.sections:
            changes.append(Put(section_docs(session, record.section, content_of)))
        return changes
    gone = [v["id"] for v in payload.get("evicted", ())]
    by_section = payload.get("cleared" if type_ == "turn.ended" else "items")
    if isinstance(by_section, dict):
        gone.extend(i for ids in by_section.values() for i in ids)
    changes = [Remove(tenant, [rowid(*parse_item_id(i)) for i in gone])] if gone else []
    docs = []
    for section, id_, content in _written(record, payload):
        found = session.sections.get(section)
        item = found.items.get(id_) if found is not None else None
        if found is not None and item is not None and found.config.searchable:
            docs.append(_doc(session, section, item, content))
    if docs:
        changes.append(Put(docs, replace=type_ == "item.updated"))
    return changes


def _written(record: Record, payload: dict) -> list[tuple[str, str, object]]:
    """(section, item id, content or _MISSING) for each item whose indexed fields `record` set."""
    if record.type == "item.added":
        return [
            (record.section, item_id(record.seq, k), data["content"])
            for k, data in enumerate(payload["items"])
        ]
    if record.type == "item.updated":
        return [(record.section, payload["id"], payload["set"].get("content", _MISSING))]
    if record.type == "session.created":
        order = payload.get("order") or sorted(payload.get("seed", {}))
        seed = payload.get("seed", {})
        written, k = [], 0
        for name in order:
            for data in seed.get(name, ()):
                written.append((name, item_id(record.seq, k), data["content"]))
                k += 1
        return written
    return []
