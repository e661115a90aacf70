"""KAOS's agent memory over ledgermem (docs/adapters/kaos.md).

`LocalMemory` keeps KAOS's async session and event API (axsaucedo/kaos, `agent/memory.py`):
sessions with an app name and a user id, an agent's timeline of typed events, the conversation
as "User: ... / Assistant: ..." text, statistics, and `NullMemory` for a memory that is off.
Every call is a ledgermem command: a session is a ledgermem session (app name and user id in its
creation metadata), an event is an item of the section `events` whose `kind` is the event type,
and every read of events leaves an `items.read` record. Nothing here holds state of its own: two
adapters on the same memory see the same sessions and events, and a reopened memory gives them
back.

The timeline is `Session.events`: the session's items with an event type across all its
sections in log order (sections/model/item_filter.py), so messages added another way (the REST API,
the MARSYS adapter) show as `user_message` / `agent_response` / `tool_call` / `tool_result`
events too.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from eventstore.errors import InvalidInput
from sections.adapters import foreign_ids
from sections.adapters.kaos_content import decode_content, encode_content
from sections.adapters.kaos_store import MAKE_ROOM, open_own
from sections.adapters.own_memory import release
from sections.errors import ConfigError, SectionNotFound, SessionExists, SessionNotFound
from sections.model.item_filter import event_type
from sections.model.names import TENANT_SESSION
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session
from sections.specs import command_specs

EVENTS = "events"  # the section KAOS's events are added to
EVENT_ID = "event_id"  # the item metadata key that keeps KAOS's id of the event
EVENT_TIME = "event_time"  # the item metadata key that keeps the event's own timestamp
CONVERSATION = ("user_message", "agent_response")  # what build_conversation_context renders
CUSTOM = "custom"  # KAOS's catch-all type; any other string is taken as well
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_MAX_EVENTS = 500


def _now() -> datetime:
    return datetime.now(UTC)


def _time(ts_us: int) -> datetime:
    return datetime.fromtimestamp(ts_us / 1_000_000, UTC)


@dataclass
class MemoryEvent:
    """KAOS's `MemoryEvent`: one entry of a session's timeline."""

    event_id: str
    timestamp: datetime
    event_type: str
    content: Any
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "timestamp": self.timestamp.isoformat(),
            "event_type": self.event_type,
            "content": self.content,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryEvent:
        return cls(
            event_id=data["event_id"],
            timestamp=datetime.fromisoformat(data["timestamp"]),
            event_type=data["event_type"],
            content=data["content"],
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass
class SessionMemory:
    """KAOS's `SessionMemory`: a session with its events (a copy, safe to keep)."""

    session_id: str
    user_id: str
    app_name: str
    events: list[MemoryEvent]
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "user_id": self.user_id,
            "app_name": self.app_name,
            "events": [e.to_dict() for e in self.events],
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def _k(item_id: str) -> int:
    """An item's place in its record (ids are "<seq>" or "<seq>.<k>")."""
    _, _, k = item_id.partition(".")
    return int(k) if k else 0


def event_of(view: ItemView) -> MemoryEvent:
    """An item as KAOS's event: its type (kind, or what its role implies), its content and
    metadata as they were given (`decode_content`), without the kept KAOS id, which is the
    event's id (the item id for an item that was not added as a KAOS event), and the kept
    timestamp, which is the event's own (the time its record was written for an item that was
    not added as a KAOS event)."""
    metadata = dict(view.metadata)
    event_id = metadata.pop(EVENT_ID, None) or view.id
    stamp = metadata.pop(EVENT_TIME, None)
    timestamp = _time(view.ts) if stamp is None else decode_content(stamp)
    return MemoryEvent(
        event_id, timestamp, event_type(view) or CUSTOM, decode_content(view.content),
        {k: decode_content(v) for k, v in metadata.items()},
    )  # fmt: skip


def event_json(event: MemoryEvent) -> dict[str, Any]:
    """`event.to_dict()` as JSON (what `GET /memory/events` answers): content and metadata
    values in the adapter's typed form (`encode_content`), the timestamp ISO-8601."""
    data = event.to_dict()
    data["content"] = encode_content(event.content)
    data["metadata"] = {k: encode_content(v) for k, v in event.metadata.items()}
    return data


def _check_event(event: MemoryEvent) -> dict:
    """The item an event becomes; InvalidInput (nothing appended) for what KAOS could not mean."""
    if not isinstance(event, MemoryEvent):
        raise InvalidInput("add_event takes a MemoryEvent or (event_type, content, metadata)")
    if type(event.event_type) is not str or not event.event_type:
        raise InvalidInput("event_type must be a non-empty string")
    if type(event.event_id) is not str or not event.event_id:
        raise InvalidInput("event_id must be a non-empty string")
    if type(event.metadata) is not dict:
        raise InvalidInput("metadata must be a dict")
    for key in (EVENT_ID, EVENT_TIME):
        if key in event.metadata:
            raise InvalidInput(f"metadata key {key!r} is the adapter's: it keeps the event's own")
    if not all(type(k) is str for k in event.metadata):
        raise InvalidInput("metadata keys must be strings")
    metadata = {k: encode_content(v) for k, v in event.metadata.items()}
    item = {
        "content": encode_content(event.content),
        "kind": event.event_type,
        "metadata": {
            **metadata,
            EVENT_ID: event.event_id,
            EVENT_TIME: encode_content(event.timestamp),
        },  # fmt: skip
    }
    role = {"user_message": "user", "agent_response": "assistant"}.get(event.event_type)
    if role is not None:
        item["role"] = role
    return item


class LocalMemory:
    """KAOS's `LocalMemory` on a ledgermem `Memory` (one tenant).

    Constructed as KAOS constructs it, `LocalMemory()` or `LocalMemory(max_sessions=...,
    max_events_per_session=...)`, it is in-process and not durable, as KAOS's is: a memory of its
    own on a temporary directory (no fsync), closed and removed by `close()` or when the adapter
    is collected. `data_dir=` makes that memory durable in a directory (opened, and closed by
    `close()`); `memory=` uses a `Memory` of the caller's (which the caller closes).

    KAOS's limits: `max_events_per_session` is the `max_items` of the `events` section of the
    sessions this adapter creates (an add past it evicts the oldest event, in the same record).
    `max_sessions` (KAOS's default 1000) is checked as KAOS checks it: a creation that finds the
    tenant with `max_sessions` sessions or more first deletes the least recently active tenth
    (at least one), each a `session.deleted`. A memory the adapter opens also has it as its own
    `MemoryConfig(max_sessions=...)`; with `memory=`, it is the memory's bound for the tenant
    (left out, it is read from there; given, it must agree: ConfigError otherwise).
    `context_limit` is `MEMORY_CONTEXT_LIMIT`, kept for the agent's delegation context.
    `reader="operator"` makes reads that are traced but do not count as the agent's use (the
    HTTP endpoints use it). Session ids are any string (sections/adapters/foreign_ids.py)."""

    def __init__(
        self,
        max_sessions: int | None = None,
        max_events_per_session: int = DEFAULT_MAX_EVENTS,
        *,
        memory: Memory | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        tenant: str | None = None,
        context_limit: int = 6,
        reader: str = "agent",
    ) -> None:
        for name, value in (("max_events_per_session", max_events_per_session),
                            ("context_limit", context_limit)):  # fmt: skip
            if type(value) is not int or value < 1:
                raise ConfigError(f"{name} must be a positive integer")
        if max_sessions is not None and (type(max_sessions) is not int or max_sessions < 1):
            raise ConfigError("max_sessions must be a positive integer")
        if reader not in ("agent", "operator"):
            raise InvalidInput("reader must be 'agent' or 'operator'")
        if memory is not None and data_dir is not None:
            raise ConfigError("give memory= or data_dir=, not both")
        self._finalizer: weakref.finalize | None = None
        if memory is None:
            memory, temp_dir = open_own(data_dir, max_sessions or DEFAULT_MAX_SESSIONS, tenant)
            self._finalizer = weakref.finalize(self, release, memory, temp_dir)
        tenant = tenant or memory.tenant
        bound = memory.config.max_sessions_for(tenant)
        if max_sessions is not None and max_sessions != bound:
            raise ConfigError(
                f"max_sessions={max_sessions!r} but the memory keeps {bound} sessions of tenant "
                f"{tenant!r}: the bound is the memory's (MemoryConfig(max_sessions=...) or "
                "[retention] max_sessions); open it with that, or leave max_sessions out"
            )
        self.memory = memory
        self.tenant = tenant
        self.max_sessions = bound
        self.max_events_per_session = max_events_per_session
        self.context_limit = context_limit
        self.reader = reader

    def _log_id(self, session_id: str) -> str:
        """The log's id of a KAOS session id (any string: foreign_ids); never the reserved
        `_tenant` (facts and tenant-wide observations), which is no KAOS session: InvalidInput."""
        if not isinstance(session_id, str):
            raise InvalidInput(f"a session id is a string, not {type(session_id).__name__}")
        log_id = foreign_ids.encode(session_id)
        command_specs.check_not_reserved(log_id)
        return log_id

    def _session(self, session_id: str) -> Session:
        """A handle on one of the tenant's sessions, by its KAOS id."""
        return Session(self.memory, self.tenant, self._log_id(session_id))

    def _sections(self) -> dict[str, dict]:
        """The section a KAOS session keeps its events in: unbounded in tokens, at most
        `max_events_per_session` events, the oldest evicted first."""
        return {EVENTS: {"budget_tokens": None, "policy": "fifo",
                         "max_items": self.max_events_per_session}}  # fmt: skip

    def _creation(self, session_id: str, app_name: str, user_id: str) -> tuple:
        config = self.memory.config.with_overrides(self._sections())
        metadata: dict[str, Any] = {"app_name": app_name, "user_id": user_id}
        if foreign_ids.needs_original(session_id):
            metadata[foreign_ids.ORIGINAL_KEY] = session_id
        return config, metadata

    def _exists(self, log_id: str) -> bool:
        try:
            self.memory.require_session(self.tenant, log_id)
        except SessionNotFound:
            return False
        return True

    async def _make_room(self) -> None:
        """KAOS's bound, before a creation: `MAKE_ROOM` (one decision, under the memory's lock)."""
        if self.max_sessions is not None:
            await self.memory.run_async(MAKE_ROOM, self.tenant, None, (self.max_sessions,))

    # -- sessions

    async def create_session(
        self, app_name: str, user_id: str, session_id: str | None = None
    ) -> str:
        """A new, empty session; as in KAOS, one that had the id is replaced (deleted first:
        its `session.deleted` then the new `session.created`)."""
        session_id = session_id or f"session_{uuid.uuid4().hex[:12]}"
        log_id = self._log_id(session_id)
        await self._make_room()
        for _ in range(3):  # another caller may create it between the delete and the create
            with contextlib.suppress(SessionNotFound):
                await self._session(session_id).delete_async()
            try:
                await self.memory.run_async(command_specs.CREATE_SESSION, self.tenant, log_id,
                                            self._creation(session_id, app_name, user_id))  # fmt: skip
            except SessionExists:
                continue
            return session_id
        raise SessionExists(f"session {session_id!r} is being created by another caller")

    async def get_or_create_session(
        self, session_id: str, app_name: str = "agent", user_id: str = "user"
    ) -> str:
        log_id = self._log_id(session_id)
        if self._exists(log_id):
            return session_id
        await self._make_room()
        await self.memory.run_async(command_specs.GET_OR_CREATE_SESSION, self.tenant, log_id,
                                    self._creation(session_id, app_name, user_id))  # fmt: skip
        return session_id

    async def get_session(self, session_id: str) -> SessionMemory | None:
        """The session with its events (a read: traced), or None."""
        session = self._session(session_id)
        try:
            info = self.memory.session_info(self.tenant, session.id)
            views = await session.events_async(reader=self.reader)
        except SessionNotFound:
            return None
        metadata = info["metadata"]
        return SessionMemory(
            session_id, metadata.get("user_id"), metadata.get("app_name"),
            [event_of(v) for v in views], _time(info["created_ts"]), _time(info["active_ts"]),
        )  # fmt: skip

    async def list_sessions(self, user_id: str | None = None) -> list[str]:
        """The tenant's sessions by their KAOS ids, in creation order."""
        where = {"user_id": user_id} if user_id else None
        found = []
        for s in self.memory.list_sessions(self.tenant, where):
            seed_id = foreign_ids.decode(s["session"], s["metadata"])
            found.append(s["session"] if seed_id is None else seed_id)
        return found

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session (`session.deleted`); False when there is none."""
        try:
            await self._session(session_id).delete_async()
        except SessionNotFound:
            return False
        return True

    # -- events

    def create_event(
        self, event_type: str, content: Any, metadata: dict[str, Any] | None = None
    ) -> MemoryEvent:
        """A new event, not yet in any session (no record: `add_event` adds it)."""
        return MemoryEvent(f"event_{uuid.uuid4().hex[:8]}", _now(), event_type, content,
                           dict(metadata or {}))  # fmt: skip

    async def add_event(
        self,
        session_id: str,
        event_or_type: MemoryEvent | str,
        content: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        """Add an event (a MemoryEvent, or its type, content and metadata): one `item.added`.
        False when the session does not exist, as in KAOS; InvalidInput for a malformed event."""
        if isinstance(event_or_type, str):
            if metadata is not None and type(metadata) is not dict:
                raise InvalidInput("metadata must be a dict")
            event_or_type = self.create_event(event_or_type, content, metadata)
        item = _check_event(event_or_type)
        session = self._session(session_id)
        try:
            await session.add_many_async(EVENTS, [item])
        except SessionNotFound:
            return False
        except SectionNotFound:  # a session made another way: give it the events section
            await session.configure_async(EVENTS, **self._sections()[EVENTS])
            await session.add_many_async(EVENTS, [item])
        return True

    async def get_session_events(
        self, session_id: str, event_types: list[str] | None = None
    ) -> list[MemoryEvent]:
        """The session's events in time order, of `event_types` (all when None or empty);
        [] for an unknown session. A read: traced."""
        try:
            views = await self._session(session_id).events_async(
                event_types or None, reader=self.reader
            )
        except SessionNotFound:
            return []
        return [event_of(v) for v in views]

    async def recent_events(self, limit: int, session_id: str | None = None) -> list[MemoryEvent]:
        """The newest `limit` events, oldest first: of one session, or of all the tenant's
        sessions merged in log order (what `GET /memory/events` answers). Sessions are read
        newest activity first and only while one can still hold a newer event than those found;
        each read leaves its `items.read` record."""
        if type(limit) is not int or limit < 0:
            raise InvalidInput("limit must be a non-negative integer")
        if limit == 0:
            return []
        if session_id is not None:
            sessions = [self._log_id(session_id)]
        else:
            found = self.memory.list_sessions(self.tenant)
            found.sort(key=lambda s: s["active_ts"], reverse=True)
            sessions = [s["session"] for s in found]
            active = [s["active_ts"] for s in found]
        views: list[ItemView] = []
        for n, sid in enumerate(sessions):
            if session_id is None and len(views) >= limit:
                views.sort(key=lambda v: v.seq)
                if views[-limit].ts > active[n]:
                    break  # no event of this session or an older one can be among the newest
            try:
                views += await Session(self.memory, self.tenant, sid).events_async(
                    recent=limit, reader=self.reader
                )
            except SessionNotFound:
                continue
        views.sort(key=lambda v: (v.seq, _k(v.id)))
        return [event_of(v) for v in views[-limit:]]

    async def build_conversation_context(self, session_id: str, max_events: int = 20) -> str:
        """The newest `max_events` user messages and agent responses, one "User: ..." or
        "Assistant: ..." line each."""
        if type(max_events) is not int or max_events < 0:
            raise InvalidInput("max_events must be a non-negative integer")
        if max_events == 0:
            return ""
        try:
            views = await self._session(session_id).events_async(
                list(CONVERSATION), recent=max_events, reader=self.reader
            )
        except SessionNotFound:
            return ""
        speaker = {"user_message": "User", "agent_response": "Assistant"}
        lines = []
        for view in views:
            kind = event_type(view)
            assert kind is not None  # the events asked for: CONVERSATION's types
            lines.append(f"{speaker[kind]}: {decode_content(view.content)}")
        return "\n".join(lines)

    # -- statistics and retention

    async def get_memory_stats(self) -> dict[str, int]:
        """Sessions of the tenant, their events (items with an event type) and the average."""
        counts = self.memory.read(lambda state: _event_counts(state, self.tenant))
        total = sum(counts)
        return {
            "total_sessions": len(counts),
            "total_events": total,
            "avg_events_per_session": total // len(counts) if counts else 0,
        }

    async def cleanup_old_sessions(self, max_age_hours: float = 24) -> int:
        """Remove the tenant's sessions with no change for `max_age_hours` (`Memory.cleanup`:
        a `session.deleted` each, reason `max_age`); how many went."""
        if type(max_age_hours) not in (int, float):
            raise InvalidInput("max_age_hours must be a number of hours")
        removed = await self.memory.cleanup_async(max_age_hours * 3600, tenant=self.tenant)
        return len(removed)

    async def close(self) -> None:
        """Close the memory the adapter opened (an in-process one is removed); nothing for a
        `memory=` of the caller's, which the caller closes."""
        if self._finalizer is not None:
            self._finalizer()


def _event_counts(state, tenant: str) -> list[int]:
    """Per session of the tenant (the reserved `_tenant` left out): items with an event type."""
    return [
        sum(
            1
            for section in s.sections.values()
            for item in section.items.values()
            if event_type(item) is not None
        )  # fmt: skip
        for (t, sid), s in state.sessions.items()
        if t == tenant and sid != TENANT_SESSION
    ]


InMemorySessionService = LocalMemory  # KAOS's other name for it


class NullMemory:
    """KAOS's `NullMemory`: memory turned off. Every call succeeds and nothing is kept (and no
    record is written)."""

    max_sessions = 0
    max_events_per_session = 0
    context_limit = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def create_session(self, app_name: str = "", user_id: str = "",
                             session_id: str | None = None) -> str:  # fmt: skip
        return session_id or "null-session"

    async def get_or_create_session(self, session_id: str, app_name: str = "agent",
                                    user_id: str = "user") -> str:  # fmt: skip
        return session_id

    async def get_session(self, session_id: str) -> None:
        return None

    async def list_sessions(self, user_id: str | None = None) -> list[str]:
        return []

    async def delete_session(self, session_id: str) -> bool:
        return True

    def create_event(self, event_type: str, content: Any,
                     metadata: dict[str, Any] | None = None) -> MemoryEvent:  # fmt: skip
        return MemoryEvent(f"event_{uuid.uuid4().hex[:8]}", _now(), event_type, content,
                           dict(metadata or {}))  # fmt: skip

    async def add_event(self, session_id: str, event_or_type: MemoryEvent | str = "",
                        content: Any = None, metadata: dict[str, Any] | None = None) -> bool:  # fmt: skip
        return True

    async def get_session_events(self, session_id: str,
                                 event_types: list[str] | None = None) -> list[MemoryEvent]:  # fmt: skip
        return []

    async def recent_events(self, limit: int, session_id: str | None = None) -> list[MemoryEvent]:
        return []

    async def build_conversation_context(self, session_id: str, max_events: int = 20) -> str:
        return ""

    async def get_memory_stats(self) -> dict[str, int]:
        return {"total_sessions": 0, "total_events": 0, "avg_events_per_session": 0}

    async def cleanup_old_sessions(self, max_age_hours: int = 24) -> int:
        return 0

    async def close(self) -> None:
        pass


# -- configuration from the environment, as KAOS's agent server reads it

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be a positive integer, not {value!r}") from None
    if number < 1:
        raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    return number


def memory_from_env(
    memory: Memory | None = None, env: Mapping[str, str] | None = None
) -> LocalMemory | NullMemory:
    """KAOS's memory as its `MEMORY_*` variables describe it: `MEMORY_ENABLED` (false: a
    `NullMemory`), `MEMORY_TYPE` (`local`: a `LocalMemory` over ledgermem; KAOS's `redis` is
    refused: the log is the store), `MEMORY_CONTEXT_LIMIT`, `MEMORY_MAX_SESSIONS`,
    `MEMORY_MAX_SESSION_EVENTS`. Without `memory`, `max_sessions` is `MEMORY_MAX_SESSIONS`
    (1000 by default, as KAOS) and the memory is the adapter's own: in the ledgermem data
    directory `LEDGERMEM_DATA` when it is set (durable), else in-process and not durable, as
    KAOS's `local` memory is (`await result.close()` releases either). With one,
    `MEMORY_MAX_SESSIONS`, if set, must agree with its bound. ConfigError for a value that
    cannot work."""
    env = os.environ if env is None else env
    enabled = env.get("MEMORY_ENABLED", "true").strip().lower()
    if enabled not in _TRUE + _FALSE:
        raise ConfigError(f"MEMORY_ENABLED must be true or false, not {enabled!r}")
    if enabled in _FALSE:
        return NullMemory()
    kind = env.get("MEMORY_TYPE", "local").strip().lower()
    if kind != "local":
        raise ConfigError(f"MEMORY_TYPE {kind!r} is not supported here: use 'local' (ledgermem)")
    options: dict[str, Any] = {
        "max_events_per_session": _int_env(env, "MEMORY_MAX_SESSION_EVENTS", DEFAULT_MAX_EVENTS),
        "context_limit": _int_env(env, "MEMORY_CONTEXT_LIMIT", 6),
    }
    if memory is None:  # KAOS's default bound unless the variable says otherwise
        bound = _int_env(env, "MEMORY_MAX_SESSIONS", DEFAULT_MAX_SESSIONS)
        return LocalMemory(bound, **options, data_dir=env.get("LEDGERMEM_DATA") or None)
    if env.get("MEMORY_MAX_SESSIONS"):  # a memory of the caller's: the bound must agree
        options["max_sessions"] = _int_env(env, "MEMORY_MAX_SESSIONS", DEFAULT_MAX_SESSIONS)
    return LocalMemory(**options, memory=memory)
