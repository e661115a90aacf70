"""LangGraph's long-term store on a `Memory`: `LedgerStore` (docs/adapters/langgraph.md).

A namespace is a session (`lgstore:<namespace>`, the namespace kept in its metadata), each key
an item of its section `store` (searchable) or `store_unindexed` (a put with `index=False`),
whose content is the value and whose metadata is the key and its creation time. A put is one
record (`item.added`, or `item.updated` for a key held), a delete an `item.removed`, every read
that returns values an `items.read`. Search ranks with the memory's own ranking over the
namespaces' sessions: BM25 (docs/search.md), or with the `semantic` extra and `recall_semantic`
on, recall's hybrid with embeddings (docs/recall.md).
`erase_namespace` erases a namespace from the log's files. A key put with a TTL keeps its
expiry in its metadata: once past it, no read returns it, and `sweep_ttl` removes it.

Imports LangGraph (the `langgraph` extra): nothing else of ledgermem imports this module.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from eventstore.errors import InvalidInput
from eventstore.jcs import check_value
from sections.adapters import foreign_ids
from sections.adapters.own_memory import Owned
from sections.errors import ItemNotFound, NotFound, SessionNotFound
from sections.model.state import MemoryState
from sections.retrieval.views import MAX_TOP_K, ItemView
from sections.runtime.memory import Memory
from sections.runtime.session import Session

__all__ = ["LedgerStore"]

INDEXED, UNINDEXED = "store", "store_unindexed"
ADAPTER_KEY, ADAPTER, NAMESPACE_KEY = "adapter", "langgraph-store", "namespace"
PREFIX = "lgstore:"
ATTEMPTS = 32  # plans of one put, when puts and deletes of the same key race
SECTION_SETTINGS: dict[str, dict] = {
    INDEXED: {"budget_tokens": None, "policy": "none", "lifetime": "durable", "searchable": True},
    UNINDEXED: {"budget_tokens": None, "policy": "none", "lifetime": "durable"},
}


@dataclass(frozen=True)
class KeyEntry:
    """What the state says of one key, without its value."""

    item: str
    section: str
    created: int  # microseconds
    order: tuple[int, int]
    ttl: float | None = None  # minutes, as the put gave it
    expires: int | None = None  # microseconds
    # Older items of the same key, (section, id): two puts of a new key at once both add one.
    stale: tuple[tuple[str, str], ...] = ()

    def metadata(self, key: str, now: int) -> dict:
        """The item's metadata with its expiry moved `ttl` minutes past `now` (a refresh)."""
        return {"key": key, "created": self.created, **_expiry(self.ttl, now)}


Keys = dict[tuple[str, ...], dict[str, KeyEntry]]  # namespace -> key -> its newest item


def session_of(namespace: tuple[str, ...]) -> str:
    text = json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":"))
    return PREFIX + foreign_ids.encode(text, 128 - len(PREFIX))


class LedgerStore(BaseStore):
    """`BaseStore` on a ledgermem memory: `LedgerStore()` in-process (LangGraph's
    `InMemoryStore`), `data_dir=` durable there, `memory=` a `Memory` of the caller's.
    `ttl=`: LangGraph's `TTLConfig` (`default_ttl`, `refresh_on_read`, `sweep_interval_minutes`
    for a sweeper thread; an expired key is never returned, swept or not). `clock=`: the time
    in microseconds that expiry and `created_at` are measured by (the wall clock)."""

    supports_ttl = True

    def __init__(self, memory: Memory | None = None, *,
                 data_dir: str | os.PathLike[str] | None = None, tenant: str | None = None,
                 ttl: TTLConfig | None = None,
                 clock: Callable[[], int] | None = None) -> None:  # fmt: skip
        self._own = Owned(self, memory, data_dir, tenant, "ledgermem-langgraph-store-")
        self.memory = self._own.memory
        self.tenant = self._own.tenant
        self.ttl_config = ttl
        self.clock = clock or now_us  # microseconds: what expiry is measured by
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        interval = (ttl or {}).get("sweep_interval_minutes")
        if interval:
            self._sweeper = threading.Thread(target=self._sweep_every, args=(interval * 60.0,),
                                             name="langgraph-store-ttl", daemon=True)  # fmt: skip
            self._sweeper.start()

    def close(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join()
        self._own.close()

    def _sweep_every(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            self.sweep_ttl()

    def sweep_ttl(self) -> int:
        """Remove every expired key (`item.removed`, one per namespace); returns how many."""
        swept = 0
        for namespace, by_section in self._expired().items():
            for section, ids in by_section.items():
                try:
                    self._session(namespace).remove(section, ids)
                except NotFound:  # removed or erased meanwhile
                    continue
                swept += len(ids)
        return swept

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- BaseStore ----------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Each op in order, each its own records (a batch is not one transaction)."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise TypeError(f"unknown store operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` on a worker thread, so the event loop never waits for an fsync."""
        return await asyncio.to_thread(self.batch, list(ops))

    def erase_namespace(self, namespace: tuple[str, ...], *, reason: str = "langgraph") -> None:
        """Erase a namespace from the log's files: every record of its session is redacted
        (a delete only removes a key from the memory, its value stays in the log's history)."""
        if tuple(namespace) in self._keys():
            self._session(tuple(namespace)).erase_all(reason=reason)

    # ---- the state, without content -----------------------------------------------------------

    def _keys(self) -> Keys:
        """Each namespace's live keys: the newest item of each key, unless it has expired."""
        tenant, now = self.tenant, self.clock()

        def look(state: MemoryState) -> Keys:
            found: Keys = {}
            for (t, _), session in state.sessions.items():
                if t != tenant or session.metadata.get(ADAPTER_KEY) != ADAPTER:
                    continue
                keys: dict[str, KeyEntry] = {}
                for name in (INDEXED, UNINDEXED):
                    section = session.sections.get(name)
                    for item in section.items.values() if section else ():
                        meta = item.metadata
                        held = KeyEntry(item.id, name, meta["created"], item.order,
                                        meta.get("ttl"), meta.get("expires"))  # fmt: skip
                        old = keys.get(meta["key"])
                        if old is None:
                            keys[meta["key"]] = held
                        else:  # the newer one holds the key; the other is stale
                            newer, older = (held, old) if old.order < held.order else (old, held)
                            gone = (*old.stale, (older.section, older.item))
                            keys[meta["key"]] = replace(newer, stale=gone)
                live = {k: h for k, h in keys.items() if h.expires is None or h.expires > now}
                if live:
                    found[tuple(session.metadata[NAMESPACE_KEY])] = live
            return found

        return self.memory.read(look)

    def _expired(self) -> dict[tuple[str, ...], dict[str, list[str]]]:
        """namespace -> section -> the ids of its expired items."""
        tenant, now = self.tenant, self.clock()

        def look(state: MemoryState) -> dict[tuple[str, ...], dict[str, list[str]]]:
            found: dict[tuple[str, ...], dict[str, list[str]]] = {}
            for (t, _), session in state.sessions.items():
                if t != tenant or session.metadata.get(ADAPTER_KEY) != ADAPTER:
                    continue
                for name in (INDEXED, UNINDEXED):
                    section = session.sections.get(name)
                    ids = [i.id for i in (section.items.values() if section else ())
                           if i.metadata.get("expires") is not None
                           and i.metadata["expires"] <= now]  # fmt: skip
                    if ids:
                        namespace = tuple(session.metadata[NAMESPACE_KEY])
                        found.setdefault(namespace, {})[name] = ids
            return found

        return self.memory.read(look)

    def _refresh(self, namespace: tuple[str, ...], found: list[tuple[str, KeyEntry]]) -> None:
        """Move the expiry of keys read with `refresh_ttl` (an `item.updated` each)."""
        now = self.clock()
        for key, held in found:
            if held.ttl is not None:
                try:
                    self._session(namespace).update(held.section, held.item,
                                                    metadata=held.metadata(key, now))  # fmt: skip
                except NotFound:  # removed meanwhile
                    continue

    def _session(self, namespace: tuple[str, ...]) -> Session[Memory]:
        return Session(self.memory, self.tenant, session_of(namespace))

    def _read(self, namespace: tuple[str, ...], section: str,
              ids: list[str] | None) -> list[ItemView]:  # fmt: skip
        try:
            return self._session(namespace).get(section, ids)
        except NotFound:  # removed meanwhile: as if read before it was put
            return []

    # ---- the operations -----------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        _check(op.namespace)
        held = self._keys().get(tuple(op.namespace), {}).get(op.key)
        if held is None:
            return None
        views = self._read(tuple(op.namespace), held.section, [held.item])
        if views and op.refresh_ttl:
            self._refresh(tuple(op.namespace), [(op.key, held)])
        return _item(tuple(op.namespace), op.key, held, views[0]) if views else None

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        _check(namespace, root=True)
        if op.value is not None:
            if not isinstance(op.value, dict):
                raise InvalidInput(f"a store value is a dict, not {type(op.value).__name__}")
            # Checked before the namespace's session is created: a refusal appends nothing.
            check_value(op.value)
        for _ in range(ATTEMPTS - 1):
            try:
                return self._put_once(op, namespace)
            except ItemNotFound:  # a put or delete of the key at once changed its items: again
                continue
        return self._put_once(op, namespace)

    def _put_once(self, op: PutOp, namespace: tuple[str, ...]) -> None:
        """One plan of a put from the state, then its writes (ItemNotFound when another put
        or delete of the key removed an item the plan names)."""
        held = self._keys().get(namespace, {}).get(op.key)
        session = self._session(namespace)
        if held is not None and held.stale:
            _remove(session, held.stale)
        if op.value is None:
            if held is not None:
                _remove(session, [(held.section, held.item)])
            return
        section = UNINDEXED if op.index is False else INDEXED
        now = self.clock()
        ttl = op.ttl if isinstance(op.ttl, int | float) else None
        created = held.created if held is not None else now
        meta = {"key": op.key, "created": created, **_expiry(ttl, now)}
        if held is not None and held.section == section:
            session.update(section, held.item, content=dict(op.value), metadata=meta)
            return
        if held is not None:  # indexed before, not now (or the other way): one section holds it
            session.remove(held.section, [held.item])
        item = {"content": dict(op.value), "metadata": meta}
        try:
            session.add_many(section, [item])
        except SessionNotFound:
            self.memory.get_or_create(session.id, tenant=self.tenant, sections=SECTION_SETTINGS,
                                      metadata={ADAPTER_KEY: ADAPTER, NAMESPACE_KEY: list(namespace)},
                                      token_counter="approx-chars-per-4")  # fmt: skip
            session.add_many(section, [item])

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        _check(prefix, empty=True)
        keys = {ns: k for ns, k in self._keys().items() if ns[: len(prefix)] == prefix}
        if not keys:
            return []
        # Without a filter the page is all a query needs; with one, every hit is a candidate.
        wanted = op.offset + op.limit if not op.filter else sum(len(k) for k in keys.values())
        found = self._ranked(op.query, keys, wanted) if op.query else self._all(keys)
        matching = [f for f in found if _matches(f.value, op.filter)]
        page = matching[op.offset : op.offset + op.limit]
        for item in page if op.refresh_ttl else ():
            self._refresh(item.namespace, [(item.key, keys[item.namespace][item.key])])
        return page

    def _ranked(self, query: str, keys: Keys, wanted: int) -> list[SearchItem]:
        """The memory's ranking over the namespaces' indexed items, best first: the `wanted`
        best, at most the search's MAX_TOP_K."""
        by_session = {session_of(ns): ns for ns in keys}
        held = {(session_of(ns), h.item): (ns, key, h) for ns, k in keys.items()
                for key, h in k.items()}  # fmt: skip
        top_k, sessions = min(MAX_TOP_K, max(1, wanted)), sorted(by_session)
        if self.memory.config.recall_semantic:
            # The hybrid ranking of recall (docs/recall.md). No `sections=`: a section filter
            # drops the semantic hits; a namespace's only searchable section is INDEXED anyway.
            # Hits that only a neighbour or the session's share brought (signals meant for a
            # conversation's turns, not for keys) are left out, as are the tenant's
            # observations a scoped search adds (below: not the store's).
            hits = self.memory.search(query, tenant=self.tenant, sessions=sessions,
                                      scope="tenant", top_k=top_k)  # fmt: skip
            hits = [h for h in hits if {"bm25", "semantic"} & set(h.signals or ())]
        else:  # BM25 over the search index (docs/search.md)
            hits = self.memory.search(query, tenant=self.tenant, sessions=sessions,
                                      sections=[INDEXED], top_k=top_k)  # fmt: skip
        out = []
        for hit in hits:
            ns_key_held = held.get((hit.session, hit.item.id))
            if ns_key_held is not None:
                ns, key, h = ns_key_held
                out.append(_search_item(ns, key, h, hit.item, float(hit.score)))
        return out

    def _all(self, keys: Keys) -> list[SearchItem]:
        """Every value of the namespaces, newest update first (LangGraph's stores' order)."""
        out = []
        for ns, by_key in keys.items():
            by_item = {h.item: (key, h) for key, h in by_key.items()}
            for section in (INDEXED, UNINDEXED):
                if not any(h.section == section for h in by_key.values()):
                    continue
                for view in self._read(ns, section, None):
                    if view.id in by_item:
                        key, h = by_item[view.id]
                        out.append(_search_item(ns, key, h, view, None))
        return sorted(out, key=lambda i: i.updated_at, reverse=True)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = [ns for ns in self._keys()
                      if all(_does_match(c, ns) for c in op.match_conditions or ())]  # fmt: skip
        if op.max_depth is not None:
            namespaces = [ns[: op.max_depth] for ns in namespaces]
        return sorted(set(namespaces))[op.offset : op.offset + op.limit]


def _remove(session: Session[Memory], items: Iterable[tuple[str, str]]) -> None:
    """Remove (section, id) pairs: one `item.removed` per section."""
    by_section: dict[str, list[str]] = {}
    for section, item in items:
        by_section.setdefault(section, []).append(item)
    for section, ids in by_section.items():
        session.remove(section, ids)


def _check(namespace: tuple[str, ...], *, root: bool = False, empty: bool = False) -> None:
    if not namespace and not empty:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(f"Invalid namespace label {label!r} in {namespace}")
    if root and namespace[0] == "langgraph":
        raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph": {namespace}')


def now_us() -> int:
    return int(datetime.now(UTC).timestamp() * 1_000_000)


def _expiry(ttl: float | None, now: int) -> dict:
    """The metadata of a key's expiry: `ttl` minutes after `now`; none without a ttl."""
    if ttl is None:
        return {}
    return {"ttl": ttl, "expires": now + int(ttl * 60_000_000)}


def _time(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, UTC)


def _item(namespace: tuple[str, ...], key: str, held: KeyEntry, view: ItemView) -> Item:
    value: Any = view.content
    return Item(value=value, key=key, namespace=namespace, created_at=_time(held.created),
                updated_at=_time(view.ts))  # fmt: skip


def _search_item(namespace: tuple[str, ...], key: str, held: KeyEntry, view: ItemView,
                 score: float | None) -> SearchItem:  # fmt: skip
    value: Any = view.content
    return SearchItem(namespace=namespace, key=key, value=value, score=score,
                      created_at=_time(held.created), updated_at=_time(view.ts))  # fmt: skip


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unknown match type {condition.match_type!r}: prefix or suffix")
    return all(p == "*" or n == p for n, p in pairs)


def _matches(value: dict, wanted: dict[str, Any] | None) -> bool:
    return not wanted or all(_compare(value.get(k), v) for k, v in wanted.items())


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: float(a) > float(b),
    "$gte": lambda a, b: float(a) >= float(b),
    "$lt": lambda a, b: float(a) < float(b),
    "$lte": lambda a, b: float(a) <= float(b),
}


def _compare(value: Any, wanted: Any) -> bool:
    """A filter's value against a stored one, as LangGraph's stores compare (JSONB-like)."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op not in _OPERATORS:
                    raise ValueError(f"unsupported filter operator {op!r}")
                if value is None and op not in ("$eq", "$ne"):
                    return False
                if not _OPERATORS[op](value, operand):
                    return False
            return True
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (isinstance(value, list | tuple) and len(value) == len(wanted)
                and all(_compare(a, b) for a, b in zip(value, wanted, strict=True)))  # fmt: skip
    return bool(value == wanted)
