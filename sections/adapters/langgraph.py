"""LangGraph's checkpointer on a `Memory`: `LedgerSaver` (docs/adapters/langgraph.md).

A thread is a session (`langgraph:<thread id>`), each checkpoint and each pending write an item
of its section `checkpoints` (sections/adapters/langgraph_records.py): every `put` and
`put_writes` is one record, every read that returns content an `items.read` record, and
`delete_thread`, `delete_for_runs` and `prune` erase what they delete from the log's files.
The saver holds no state of its own: two savers on one memory see the same threads, and a
reopened data directory gives every checkpoint back.

Imports LangGraph (the `langgraph` extra): nothing else of ledgermem imports this module.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from sections.adapters import langgraph_records as rec
from sections.adapters.own_memory import Owned
from sections.errors import NotFound, SessionNotFound
from sections.model.state import MemoryState
from sections.retrieval.views import ItemView
from sections.runtime.memory import Memory
from sections.runtime.session import Session
from sections.specs import command_specs as specs

__all__ = ["LedgerSaver"]

PAGE = 64  # checkpoints a list reads per `items.read`, so a `limit` stops early
ERASE_REASON = "langgraph"
# Named here: inside the class, `list` is the saver's method.
Doomed = list[tuple[str, list[str]]]  # (thread id, the item ids to erase) per thread
Copies = list[dict]  # items to add


class LedgerSaver(BaseCheckpointSaver[int]):
    """`BaseCheckpointSaver` on a ledgermem memory. `LedgerSaver()`: in-process, not durable
    (LangGraph's `InMemorySaver`); `data_dir=`: durable in that data directory (closed by
    `close()`); `memory=`: a `Memory` of the caller's (the caller closes it). `tenant=`: whose
    sessions the threads are (the memory's tenant by default)."""

    def __init__(self, memory: Memory | None = None, *,
                 data_dir: str | os.PathLike[str] | None = None, tenant: str | None = None,
                 serde: SerializerProtocol | None = None) -> None:  # fmt: skip
        super().__init__(serde=serde)
        self._own = Owned(self, memory, data_dir, tenant, "ledgermem-langgraph-")
        self.memory = self._own.memory
        self.tenant = self._own.tenant

    def close(self) -> None:
        self._own.close()

    def __enter__(self) -> LedgerSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> LedgerSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ---- what the state says, without content (no record) -------------------------------------

    def _entries(self, thread_id: str) -> list[rec.Entry] | None:
        """The thread's items in log order, None when it has no session."""
        key = (self.tenant, rec.session_of(thread_id))

        def look(state: MemoryState) -> list[rec.Entry] | None:
            session = state.sessions.get(key)
            if session is None or rec.SECTION not in session.sections:
                return None
            return rec.entries_of(session.sections[rec.SECTION].items.values())

        return self.memory.read(look, session=key)  # waits for this thread's records only

    def _threads(self) -> list[str]:
        """Every thread id of the tenant, in creation order."""
        found = self.memory.list_sessions(self.tenant, {rec.ADAPTER_KEY: rec.ADAPTER})
        return [s["metadata"][rec.THREAD_KEY] for s in found]

    def _session(self, thread_id: str) -> Session[Memory]:
        return Session(self.memory, self.tenant, rec.session_of(thread_id))

    def _create(self, thread_id: str) -> None:
        self.memory.get_or_create(rec.session_of(thread_id), tenant=self.tenant,
                                  metadata=rec.session_metadata(thread_id),
                                  sections=rec.SECTION_SETTINGS,
                                  token_counter=rec.TOKEN_COUNTER)  # fmt: skip

    async def _acreate(self, thread_id: str) -> None:
        config = self.memory.session_config(rec.SECTION_SETTINGS, rec.TOKEN_COUNTER)
        await self.memory.run_async(specs.GET_OR_CREATE_SESSION, self.tenant,
                                    rec.session_of(thread_id),
                                    (config, rec.session_metadata(thread_id)))  # fmt: skip

    # ---- appends and traced reads, sync and async ---------------------------------------------

    def _add(self, thread_id: str, items: list[dict]) -> None:
        try:
            self._session(thread_id).add_many(rec.SECTION, items)
        except SessionNotFound:  # the thread's first put (or the first after a delete)
            self._create(thread_id)
            self._session(thread_id).add_many(rec.SECTION, items)

    async def _aadd(self, thread_id: str, items: list[dict]) -> None:
        try:
            await self._session(thread_id).add_many_async(rec.SECTION, items)
        except SessionNotFound:
            await self._acreate(thread_id)
            await self._session(thread_id).add_many_async(rec.SECTION, items)

    def _read(self, thread_id: str, ids: list[str] | None) -> dict[str, ItemView]:
        if ids == []:
            return {}
        try:
            return {v.id: v for v in self._session(thread_id).get(rec.SECTION, ids)}
        except NotFound:  # deleted meanwhile: as if read before the put
            return {}

    async def _aread(self, thread_id: str, ids: list[str] | None) -> dict[str, ItemView]:
        if ids == []:
            return {}
        try:
            views = await self._session(thread_id).get_async(rec.SECTION, ids)
        except NotFound:
            return {}
        return {v.id: v for v in views}

    # ---- from items to LangGraph's shapes -----------------------------------------------------

    def _tuple(self, thread_id: str, entry: rec.Entry, writes: list[rec.Entry],
               views: dict[str, ItemView]) -> CheckpointTuple | None:  # fmt: skip
        view = views.get(entry.id)
        if view is None:
            return None
        content: Any = view.content
        ns, parent = entry.metadata["ns"], entry.metadata["parent"]
        pending = []
        for w in writes:
            if w.id in views:
                held: Any = views[w.id].content
                value = self.serde.loads_typed(rec.typed_from_json(held["value"]))
                pending.append((w.metadata["task_id"], w.metadata["channel"], value))
        return CheckpointTuple(
            config=_config(thread_id, ns, entry.metadata["checkpoint_id"]),
            checkpoint=self.serde.loads_typed(rec.typed_from_json(content["checkpoint"])),
            metadata=self.serde.loads_typed(rec.typed_from_json(content["metadata"])),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=pending,
        )

    def _target(self, config: RunnableConfig) -> tuple[str, rec.Entry, list[rec.Entry]] | None:
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        key = (self.tenant, rec.session_of(thread_id))

        def look(state: MemoryState) -> tuple[rec.Entry, list[rec.Entry]] | None:
            session = state.sessions.get(key)
            if session is None or rec.SECTION not in session.sections:
                return None
            return rec.target(session.sections[rec.SECTION].items.values(), ns, checkpoint_id)

        found = self.memory.read(look, session=key)
        return None if found is None else (thread_id, *found)

    def _pages(self, config: RunnableConfig | None, before: RunnableConfig | None,
               ) -> Iterator[tuple[str, list[tuple[rec.Entry, list[rec.Entry]]]]]:  # fmt: skip
        """The checkpoints a list names, by thread, in pages of PAGE with their writes."""
        ns = config["configurable"].get("checkpoint_ns") if config else None
        checkpoint_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        threads = [str(config["configurable"]["thread_id"])] if config else self._threads()
        for thread_id in threads:
            entries = self._entries(thread_id)
            if entries is None:
                continue
            named = rec.chosen(rec.latest_checkpoints(entries), ns, checkpoint_id, before_id)
            for at in range(0, len(named), PAGE):
                yield (
                    thread_id,
                    [
                        (e, rec.writes_of(entries, e.metadata["ns"], e.metadata["checkpoint_id"]))
                        for e in named[at : at + PAGE]
                    ],
                )

    # ---- the checkpointer ---------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        target = self._target(config)
        if target is None:
            return None
        thread_id, entry, writes = target
        return self._tuple(thread_id, entry, writes,
                           self._read(thread_id, [entry.id, *[w.id for w in writes]]))  # fmt: skip

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        target = self._target(config)
        if target is None:
            return None
        thread_id, entry, writes = target
        views = await self._aread(thread_id, [entry.id, *[w.id for w in writes]])
        return self._tuple(thread_id, entry, writes, views)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:  # fmt: skip
        left = limit
        for thread_id, page in self._pages(config, before):
            views = self._read(thread_id, _ids(page))
            for entry, writes in page:
                if left is not None and left <= 0:
                    return
                found = self._tuple(thread_id, entry, writes, views)
                if found is not None and _matches(found.metadata, filter):
                    left = None if left is None else left - 1
                    yield found

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:  # fmt: skip
        left = limit
        for thread_id, page in self._pages(config, before):
            views = await self._aread(thread_id, _ids(page))
            for entry, writes in page:
                if left is not None and left <= 0:
                    return
                found = self._tuple(thread_id, entry, writes, views)
                if found is not None and _matches(found.metadata, filter):
                    left = None if left is None else left - 1
                    yield found

    def _checkpoint_item(self, config: RunnableConfig, checkpoint: Checkpoint,
                         metadata: CheckpointMetadata) -> tuple[str, str, dict]:  # fmt: skip
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        full = get_checkpoint_metadata(config, metadata)
        item = rec.checkpoint_item(
            ns, checkpoint["id"], conf.get("checkpoint_id"), full.get("run_id"),
            rec.typed_to_json(self.serde.dumps_typed(checkpoint)),
            rec.typed_to_json(self.serde.dumps_typed(full)),
        )  # fmt: skip
        return thread_id, ns, item

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:  # fmt: skip
        thread_id, ns, item = self._checkpoint_item(config, checkpoint, metadata)
        self._add(thread_id, [item])
        return _config(thread_id, ns, checkpoint["id"])

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions,
                   ) -> RunnableConfig:  # fmt: skip
        thread_id, ns, item = self._checkpoint_item(config, checkpoint, metadata)
        await self._aadd(thread_id, [item])
        return _config(thread_id, ns, checkpoint["id"])

    def _write_items(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                     task_id: str, task_path: str) -> tuple[str, Copies]:  # fmt: skip
        conf = config["configurable"]
        ns, checkpoint_id = conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        items = [
            rec.write_item(ns, checkpoint_id, task_id, WRITES_IDX_MAP.get(channel, idx),
                           task_path, channel, rec.typed_to_json(self.serde.dumps_typed(value)))
            for idx, (channel, value) in enumerate(writes)
        ]  # fmt: skip
        return str(conf["thread_id"]), items

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:  # fmt: skip
        thread_id, items = self._write_items(config, writes, task_id, task_path)
        if items:
            self._add(thread_id, items)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:  # fmt: skip
        thread_id, items = self._write_items(config, writes, task_id, task_path)
        if items:
            await self._aadd(thread_id, items)

    # ---- deletion is erasure ------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Erase the thread: every record its session ever wrote is redacted in the files."""
        if self._entries(thread_id) is not None:
            self._session(thread_id).erase_all(reason=ERASE_REASON)

    async def adelete_thread(self, thread_id: str) -> None:
        if self._entries(thread_id) is not None:
            await self._session(thread_id).erase_all_async(reason=ERASE_REASON)

    def _doomed_by_runs(self, run_ids: Sequence[str]) -> Doomed:
        wanted = set(run_ids)
        found = []
        for thread_id in self._threads() if wanted else []:
            ids = rec.items_of_runs(self._entries(thread_id) or [], wanted)
            if ids:
                found.append((thread_id, ids))
        return found

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints whose metadata names one of the runs, with their writes."""
        for thread_id, ids in self._doomed_by_runs(run_ids):
            self._session(thread_id).erase(ids, reason=ERASE_REASON)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        for thread_id, ids in self._doomed_by_runs(run_ids):
            await self._session(thread_id).erase_async(ids, reason=ERASE_REASON)

    def _copies(self, views: dict[str, ItemView]) -> Copies:
        return [
            {"content": v.content, "kind": v.kind, "metadata": v.metadata}
            for v in sorted(views.values(), key=lambda v: (v.seq, v.id))
        ]

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every checkpoint and write of the source, added to the target in one record."""
        if self._entries(source_thread_id):
            items = self._copies(self._read(source_thread_id, None))
            if items:
                self._add(target_thread_id, items)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        if self._entries(source_thread_id):
            items = self._copies(await self._aread(source_thread_id, None))
            if items:
                await self._aadd(target_thread_id, items)

    def _pruned(self, thread_ids: Sequence[str], strategy: str) -> Doomed:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        found = []
        for thread_id in thread_ids if strategy == "keep_latest" else ():
            ids = rec.items_pruned(self._entries(thread_id) or [])
            if ids:
                found.append((thread_id, ids))
        return found

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: erase all but each namespace's newest checkpoint and its writes;
        `delete`: erase the threads."""
        for thread_id, ids in self._pruned(thread_ids, strategy):
            self._session(thread_id).erase(ids, reason=ERASE_REASON)
        for thread_id in thread_ids if strategy == "delete" else ():
            self.delete_thread(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id, ids in self._pruned(thread_ids, strategy):
            await self._session(thread_id).erase_async(ids, reason=ERASE_REASON)
        for thread_id in thread_ids if strategy == "delete" else ():
            await self.adelete_thread(thread_id)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                             "checkpoint_id": checkpoint_id}}  # fmt: skip


def _ids(page: list[tuple[rec.Entry, list[rec.Entry]]]) -> list[str]:
    return [i for entry, writes in page for i in (entry.id, *[w.id for w in writes])]


def _matches(metadata: CheckpointMetadata, wanted: dict[str, Any] | None) -> bool:
    return not wanted or all(metadata.get(k) == v for k, v in wanted.items())
