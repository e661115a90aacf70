"""JAF's `MemoryProvider` on a ledgermem `Memory`: `LedgerMemoryProvider` (docs/adapters/jaf.md).

Every method is async and returns JAF's `Success(data)` or `Failure(error)` (of
sections/adapters/jaf_shapes.py's `shapes()`: JAF's own classes when JAF is installed), never
raising for a storage problem. A conversation is a ledgermem session (its id the conversation id
encoded by sections/adapters/foreign_ids.py, `user_id` and the first metadata in its creation
record), its messages are the items of its `messages` section, and metadata given later (and
regeneration points) are kept, in order, as items of its `conversation_metadata` section. Every
call is a ledgermem command: writes are records, and every read leaves an `items.read` record.
The constructors and the factory JAF's code calls are in sections/adapters/jaf.py.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import orjson

from eventstore.errors import InvalidInput, LedgerError
from sections.adapters import foreign_ids
from sections.adapters.jaf_shapes import (
    PROVIDER,
    ROLES,
    Result,
    datetime_of,
    item_of,
    message_fields,
    message_of,
    microseconds_of,
    shapes,
    stored_fields,
)
from sections.adapters.own_memory import open_scratch, release
from sections.errors import SectionNotFound, SessionNotFound
from sections.model.config import MemoryConfig
from sections.model.names import TENANT_SESSION
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session
from sections.specs import command_specs

MESSAGES = "messages"  # the section a conversation's messages are kept in
METADATA = "conversation_metadata"  # metadata given after the conversation was created
REGENERATION = "conversation.regeneration"  # the kind of a regeneration point's item there

# ---- the provider ------------------------------------------------------------------------------


class Closing(Protocol):
    """What a provider may own and close: a `Memory`, or a `StoreMemory` that holds one."""

    def close(self) -> None: ...


class LedgerMemoryProvider:
    """JAF's `MemoryProvider` on a ledgermem `Memory` (one tenant). `memory=None`: an
    in-process memory that nothing outlives (a scratch data directory, removed on `close()` or
    at exit), as JAF's in-memory provider. `closing`: the memory (or the object that owns it,
    such as a `StoreMemory`) is closed by `close()`; the factory sets it, a caller who passes
    its own memory keeps it open by default. `max_messages` is JAF's
    `max_messages_per_conversation`: the `max_items` of the `messages` section of the
    conversations this provider creates (the oldest go first); JAF's `max_conversations` is the
    memory's `max_sessions` (`max_conversations` here, for the in-process memory)."""

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        tenant: str | None = None,
        closing: Closing | None = None,
        store: str = "file",
        max_messages: int | None = None,
        max_conversations: int | None = None,
    ) -> None:
        for name, value in (("max_messages", max_messages),
                            ("max_conversations", max_conversations)):  # fmt: skip
            if value is not None and (type(value) is not int or value < 1):
                raise InvalidInput(f"{name} must be a positive integer")
        if memory is None:
            scratch = Scratch(max_conversations)
            memory, closing, store = scratch.memory, scratch, "in-process"
        self.memory = memory
        self.tenant = tenant or memory.tenant
        self._closing = closing
        self.store = store
        self.max_messages = max_messages

    def _session(self, conversation_id: str) -> Session:
        """A handle on the session of a conversation (its id encoded, foreign_ids.py); never
        the reserved `_tenant` (facts and tenant-wide observations), which is no conversation:
        InvalidInput."""
        log_id = _log_id(conversation_id)
        command_specs.check_not_reserved(log_id)
        return Session(self.memory, self.tenant, log_id)

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
                await self._add(session, [item_of(f) for f in self._newest(fields[start + same :])])
            if metadata and not created:
                await self._add_metadata(session, metadata)
        except LedgerError as exc:
            return _storage_failure("store_messages", exc)
        return shapes().Success(None)

    async def append_messages(
        self, conversation_id: str, messages: Sequence[object], metadata: dict | None = None
    ) -> Result:
        """Add messages to an existing conversation: one `item.added` (MemoryNotFoundError for
        an unknown conversation, nothing appended)."""
        try:
            items = [item_of(f) for f in self._newest([message_fields(m) for m in messages])]
            _check_metadata(metadata)
            session = self._session(conversation_id)
            self.memory.require_session(self.tenant, session.id)
            if items:
                await self._add(session, items)
            if metadata:
                await self._add_metadata(session, metadata)
        except SessionNotFound:
            return _not_found(conversation_id)
        except LedgerError as exc:
            return _storage_failure("append_messages", exc)
        return shapes().Success(None)

    async def delete_conversation(self, conversation_id: str) -> Result:
        """Delete it (`session.deleted`): Success(True), or Success(False) if there was none."""
        try:
            await self._session(conversation_id).delete_async()
        except SessionNotFound:
            return shapes().Success(False)
        except LedgerError as exc:
            return _storage_failure("delete_conversation", exc)
        return shapes().Success(True)

    async def clear_user_conversations(self, user_id: str) -> Result:
        """Delete every conversation of `user_id` (one `session.deleted` each): their count."""
        try:
            found = self.memory.list_sessions(self.tenant, {"user_id": _plain_str(user_id)})
            for info in found:
                await Session(self.memory, self.tenant, info["session"]).delete_async()
        except LedgerError as exc:
            return _storage_failure("clear_user_conversations", exc)
        return shapes().Success(len(found))

    async def cleanup_old_conversations(self, older_than: datetime | timedelta) -> Result:
        """Delete every conversation whose last change is before `older_than` (a datetime, or
        an age: that long before now), one `session.deleted` each: their count. (JAF-TS's
        `cleanupOldConversations`; JAF-py's docs write it by hand from `find_conversations`.)"""
        try:
            if isinstance(older_than, timedelta):
                older_than = datetime.now(UTC) - older_than
            if not isinstance(older_than, datetime):
                raise InvalidInput("older_than must be a datetime or a timedelta")
            cutoff = microseconds_of(older_than)
            found = [s for s in self.memory.list_sessions(self.tenant) if s["active_ts"] < cutoff]
            for info in found:
                await Session(self.memory, self.tenant, info["session"]).delete_async()
        except LedgerError as exc:
            return _storage_failure("cleanup_old_conversations", exc)
        return shapes().Success(len(found))

    async def truncate_conversation_after(self, conversation_id: str, message_id: str) -> Result:
        """Remove the message `message_id` and every one after it (one `item.removed`, and
        JAF's `regeneration_truncated`, `truncated_at`, `messages_removed` as later metadata):
        their count, 0 when no message has that id."""
        try:
            session = self._session(conversation_id)
            stored = await self._stored(session)
            at = next((n for n, (_, f) in enumerate(stored) if f["message_id"] == message_id), None)
            if at is None:
                return shapes().Success(0)
            gone = [view.id for view, _ in stored[at:]]
            await session.remove_async(MESSAGES, gone)
            await self._add_metadata(session, {
                "regeneration_truncated": True,
                "truncated_at": datetime.now().isoformat(),
                "messages_removed": len(gone),
            })  # fmt: skip
        except SessionNotFound:
            return _not_found(conversation_id)
        except LedgerError as exc:
            return _storage_failure("truncate_conversation_after", exc)
        return shapes().Success(len(gone))

    async def mark_regeneration_point(
        self, conversation_id: str, message_id: str, regeneration_metadata: dict | None = None
    ) -> Result:
        """Mark a regeneration point (JAF's regeneration calls it): an item of kind
        `conversation.regeneration` in `conversation_metadata` holding `message_id`, a
        `timestamp` and `regeneration_metadata`; read back as JAF's `regeneration_points`,
        `last_regeneration` and `regeneration_count`. MemoryNotFoundError when unknown."""
        try:
            _check_metadata(regeneration_metadata)
            session = self._session(conversation_id)
            self.memory.require_session(self.tenant, session.id)
            point = {"message_id": _plain_str(message_id),
                     "timestamp": datetime.now().isoformat(), **(regeneration_metadata or {})}  # fmt: skip
            await self._add_metadata(session, point, kind=REGENERATION)
        except SessionNotFound:
            return _not_found(conversation_id)
        except LedgerError as exc:
            return _storage_failure("mark_regeneration_point", exc)
        return shapes().Success(None)

    # -- reads (each leaves an `items.read` record)

    async def get_conversation(self, conversation_id: str) -> Result:
        """The conversation, or Success(None) when there is none."""
        try:
            conversation = await self._conversation(self._session(conversation_id).id)
        except SessionNotFound:
            return shapes().Success(None)
        except LedgerError as exc:
            return _storage_failure("get_conversation", exc)
        return shapes().Success(conversation)

    async def get_conversation_until_message(self, conversation_id: str, message_id: str) -> Result:
        """The conversation up to (not including) `message_id`, with JAF's
        `truncated_for_regeneration`, `truncated_until_message`, `original_message_count` and
        `truncated_message_count` in its metadata; Success(None) if either is unknown."""
        seed = shapes()
        found = await self.get_conversation(conversation_id)
        if isinstance(found, seed.Failure) or found.data is None:
            return found
        conversation = found.data
        messages = list(conversation.messages)
        at = next((n for n, m in enumerate(messages) if m.message_id == message_id), None)
        if at is None:
            return seed.Success(None)
        metadata = {**conversation.metadata, "truncated_for_regeneration": True,
                    "truncated_until_message": _plain_str(message_id),
                    "original_message_count": len(messages), "truncated_message_count": at}  # fmt: skip
        return seed.Success(seed.ConversationMemory(
            conversation.conversation_id, conversation.user_id, tuple(messages[:at]), metadata))  # fmt: skip

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
            return shapes().Success([])
        except LedgerError as exc:
            return _storage_failure("get_recent_messages", exc)
        return shapes().Success([message_of(stored_fields(v)) for v in views])

    async def find_conversations(self, query: Any = None, **fields: Any) -> Result:
        """Conversations matching `query` (or its fields as keywords: conversation_id,
        user_id, trace_id, since, until, limit, offset), most recently active first. `since`
        and `until` bound the creation time; `trace_id` is matched on the creation metadata."""
        try:
            query = query or shapes().MemoryQuery(**fields)
            where = {k: _plain_str(v) for k, v in (("user_id", query.user_id),
                                                   ("trace_id", query.trace_id)) if v}  # fmt: skip
            found = self.memory.list_sessions(self.tenant, where)
            if query.conversation_id:
                wanted = _log_id(query.conversation_id)
                found = [s for s in found if s["session"] == wanted]
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
        return shapes().Success(conversations)

    async def get_stats(self, user_id: str | None = None) -> Result:
        """Conversations, their messages and the oldest and newest creation times (no read of
        any content: no record)."""
        try:
            where = {"user_id": _plain_str(user_id)} if user_id else None
            found = self.memory.list_sessions(self.tenant, where)
            ids = {s["session"] for s in found}
            counts = self.memory.read(lambda state: _role_counts(state, self.tenant, ids))
        except LedgerError as exc:
            return _storage_failure("get_stats", exc)
        created = [datetime_of(s["created_ts"]) for s in found]
        return shapes().Success({
            "total_conversations": len(found),
            "total_messages": sum(sum(c.values()) for c in counts.values()),
            "oldest_conversation": min(created) if created else None,
            "newest_conversation": max(created) if created else None,
        })  # fmt: skip

    async def get_analytics(self, since: datetime | None = None) -> Result:
        """What `get_stats` counts, and more, over the conversations active since `since` (all
        when None): `total_conversations`, `total_messages`,
        `average_messages_per_conversation`, `messages_by_role`, `conversations_by_user`
        (`None` for those without a user), `oldest_conversation`, `newest_conversation`,
        `last_activity`. No content is read: no record. (JAF-TS's `getAnalytics`.)"""
        try:
            found = self.memory.list_sessions(
                self.tenant, since=None if since is None else microseconds_of(since)
            )
            ids = {s["session"] for s in found}
            counts = self.memory.read(lambda state: _role_counts(state, self.tenant, ids))
        except (LedgerError, TypeError) as exc:
            return _storage_failure("get_analytics", exc)
        by_role = {role: sum(c.get(role, 0) for c in counts.values()) for role in ROLES}
        users: dict[str | None, int] = {}
        for s in found:
            user = s["metadata"].get("user_id")
            users[user] = users.get(user, 0) + 1
        total = sum(by_role.values())
        created = [datetime_of(s["created_ts"]) for s in found]
        return shapes().Success({
            "total_conversations": len(found),
            "total_messages": total,
            "average_messages_per_conversation": total / len(found) if found else 0.0,
            "messages_by_role": by_role,
            "conversations_by_user": users,
            "oldest_conversation": min(created) if created else None,
            "newest_conversation": max(created) if created else None,
            "last_activity": datetime_of(max(s["active_ts"] for s in found)) if found else None,
        })  # fmt: skip

    async def health_check(self) -> Result:
        """Healthy when the memory takes commands: a consistent read, with its latency."""
        seed = shapes()
        if self.memory.writer.closed:
            return seed.Failure(seed.MemoryConnectionError("the memory is closed", PROVIDER))
        started = time.perf_counter()
        try:
            count = len(self.memory.list_sessions(self.tenant))
        except LedgerError as exc:
            return seed.Failure(
                seed.MemoryConnectionError(f"health check failed: {exc}", PROVIDER, exc)
            )
        latency_ms = (time.perf_counter() - started) * 1000
        return seed.Success({
            "healthy": True,
            "latency_ms": latency_ms,
            "provider": PROVIDER,
            "details": {"conversations_count": count, "store": self.store,
                        "log_size": self.memory.writer.size},
        })  # fmt: skip

    async def close(self) -> Result:
        """Close the memory when this provider owns it (`closing`; the in-process memory's
        data is then gone, as JAF's in-memory provider clears its own); Success(None)."""
        seed = shapes()
        try:
            if self._closing is not None:
                self._closing.close()
        except Exception as exc:  # JAF reports rather than raises here too
            return seed.Failure(seed.MemoryConnectionError(f"close failed: {exc}", PROVIDER, exc))
        return seed.Success(None)

    # -- the parts

    def _newest(self, fields: list[dict]) -> list[dict]:
        """The messages a conversation can keep, as JAF keeps them: the newest `max_messages`
        (those before them would be evicted at once; a section never takes more than its
        `max_items` in one write)."""
        return fields if self.max_messages is None else fields[-self.max_messages :]

    def _kept_from(self, stored: list[tuple[ItemView, dict]], fields: list[dict]) -> int:
        """Where the stored messages start in `fields`: 0, or, when `max_messages` evicted the
        oldest, the place of the first one kept (those before it are not added again)."""
        if self.max_messages is None or not stored:
            return 0
        first = stored[0][1]["message_id"]
        return next((n for n, f in enumerate(fields) if f["message_id"] == first), 0)

    async def _create(self, conversation_id: str, metadata: dict | None) -> bool:
        config = self.memory.config.with_overrides(self._sections())
        created_with = {k: _plain_str(v) for k, v in (metadata or {}).items()}
        if foreign_ids.needs_original(conversation_id):  # its id kept where it can be read back
            created_with[foreign_ids.ORIGINAL_KEY] = _plain_str(conversation_id)
        _, created = await self.memory.run_async(
            command_specs.GET_OR_CREATE_SESSION, self.tenant, _log_id(conversation_id),
            (config, created_with),
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

    async def _add_metadata(
        self, session: Session, metadata: dict, kind: str = "conversation.metadata"
    ) -> None:
        item = [{"content": metadata, "kind": kind}]
        try:
            await session.add_many_async(METADATA, item)
        except SectionNotFound:
            await session.configure_async(METADATA, **self._sections()[METADATA])
            await session.add_many_async(METADATA, item)

    async def _conversation(self, log_id: str) -> Any:
        """The conversation of the session `log_id`, with the caller's conversation id."""
        seed = shapes()
        session = Session(self.memory, self.tenant, log_id)
        info = self.memory.session_info(self.tenant, log_id)
        created_with = dict(info["metadata"])
        hashed = log_id.startswith(foreign_ids.HASHED)
        conversation_id = foreign_ids.decode(log_id, created_with if hashed else None)
        if hashed:
            created_with.pop(foreign_ids.ORIGINAL_KEY, None)
        try:
            views = await session.get_async(MESSAGES, role=list(ROLES))
        except SectionNotFound:
            views = []
        metadata = dict(created_with)
        points: list[dict] = []
        try:
            for later in await session.get_async(METADATA):
                if not isinstance(later.content, dict):
                    continue
                if later.kind == REGENERATION:
                    points.append(dict(later.content))
                else:
                    metadata.update(later.content)
        except SectionNotFound:
            pass
        if points:
            metadata.update(regeneration_points=points, last_regeneration=points[-1],
                            regeneration_count=len(points))  # fmt: skip
        messages = [message_of(stored_fields(v)) for v in views]
        metadata.update(
            created_at=datetime_of(info["created_ts"]),
            updated_at=datetime_of(info["active_ts"]),
            total_messages=len(messages),
            last_activity=datetime_of(info["active_ts"]),
        )
        return seed.ConversationMemory(conversation_id, created_with.get("user_id"),
                                       tuple(messages), metadata)  # fmt: skip


class Scratch:
    """An in-process memory: a fresh data directory (no fsync: nothing here is to outlive the
    process) that `close()` closes and removes, and so does the process's exit or the
    garbage collector, whichever comes first."""

    def __init__(self, max_conversations: int | None = None) -> None:
        self.memory, self.root = open_scratch(
            "ledgermem-jaf-", config=MemoryConfig(max_sessions=max_conversations)
        )
        self._finalizer = weakref.finalize(self, release, self.memory, self.root)

    def close(self) -> None:
        self._finalizer()


def _plain_str(value: Any) -> Any:
    """A `str` subclass (JAF's `MessageId`, `TraceId`) as its string; anything else as it is."""
    return str(value) if isinstance(value, str) else value


def _log_id(conversation_id: object) -> str:
    """The session id of a conversation id: any string, by foreign_ids.py's encoding."""
    if not isinstance(conversation_id, str):
        raise InvalidInput(
            f"a conversation id must be a string, not {type(conversation_id).__name__}"
        )
    return foreign_ids.encode(conversation_id)


def _check_metadata(metadata: object) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidInput("metadata must be a dict")
    if metadata is not None:
        try:
            orjson.dumps(metadata)
        except TypeError as exc:
            raise InvalidInput(f"metadata must be JSON data: {exc}") from None


def _role_counts(state, tenant: str, ids: set[str]) -> dict[str, dict[str, int]]:
    """Each conversation's messages by role."""
    counts: dict[str, dict[str, int]] = {}
    for (t, sid), s in state.sessions.items():
        if t == tenant and sid in ids and sid != TENANT_SESSION:
            section = s.sections.get(MESSAGES)
            roles: dict[str, int] = {}
            for item in [] if section is None else section.items.values():
                if item.role in ROLES:
                    roles[item.role] = roles.get(item.role, 0) + 1
            counts[sid] = roles
    return counts


def _storage_failure(operation: str, exc: BaseException) -> Any:
    seed = shapes()
    return seed.Failure(
        seed.MemoryStorageError(f"{operation} failed: {exc}", PROVIDER, operation, exc)
    )


def _not_found(conversation_id: str) -> Any:
    seed = shapes()
    return seed.Failure(seed.MemoryNotFoundError(
        f"Conversation {conversation_id} not found", PROVIDER, _plain_str(conversation_id)))  # fmt: skip
