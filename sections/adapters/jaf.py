"""JAF's `MemoryProvider` over ledgermem (docs/adapters/jaf.md).

`LedgerMemoryProvider` keeps the method names, arguments and return shapes of JAF's memory
providers (xynehq/jaf-py, `jaf.memory`): every method is async and returns a `Success(data)` or a
`Failure(error)`, never raising for a storage problem; conversations come back as
`ConversationMemory` with JAF's `Message` fields. A conversation is a ledgermem session (its id
the conversation id, `user_id` and the first metadata in its creation record), its messages are
the items of its `messages` section, and metadata given later is kept, in order, as items of its
`conversation_metadata` section. Every call is a ledgermem command: writes are records, and
every read leaves an `items.read` record. Nothing here holds state of its own: two providers on
one memory see the same conversations, and a reopened memory gives them back.

`create_memory_provider_from_env()` picks the store as JAF's factory does from `JAF_MEMORY_TYPE`:
the file log of a data directory, or a shared PostgreSQL store (sections/runtime/store_memory.py).

JAF's shapes (`Success`, `Failure`, its errors, `Message`, `ConversationMemory`, `MemoryQuery`) and
the conversions of messages are in sections/adapters/jaf_shapes.py; the provider's callers find
them here too.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson

from eventstore.errors import InvalidInput, LedgerError
from sections.adapters.jaf_shapes import (
    MESSAGE_FIELDS,
    PROVIDER,
    ROLES,
    ConversationMemory,
    Failure,
    MemoryConnectionError,
    MemoryError,
    MemoryNotFoundError,
    MemoryQuery,
    MemoryStorageError,
    Message,
    Result,
    Success,
    datetime_of,
    item_of,
    message_fields,
    message_of,
    microseconds_of,
    stored_fields,
)
from sections.errors import SectionNotFound, SessionNotFound
from sections.model.config import MemoryConfig
from sections.model.names import TENANT_SESSION
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session
from sections.specs import command_specs

MESSAGES = "messages"  # the section a conversation's messages are kept in
METADATA = "conversation_metadata"  # metadata given after the conversation was created

__all__ = [
    "MESSAGE_FIELDS", "METADATA", "MESSAGES", "PROVIDER", "ROLES", "ConversationMemory",
    "Failure", "LedgerMemoryProvider", "MemoryConnectionError", "MemoryError",
    "MemoryNotFoundError", "MemoryQuery", "MemoryStorageError", "Message", "Result", "Success",
    "create_memory_provider_from_env",
]  # fmt: skip


# ---- the provider ------------------------------------------------------------------------------


class Closing(Protocol):
    """What a provider may own and close: a `Memory`, or a `StoreMemory` that holds one."""

    def close(self) -> None: ...


class LedgerMemoryProvider:
    """JAF's `MemoryProvider` on a ledgermem `Memory` (one tenant). `closing`: the memory (or
    the object that owns it, such as a `StoreMemory`) is closed by `close()`; the factory sets
    it, a caller who passes its own memory keeps it open by default. `max_messages` is JAF's
    `max_messages_per_conversation`: the `max_items` of the `messages` section of the
    conversations this provider creates (the oldest go first); JAF's `max_conversations` is the
    memory's `max_sessions` (the factory opens it so)."""

    def __init__(
        self,
        memory: Memory,
        *,
        tenant: str | None = None,
        closing: Closing | None = None,
        store: str = "file",
        max_messages: int | None = None,
    ) -> None:
        if max_messages is not None and (type(max_messages) is not int or max_messages < 1):
            raise InvalidInput("max_messages must be a positive integer")
        self.memory = memory
        self.tenant = tenant or memory.tenant
        self._closing = closing
        self.store = store
        self.max_messages = max_messages

    def _session(self, conversation_id: str) -> Session:
        """A handle on one of the tenant's sessions; never the reserved `_tenant` (facts and
        tenant-wide observations), which is no conversation: InvalidInput."""
        command_specs.check_not_reserved(conversation_id)
        return Session(self.memory, self.tenant, conversation_id)

    def _sections(self) -> dict[str, dict]:
        """A conversation keeps its messages (no token budget evicts; at most `max_messages`
        when set) and its later metadata."""
        messages: dict = {"budget_tokens": None, "policy": "fifo"}
        if self.max_messages is not None:
            messages["max_items"] = self.max_messages
        return {MESSAGES: messages, METADATA: {"budget_tokens": None}}

    # -- writes

    async def store_messages(
        self, conversation_id: str, messages: Sequence[object], metadata: dict | None = None
    ) -> Result:
        """Store the conversation as `messages`: a new one is created (`user_id` and the rest
        of `metadata` in its creation record); an existing one keeps the messages it shares
        with `messages` from the start and has the rest replaced (at most one `item.removed`
        and one `item.added`), so storing the whole conversation after every turn, as JAF's
        engine does, appends only the new messages."""
        try:
            fields = [message_fields(m) for m in messages]
            _check_metadata(metadata)
            session = self._session(conversation_id)
            created = await self._create(conversation_id, metadata)
            stored = [] if created else await self._stored(session)
            start = self._kept_from(stored, fields)
            same = 0
            while same < min(len(stored), len(fields) - start) and (
                stored[same][1] == fields[start + same]
            ):
                same += 1
            if stored[same:]:
                await session.remove_async(MESSAGES, [view.id for view, _ in stored[same:]])
            if fields[start + same :]:
                await self._add(session, [item_of(f) for f in fields[start + same :]])
            if metadata and not created:
                await self._add_metadata(session, metadata)
        except LedgerError as exc:
            return _storage_failure("store_messages", exc)
        return Success(None)

    async def append_messages(
        self, conversation_id: str, messages: Sequence[object], metadata: dict | None = None
    ) -> Result:
        """Add messages to an existing conversation: one `item.added` (MemoryNotFoundError for
        an unknown conversation, nothing appended)."""
        try:
            items = [item_of(message_fields(m)) for m in messages]
            _check_metadata(metadata)
            session = self._session(conversation_id)
            self.memory.require_session(self.tenant, conversation_id)
            if items:
                await self._add(session, items)
            if metadata:
                await self._add_metadata(session, metadata)
        except SessionNotFound:
            return _not_found(conversation_id)
        except LedgerError as exc:
            return _storage_failure("append_messages", exc)
        return Success(None)

    async def delete_conversation(self, conversation_id: str) -> Result:
        """Delete it (`session.deleted`): Success(True), or Success(False) if there was none."""
        try:
            await self._session(conversation_id).delete_async()
        except SessionNotFound:
            return Success(False)
        except LedgerError as exc:
            return _storage_failure("delete_conversation", exc)
        return Success(True)

    async def clear_user_conversations(self, user_id: str) -> Result:
        """Delete every conversation of `user_id` (one `session.deleted` each): their count."""
        try:
            found = self.memory.list_sessions(self.tenant, {"user_id": user_id})
            for info in found:
                await self._session(info["session"]).delete_async()
        except LedgerError as exc:
            return _storage_failure("clear_user_conversations", exc)
        return Success(len(found))

    async def truncate_conversation_after(self, conversation_id: str, message_id: str) -> Result:
        """Remove the message `message_id` and every one after it (one `item.removed`): their
        count, 0 when no message has that id."""
        try:
            stored = await self._stored(self._session(conversation_id))
            at = next((n for n, (_, f) in enumerate(stored) if f["message_id"] == message_id), None)
            if at is None:
                return Success(0)
            gone = [view.id for view, _ in stored[at:]]
            await self._session(conversation_id).remove_async(MESSAGES, gone)
        except SessionNotFound:
            return _not_found(conversation_id)
        except LedgerError as exc:
            return _storage_failure("truncate_conversation_after", exc)
        return Success(len(gone))

    # -- reads (each leaves an `items.read` record)

    async def get_conversation(self, conversation_id: str) -> Result:
        """The conversation, or Success(None) when there is none."""
        try:
            conversation = await self._conversation(conversation_id)
        except SessionNotFound:
            return Success(None)
        except LedgerError as exc:
            return _storage_failure("get_conversation", exc)
        return Success(conversation)

    async def get_conversation_until_message(self, conversation_id: str, message_id: str) -> Result:
        """The conversation up to (not including) `message_id`; Success(None) if either is
        unknown."""
        found = await self.get_conversation(conversation_id)
        if isinstance(found, Failure) or found.data is None:
            return found
        messages = found.data.messages
        at = next((n for n, m in enumerate(messages) if m.message_id == message_id), None)
        if at is None:
            return Success(None)
        return Success(dataclasses.replace(found.data, messages=messages[:at]))

    async def get_recent_messages(self, conversation_id: str, limit: int = 50) -> Result:
        """The newest `limit` messages, oldest first (MemoryNotFoundError if unknown)."""
        if type(limit) is not int or limit < 0:
            return _storage_failure(
                "get_recent_messages", InvalidInput("limit must be a non-negative integer")
            )
        try:
            views = await self._session(conversation_id).get_async(
                MESSAGES, role=list(ROLES), recent=min(limit, 10_000)
            )
        except SessionNotFound:
            return _not_found(conversation_id)
        except SectionNotFound:
            return Success([])
        except LedgerError as exc:
            return _storage_failure("get_recent_messages", exc)
        return Success([message_of(stored_fields(v)) for v in views])

    async def find_conversations(self, query: MemoryQuery | None = None, **fields: Any) -> Result:
        """Conversations matching `query` (or its fields as keywords: conversation_id,
        user_id, trace_id, since, until, limit, offset), most recently active first. `since`
        and `until` bound the creation time; `trace_id` is matched on the creation metadata."""
        try:
            query = query or MemoryQuery(**fields)
            where = {k: v for k, v in (("user_id", query.user_id),
                                       ("trace_id", query.trace_id)) if v}  # fmt: skip
            found = self.memory.list_sessions(self.tenant, where)
            if query.conversation_id:
                found = [s for s in found if s["session"] == query.conversation_id]
            if query.since is not None:
                found = [s for s in found if s["created_ts"] >= microseconds_of(query.since)]
            if query.until is not None:
                found = [s for s in found if s["created_ts"] <= microseconds_of(query.until)]
            found.sort(key=lambda s: s["active_ts"], reverse=True)
            offset = query.offset or 0
            page = found[offset : offset + query.limit if query.limit else None]
            conversations = [await self._conversation(s["session"]) for s in page]
        except (LedgerError, TypeError) as exc:
            return _storage_failure("find_conversations", exc)
        return Success(conversations)

    async def get_stats(self, user_id: str | None = None) -> Result:
        """Conversations, their messages and the oldest and newest creation times (no read of
        any content: no record)."""
        try:
            where = {"user_id": user_id} if user_id else None
            found = self.memory.list_sessions(self.tenant, where)
            ids = {s["session"] for s in found}
            counts = self.memory.read(lambda state: _message_counts(state, self.tenant, ids))
        except LedgerError as exc:
            return _storage_failure("get_stats", exc)
        created = [datetime_of(s["created_ts"]) for s in found]
        return Success({
            "total_conversations": len(found),
            "total_messages": sum(counts),
            "oldest_conversation": min(created) if created else None,
            "newest_conversation": max(created) if created else None,
        })  # fmt: skip

    async def health_check(self) -> Result:
        """Healthy when the memory takes commands: a consistent read, with its latency."""
        if self.memory.writer.closed:
            return Failure(MemoryConnectionError("the memory is closed", PROVIDER))
        started = time.perf_counter()
        try:
            count = len(self.memory.list_sessions(self.tenant))
        except LedgerError as exc:
            return Failure(MemoryConnectionError(f"health check failed: {exc}", PROVIDER, exc))
        latency_ms = (time.perf_counter() - started) * 1000
        return Success({
            "healthy": True,
            "latency_ms": latency_ms,
            "provider": PROVIDER,
            "details": {"conversations_count": count, "store": self.store,
                        "log_size": self.memory.writer.size},
        })  # fmt: skip

    async def close(self) -> Result:
        """Close the memory when this provider owns it (`closing`); Success(None)."""
        try:
            if self._closing is not None:
                self._closing.close()
        except Exception as exc:  # JAF reports rather than raises here too
            return Failure(MemoryConnectionError(f"close failed: {exc}", PROVIDER, exc))
        return Success(None)

    # -- the parts

    def _kept_from(self, stored: list[tuple[ItemView, dict]], fields: list[dict]) -> int:
        """Where the stored messages start in `fields`: 0, or, when `max_messages` evicted the
        oldest, the place of the first one kept (those before it are not added again)."""
        if self.max_messages is None or not stored:
            return 0
        first = stored[0][1]["message_id"]
        return next((n for n, f in enumerate(fields) if f["message_id"] == first), 0)

    async def _create(self, conversation_id: str, metadata: dict | None) -> bool:
        config = self.memory.config.with_overrides(self._sections())
        _, created = await self.memory.run_async(
            command_specs.GET_OR_CREATE_SESSION, self.tenant, conversation_id,
            (config, dict(metadata or {})),
        )  # fmt: skip
        return created

    async def _stored(self, session: Session) -> list[tuple[ItemView, dict]]:
        """The stored messages with their fields (an operator's read: it is the provider's
        own comparison, not the agent's use of them)."""
        try:
            views = await session.get_async(MESSAGES, reader="operator", role=list(ROLES))
        except SectionNotFound:
            return []
        return [(v, stored_fields(v)) for v in views]

    async def _add(self, session: Session, items: list[dict]) -> None:
        try:
            await session.add_many_async(MESSAGES, items)
        except SectionNotFound:  # a session made another way: give it the section first
            await session.configure_async(MESSAGES, **self._sections()[MESSAGES])
            await session.add_many_async(MESSAGES, items)

    async def _add_metadata(self, session: Session, metadata: dict) -> None:
        item = [{"content": metadata, "kind": "conversation.metadata"}]
        try:
            await session.add_many_async(METADATA, item)
        except SectionNotFound:
            await session.configure_async(METADATA, **self._sections()[METADATA])
            await session.add_many_async(METADATA, item)

    async def _conversation(self, conversation_id: str) -> ConversationMemory:
        session = self._session(conversation_id)
        info = self.memory.session_info(self.tenant, conversation_id)
        try:
            views = await session.get_async(MESSAGES, role=list(ROLES))
        except SectionNotFound:
            views = []
        metadata = dict(info["metadata"])
        try:
            for later in await session.get_async(METADATA):
                if isinstance(later.content, dict):
                    metadata.update(later.content)
        except SectionNotFound:
            pass
        messages = tuple(message_of(stored_fields(v)) for v in views)
        metadata.update(
            created_at=datetime_of(info["created_ts"]),
            updated_at=datetime_of(info["active_ts"]),
            total_messages=len(messages),
            last_activity=datetime_of(info["active_ts"]),
        )
        return ConversationMemory(conversation_id, info["metadata"].get("user_id"), messages,
                                  metadata)  # fmt: skip


def _check_metadata(metadata: object) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidInput("metadata must be a dict")
    if metadata is not None:
        try:
            orjson.dumps(metadata)
        except TypeError as exc:
            raise InvalidInput(f"metadata must be JSON data: {exc}") from None


def _message_counts(state, tenant: str, ids: set[str]) -> list[int]:
    counts = []
    for (t, sid), s in state.sessions.items():
        if t == tenant and sid in ids and sid != TENANT_SESSION:
            section = s.sections.get(MESSAGES)
            counts.append(
                0 if section is None else sum(1 for i in section.items.values() if i.role in ROLES)
            )
    return counts


def _storage_failure(operation: str, exc: BaseException) -> Failure:
    return Failure(MemoryStorageError(f"{operation} failed: {exc}", PROVIDER, operation, exc))


def _not_found(conversation_id: str) -> Failure:
    return Failure(
        MemoryNotFoundError(f"Conversation {conversation_id} not found", PROVIDER, conversation_id)
    )


# ---- the factory -------------------------------------------------------------------------------


async def create_memory_provider_from_env(env: Mapping[str, str] | None = None) -> Result:
    """A provider as JAF's factory picks one from the environment, here over ledgermem:

    - `JAF_MEMORY_TYPE=memory` (JAF's default) or `file`: the file log of the data directory
      `JAF_LEDGERMEM_DATA` or `LEDGERMEM_DATA` (created if new);
    - `JAF_MEMORY_TYPE=postgres`: the shared store `JAF_POSTGRES_CONNECTION_STRING` or
      `LEDGERMEM_STORE` (initialized by `ledgermem init-store`), led for the tenant's partition
      from the data directory above, which holds the store's key (sections/runtime/store_memory.py);
    - `JAF_LEDGERMEM_TENANT` (default `default`) is the tenant;
    - `JAF_MEMORY_MAX_CONVERSATIONS` and `JAF_MEMORY_MAX_MESSAGES`, when set, are the memory's
      `max_sessions` and the provider's `max_messages` (unset: no bound, nothing evicted).

    `redis` and anything else: Failure(MemoryConnectionError), as JAF answers an unsupported
    type; so is a store that cannot be opened."""
    env = os.environ if env is None else env
    kind = env.get("JAF_MEMORY_TYPE", "memory").strip().lower()
    data = env.get("JAF_LEDGERMEM_DATA") or env.get("LEDGERMEM_DATA")
    tenant = env.get("JAF_LEDGERMEM_TENANT") or "default"
    if kind not in ("memory", "file", "postgres"):
        return Failure(MemoryConnectionError(f"Unsupported memory type: {kind}", "Factory"))
    if not data:
        return Failure(MemoryConnectionError(
            "JAF_LEDGERMEM_DATA (or LEDGERMEM_DATA) must name the ledgermem data directory",
            "Factory",
        ))  # fmt: skip
    try:
        limits = {name: _positive(env, var) for name, var in (
            ("max_sessions", "JAF_MEMORY_MAX_CONVERSATIONS"),
            ("max_messages", "JAF_MEMORY_MAX_MESSAGES"))}  # fmt: skip
        config = MemoryConfig(max_sessions=limits["max_sessions"])
        if kind == "postgres":
            from sections.runtime.store_memory import StoreMemory

            url = env.get("JAF_POSTGRES_CONNECTION_STRING") or env.get("LEDGERMEM_STORE")
            if not url:
                return Failure(MemoryConnectionError(
                    "JAF_POSTGRES_CONNECTION_STRING (or LEDGERMEM_STORE) must name the store",
                    "Factory",
                ))  # fmt: skip
            store = StoreMemory.open(url, data, tenant=tenant, config=config)
            provider = LedgerMemoryProvider(store.memory, tenant=tenant, closing=store,
                                            store="postgresql", max_messages=limits["max_messages"])  # fmt: skip
            return Success(provider)
        memory = Memory.open(data, tenant=tenant, config=config)
    except Exception as exc:  # JAF answers a store it cannot open with a Failure
        return Failure(MemoryConnectionError(f"cannot open the {kind} store: {exc}", "Factory",
                                             exc))  # fmt: skip
    provider = LedgerMemoryProvider(memory, tenant=tenant, closing=memory,
                                    max_messages=limits["max_messages"])  # fmt: skip
    return Success(provider)


def _positive(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InvalidInput(f"{name} must be a positive integer, not {value!r}")
    return int(value)
