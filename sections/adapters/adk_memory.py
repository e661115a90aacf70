"""Google ADK's memory service over ledgermem: `LedgerMemoryService` (docs/adapters/adk.md).

ADK's `BaseMemoryService` ingests sessions (`add_session_to_memory`, `add_events_to_memory`,
`add_memory`) and answers `search_memory(app_name, user_id, query)` with `MemoryEntry`s. Here
each (app, user) has a holder session, `adk-memory:<app>:<user>` (sections/adapters/adk.py's
naming), with `user_id` in its creation metadata, whose searchable `memories` section holds one
item per remembered event: the event's `Content` as JSON (what search reads: its text parts),
its id, author, time and session in the item's metadata. `search_memory` is ledgermem's BM25
search over that section (its ranking, ties by log order), ten hits at most as ADK's in-memory
service answers; each search leaves an `items.read` record. An event already remembered is not
added again, nor one whose memory was deleted (`delete_memory` erases its item verifiably and
keeps its id, as ADK's in-memory service keeps it, in the holder's `forgotten` section).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from eventstore.errors import InvalidInput
from sections.adapters import exact_json
from sections.adapters.adk import _log_id
from sections.adapters.own_memory import Owned
from sections.errors import SessionNotFound
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session
from sections.specs import command_specs

MEMORIES = "memories"
FORGOTTEN = "forgotten"  # ids of deleted memories: never ingested again
MEMORY_KIND = "adk.memory"
MAX_RESULTS = 10  # what ADK's InMemoryMemoryService answers at most
SECTIONS: dict[str, dict[str, Any]] = {
    MEMORIES: {"budget_tokens": None, "policy": "fifo", "searchable": True},
    FORGOTTEN: {"budget_tokens": None, "policy": "fifo"},
}


def memory_log_id(app_name: str, user_id: str) -> str:
    return _log_id("adk-memory", app_name, user_id)


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _has_text(content: types.Content | None) -> bool:
    return bool(content and content.parts)


def _item(memory_id: str, content: types.Content, author: str | None, timestamp: str | None,
          session_id: str | None, custom: Mapping[str, Any] | None) -> dict:  # fmt: skip
    data, flags = exact_json.stored(content.model_dump(mode="json", exclude_none=True))
    metadata: dict[str, Any] = {**flags, "memory_id": memory_id}
    for key, value in (("author", author), ("timestamp", timestamp), ("session_id", session_id)):
        if value is not None:
            metadata[key] = value
    if custom:
        custom_value, custom_flags = exact_json.stored(dict(custom))
        metadata["custom_metadata"] = custom_value
        if custom_flags:
            metadata["custom_metadata_json_text"] = True
    return {"content": data, "kind": MEMORY_KIND, "metadata": metadata}


def entry_of(view: ItemView) -> MemoryEntry:
    metadata = view.metadata
    custom = metadata.get("custom_metadata") or {}
    if metadata.get("custom_metadata_json_text"):
        custom = exact_json.value_of(custom, {exact_json.JSON_TEXT: True})
    return MemoryEntry(
        id=metadata.get("memory_id"),
        content=types.Content.model_validate(exact_json.value_of(view.content, metadata)),
        author=metadata.get("author"),
        timestamp=metadata.get("timestamp"),
        custom_metadata=custom,
    )


class LedgerMemoryService(BaseMemoryService):
    """ADK's `BaseMemoryService` on a ledgermem `Memory` (one tenant). Constructed as
    `LedgerSessionService` is: no argument (in-process, a scratch directory), `data_dir=`
    (durable), or `memory=` (the caller's; one memory may hold both services)."""

    def __init__(
        self,
        *,
        memory: Memory | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        tenant: str | None = None,
        reader: str = "agent",
    ) -> None:
        self._own = Owned(self, memory, data_dir, tenant, "ledgermem-adk-memory-")
        self.memory = self._own.memory
        self.tenant = self._own.tenant
        self.reader = reader

    async def _holder(self, app_name: str, user_id: str) -> Session:
        log_id = memory_log_id(app_name, user_id)
        metadata = {"adk_holder": "memory", "app_name": app_name, "user_id": user_id}
        await self.memory.run_async(
            command_specs.GET_OR_CREATE_SESSION, self.tenant, log_id,
            (self.memory.session_config(SECTIONS), metadata),
        )  # fmt: skip
        return Session(self.memory, self.tenant, log_id)

    def _known(self, log_id: str) -> set[str]:
        """Ids remembered or forgotten in the holder (a consistent read of ids only)."""

        def ids(state: Any) -> set[str]:
            found = state.sessions.get((self.tenant, log_id))
            if found is None:
                return set()
            return {
                item.metadata.get("memory_id")
                for name in (MEMORIES, FORGOTTEN)
                if name in found.sections
                for item in found.sections[name].items.values()
            }

        return self.memory.read(ids)

    async def _remember(self, app_name: str, user_id: str, items: list[dict]) -> None:
        if not items:
            return
        holder = await self._holder(app_name, user_id)
        known = self._known(holder.id)
        fresh, seen = [], set()
        for item in items:
            memory_id = item["metadata"]["memory_id"]
            if memory_id not in known and memory_id not in seen:
                fresh.append(item)
                seen.add(memory_id)
        for item in fresh:  # one record each: an erasure takes its item's whole record
            await holder.add_many_async(MEMORIES, [item])

    def _events(self, events: Sequence[Event], session_id: str | None,
                custom: Mapping[str, Any] | None = None) -> list[dict]:  # fmt: skip
        return [
            _item(e.id, e.content, e.author, _timestamp(e.timestamp), session_id, custom)
            for e in events
            if e.content is not None and _has_text(e.content)
        ]

    async def add_session_to_memory(self, session: AdkSession) -> None:
        """Remember the session's events that have content (each once: a session may be added
        again as it grows)."""
        items = self._events(session.events, session.id)
        await self._remember(session.app_name, session.user_id, items)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        await self._remember(app_name, user_id, self._events(events, session_id, custom_metadata))

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        items = []
        for entry in memories:
            custom = {**(entry.custom_metadata or {}), **(custom_metadata or {})}
            items.append(_item(entry.id or str(uuid.uuid4()), entry.content, entry.author,
                               entry.timestamp, None, custom))  # fmt: skip
        await self._remember(app_name, user_id, items)

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """The user's memories that match `query`, best first by ledgermem's ranking."""
        log_id = memory_log_id(app_name, user_id)
        try:
            self.memory.require_session(self.tenant, log_id)
            hits = await self.memory.search_async(
                query, tenant=self.tenant, sessions=[log_id], sections=[MEMORIES],
                top_k=MAX_RESULTS, reader=self.reader,
            )  # fmt: skip
        except SessionNotFound:
            return SearchMemoryResponse()
        except InvalidInput:  # a query with no word to match
            if query.strip() and any(c.isalnum() for c in query):
                raise
            return SearchMemoryResponse()
        return SearchMemoryResponse(memories=[entry_of(hit.item) for hit in hits])

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Erase the memory with this id (verifiably: its payload leaves the files) and keep
        its id, so that adding its session again does not bring it back."""
        if not memory_id:
            return
        log_id = memory_log_id(app_name, user_id)
        try:
            self.memory.require_session(self.tenant, log_id)
        except SessionNotFound:
            return
        holder = Session(self.memory, self.tenant, log_id)

        def ids(state: Any) -> list[str]:
            found = state.sessions.get((self.tenant, log_id))
            section = found.sections.get(MEMORIES) if found else None
            if section is None:
                return []
            return [
                i.id for i in section.items.values() if i.metadata.get("memory_id") == memory_id
            ]

        doomed = self.memory.read(ids)
        if not doomed:
            return
        await holder.add_many_async(
            FORGOTTEN, [{"content": memory_id, "metadata": {"memory_id": memory_id}}]
        )
        await holder.erase_async(doomed, reason="adk delete_memory")

    def close(self) -> None:
        self._own.close()
