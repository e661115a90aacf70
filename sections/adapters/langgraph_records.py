"""LangGraph's checkpoints and pending writes as items of a session, and back (pure).

A LangGraph thread is one session; its checkpoints and pending writes are the items of its
section `checkpoints` (docs/adapters/langgraph.md). What LangGraph's serializer makes of a
value, `(type, bytes)`, is held in a record as `{"type": type, "b64": <base64 of bytes>}`:
the serializer's bytes are msgpack, which JSON cannot carry, and base64 keeps them exactly.

An item's metadata is the index a read walks without the content (namespace, checkpoint id,
parent, run id; for a write its task, index, path and channel), so the saver finds what to read
in one consistent read of the state and then reads only those items' contents (traced).

Nothing is overwritten in the log, so reads fold what it holds: a checkpoint put again under
the same id is its newest item; a write under a (task, index) already held is ignored unless
its index is a special one (negative: an error, an interrupt, ...), whose newest write wins, as
LangGraph's own savers do.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sections.adapters import foreign_ids

SECTION = "checkpoints"
CHECKPOINT = "checkpoint"  # an item's kind
WRITE = "write"
ADAPTER_KEY = "adapter"  # session metadata: which adapter made the session
ADAPTER = "langgraph-checkpoint"
THREAD_KEY = "thread_id"  # session metadata: LangGraph's own thread id, exactly
PREFIX = "langgraph:"
# The section: every checkpoint kept (no budget, never evicted), not searched (its content is
# base64), token counts by the cheap rule (a checkpoint is not context).
SECTION_SETTINGS: dict[str, dict] = {
    SECTION: {"budget_tokens": None, "policy": "none", "lifetime": "durable", "searchable": False}
}
TOKEN_COUNTER = "approx-chars-per-4"


def session_of(thread_id: str) -> str:
    """The session id of a LangGraph thread id (any string; foreign_ids.py's encoding)."""
    return PREFIX + foreign_ids.encode(thread_id, 128 - len(PREFIX))


def session_metadata(thread_id: str) -> dict:
    return {ADAPTER_KEY: ADAPTER, THREAD_KEY: thread_id}


def typed_to_json(typed: tuple[str, bytes]) -> dict:
    kind, data = typed
    return {"type": kind, "b64": base64.b64encode(data).decode("ascii")}


def typed_from_json(value: Mapping[str, Any]) -> tuple[str, bytes]:
    return value["type"], base64.b64decode(value["b64"])


@dataclass(frozen=True)
class Entry:
    """What the state says of one item, without its content."""

    id: str
    kind: str
    metadata: dict
    order: tuple[int, int]


def entries_of(items: Iterable[Any]) -> list[Entry]:
    """The entries of a section's items (sections.model.item.Item), in log order."""
    return [Entry(i.id, i.kind or "", dict(i.metadata), i.order) for i in items]


def target(items: Collection[Any], ns: str, checkpoint_id: str | None,
           ) -> tuple[Entry, list[Entry]] | None:  # fmt: skip
    """The checkpoint a `get_tuple` names (that id, or the greatest of the namespace; its
    newest put) and its writes, from a section's items in log order. One pass over the items
    that makes entries only of what it returns: it runs under the memory's lock."""
    best = None
    for item in items:
        meta = item.metadata
        if item.kind != CHECKPOINT or meta["ns"] != ns:
            continue
        if checkpoint_id is not None and meta["checkpoint_id"] != checkpoint_id:
            continue
        if best is None or meta["checkpoint_id"] >= best.metadata["checkpoint_id"]:
            best = item
    if best is None:
        return None
    chosen_id = best.metadata["checkpoint_id"]
    writes = [
        i for i in items
        if i.kind == WRITE and i.metadata["checkpoint_id"] == chosen_id and i.metadata["ns"] == ns
    ]  # fmt: skip
    return entries_of([best])[0], writes_of(entries_of(writes), ns, chosen_id)


def checkpoint_item(ns: str, checkpoint_id: str, parent: str | None, run_id: object,
                    checkpoint: dict, metadata: dict) -> dict:  # fmt: skip
    """The item of a put: `checkpoint` and `metadata` already in typed_to_json form."""
    meta: dict[str, Any] = {"ns": ns, "checkpoint_id": checkpoint_id, "parent": parent}
    if isinstance(run_id, str):
        meta["run_id"] = run_id
    content = {"checkpoint": checkpoint, "metadata": metadata}
    return {"content": content, "kind": CHECKPOINT, "metadata": meta}


def write_item(ns: str, checkpoint_id: str, task_id: str, idx: int, task_path: str,
               channel: str, value: dict) -> dict:  # fmt: skip
    meta = {"ns": ns, "checkpoint_id": checkpoint_id, "task_id": task_id, "idx": idx,
            "task_path": task_path, "channel": channel}  # fmt: skip
    return {"content": {"value": value}, "kind": WRITE, "metadata": meta}


def latest_checkpoints(entries: Iterable[Entry]) -> dict[tuple[str, str], Entry]:
    """(namespace, checkpoint id) -> the newest item that put it."""
    found: dict[tuple[str, str], Entry] = {}
    for entry in entries:
        if entry.kind == CHECKPOINT:
            found[(entry.metadata["ns"], entry.metadata["checkpoint_id"])] = entry
    return found


def writes_of(entries: Iterable[Entry], ns: str, checkpoint_id: str) -> list[Entry]:
    """The pending writes of one checkpoint, folded as LangGraph's savers keep them, in
    `writes_sort_key` order (task path, task id, index)."""
    kept: dict[tuple[str, int], Entry] = {}
    for entry in entries:
        meta = entry.metadata
        if entry.kind != WRITE or meta["ns"] != ns or meta["checkpoint_id"] != checkpoint_id:
            continue
        key = (meta["task_id"], meta["idx"])
        if key in kept and meta["idx"] >= 0:
            continue  # a regular write is stored once: a retry of the task does not repeat it
        kept[key] = entry
    return sorted(kept.values(), key=lambda e: (e.metadata["task_path"], *_task_key(e)))


def _task_key(entry: Entry) -> tuple[str, int]:
    return entry.metadata["task_id"], entry.metadata["idx"]


def chosen(latest: Mapping[tuple[str, str], Entry], ns: str | None, checkpoint_id: str | None,
           before: str | None) -> list[Entry]:  # fmt: skip
    """The checkpoints a list names, newest id first within each namespace (namespaces in the
    order they first appear in the log)."""
    by_ns: dict[str, list[Entry]] = {}
    for (entry_ns, entry_id), entry in sorted(latest.items(), key=lambda kv: kv[1].order):
        if ns is not None and entry_ns != ns:
            continue
        if checkpoint_id is not None and entry_id != checkpoint_id:
            continue
        if before is not None and entry_id >= before:
            continue
        by_ns.setdefault(entry_ns, []).append(entry)
    out: list[Entry] = []
    for entries in by_ns.values():
        out.extend(sorted(entries, key=lambda e: e.metadata["checkpoint_id"], reverse=True))
    return out


def newest(latest: Mapping[tuple[str, str], Entry], ns: str) -> Entry | None:
    """The checkpoint with the greatest id in a namespace (LangGraph's ids grow with time)."""
    ids = [cid for (entry_ns, cid) in latest if entry_ns == ns]
    return latest[(ns, max(ids))] if ids else None


def items_of_runs(entries: Iterable[Entry], run_ids: set[str]) -> list[str]:
    """The ids of every item of the given runs' checkpoints: the checkpoints and their writes."""
    entries = list(entries)
    doomed = {
        (e.metadata["ns"], e.metadata["checkpoint_id"])
        for e in entries
        if e.kind == CHECKPOINT and e.metadata.get("run_id") in run_ids
    }
    return [e.id for e in entries if (e.metadata["ns"], e.metadata["checkpoint_id"]) in doomed]


def items_pruned(entries: Iterable[Entry]) -> list[str]:
    """The ids `prune(keep_latest)` erases: every item but the newest checkpoint of each
    namespace (its newest put) and that checkpoint's writes."""
    entries = list(entries)
    latest = latest_checkpoints(entries)
    keep: set[str] = set()
    for ns in {ns for ns, _ in latest}:
        top = newest(latest, ns)
        assert top is not None
        keep.add(top.id)
        keep.update(e.id for e in entries if e.kind == WRITE and e.metadata["ns"] == ns
                    and e.metadata["checkpoint_id"] == top.metadata["checkpoint_id"])  # fmt: skip
    return [e.id for e in entries if e.id not in keep]
