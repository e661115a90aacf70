"""Google ADK's session service over ledgermem: `LedgerSessionService` (docs/adapters/adk.md).

ADK (`google-adk`) keeps a session as a list of events whose `actions.state_delta`s build its
state: keys without a prefix are the session's own, `app:` keys are shared by every session of
the app, `user:` keys by every session of the user in the app, and `temp:` keys live only in
the session object of the running invocation (never stored). Here:

- an ADK session is a ledgermem session (`adk:<app>:<user>:<session>`, or `adk:+h:<hash>` when
  a part is not a plain identifier; app, user and session id in its creation metadata), its
  events the items of its `events` section (the event's JSON, its id in the item's metadata),
  and the session state given to `create_session` a seed item of its `state` section;
- the app's state and each user's are items (one delta each) of the `state` section of a
  holder session, `adk-app:...` and `adk-user:...`;
- the state `get_session` answers is the projection: the session's seed, then each event's
  session-scoped delta, in log order, with the app's and the user's deltas folded and prefixed.

`append_event` is one decision under the memory's lock: the event's `item.added` and the app's
and user's deltas are appended together, and a session object older than the stored session
(ledgermem's session version, ADK's storage marker) is refused with ADK's `StaleSessionError`,
nothing appended. Every read leaves an `items.read` record. `delete_session` erases the session
verifiably (its records redacted from the files, `session.erased`); `erase=False` only deletes.
The memory service is sections/adapters/adk_memory.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State
from pydantic_core import to_jsonable_python

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.adapters import exact_json
from sections.adapters.own_memory import Owned
from sections.errors import SessionExists, SessionNotFound, VersionConflict
from sections.model import commands
from sections.model.commands import Decision, get_session
from sections.model.state import MemoryState
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session
from sections.specs import command_specs
from sections.specs.context import CommandContext
from sections.specs.spec import Call, CommandSpec

EVENTS = "events"  # an ADK session's events
STATE = "state"  # state deltas: a session's seed, or the app's and the users' in their holders
EVENT_KIND = "adk.event"
STATE_KIND = "adk.state"
EVENT_ID = "event_id"  # item metadata: the ADK event's id
SECTIONS: dict[str, dict[str, Any]] = {
    EVENTS: {"budget_tokens": None, "policy": "fifo", "searchable": True},
    STATE: {"budget_tokens": None, "policy": "fifo"},
}
_PLAIN = re.compile(r"[A-Za-z0-9._@-]+")


def _log_id(prefix: str, *parts: str) -> str:
    """`prefix:part:...` when every part is plain and it fits, else `prefix:+h:<sha256>` (a
    plain part never holds `+`, so the two forms never meet)."""
    plain = f"{prefix}:" + ":".join(parts)
    if all(_PLAIN.fullmatch(p) for p in parts) and len(plain) <= 128:
        return plain
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]
    return f"{prefix}:+h:{digest}"


def session_log_id(app_name: str, user_id: str, session_id: str) -> str:
    return _log_id("adk", app_name, user_id, session_id)


def app_log_id(app_name: str) -> str:
    return _log_id("adk-app", app_name)


def user_log_id(app_name: str, user_id: str) -> str:
    return _log_id("adk-user", app_name, user_id)


def split_state(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A state (or delta) as ADK's scopes: `app`, `user` (prefixes removed) and `session`;
    `temp:` keys dropped. Values made JSON as ADK's database services make them."""
    out: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for key, value in state.items():
        if not isinstance(key, str):
            raise InvalidInput(f"a state key is a string, not {type(key).__name__}")
        if key.startswith(State.APP_PREFIX):
            out["app"][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            out["user"][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            out["session"][key] = value
    try:
        return to_jsonable_python(out)
    except Exception as e:  # pydantic's serializer raises its own for what is not JSON
        raise InvalidInput(f"state values must be JSON: {e}") from None


def state_item(delta: dict[str, Any]) -> dict:
    content, metadata = exact_json.stored(delta)
    return {"content": content, "kind": STATE_KIND, **({"metadata": metadata} if metadata else {})}


def event_item(event: Event) -> dict:
    try:
        data = to_jsonable_python(event.model_dump(mode="json", exclude_none=True))
    except Exception as e:
        raise InvalidInput(f"an event must be JSON: {e}") from None
    content, metadata = exact_json.stored(data)
    return {"content": content, "kind": EVENT_KIND, "metadata": {**metadata, EVENT_ID: event.id}}


def _view_value(view: ItemView) -> Any:
    return exact_json.value_of(view.content, view.metadata)


def _fold(views: list[ItemView]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for view in views:
        state.update(_view_value(view))
    return state


# ---- append: the event and its app and user deltas, one decision -----------------------------


def _append_decide(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    item, holders = call.args
    target = get_session(state, call.tenant, call.session)
    section = commands.get_section(target, EVENTS)
    event_id = item["metadata"][EVENT_ID]
    for stored in section.items.values():  # ADK's idempotent re-delivery of an equal event
        if stored.metadata.get(EVENT_ID) == event_id and ctx.content_of(stored) == item["content"]:
            return Decision((), (False, target.version))
    made = [commands.add_items(target, EVENTS, [item], ctx.counter_of(target), call.idem,
                               call.expected, ctx.content_of, ctx.summarizer)]  # fmt: skip
    for holder_id, delta in holders:
        holder = get_session(state, call.tenant, holder_id)
        made.append(commands.add_items(holder, STATE, [delta], ctx.counter_of(holder), None, None,
                                       ctx.content_of, ctx.summarizer))  # fmt: skip
    return Decision(made, True)


def _appended(_ctx: CommandContext, record: Record | None, decision: Decision | None) -> tuple:
    """(whether the event was appended, the session's version now): the first record of the
    decision is the event's, and a session's version is the seq of its last change."""
    if record is None:
        return decision.result if decision is not None else (False, None)
    return True, record.seq


APPEND_EVENT = CommandSpec("adk_append_event", _append_decide, result=_appended)


class LedgerSessionService(BaseSessionService):
    """ADK's `BaseSessionService` on a ledgermem `Memory` (one tenant), for
    `Runner(..., session_service=LedgerSessionService())`.

    `LedgerSessionService()` is in-process and not durable, as ADK's `InMemorySessionService`
    is: a memory of its own on a scratch directory (no fsync), closed and removed by `close()`
    or when the service is collected. `data_dir=` makes it durable in a ledgermem data
    directory; `memory=` uses a `Memory` of the caller's (the caller closes it), which a
    `LedgerMemoryService` may share. `erase=False` makes `delete_session` a deletion that keeps
    the records (for time travel) instead of an erasure."""

    def __init__(
        self,
        *,
        memory: Memory | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        tenant: str | None = None,
        erase: bool = True,
        reader: str = "agent",
    ) -> None:
        self._own = Owned(self, memory, data_dir, tenant, "ledgermem-adk-")
        self.memory = self._own.memory
        self.tenant = self._own.tenant
        self.erase = erase
        self.reader = reader

    # -- helpers

    def _session(self, log_id: str) -> Session:
        return Session(self.memory, self.tenant, log_id)

    async def _holder(self, log_id: str, metadata: dict[str, Any]) -> None:
        await self.memory.run_async(
            command_specs.GET_OR_CREATE_SESSION, self.tenant, log_id,
            (self.memory.session_config({STATE: SECTIONS[STATE]}), metadata),
        )  # fmt: skip

    async def _holders(self, app_name: str, user_id: str, deltas: dict) -> list[tuple[str, dict]]:
        """The holders the app's and the user's deltas go to (created when new)."""
        out = []
        if deltas["app"]:
            log_id = app_log_id(app_name)
            await self._holder(log_id, {"adk_holder": "app", "app_name": app_name})
            out.append((log_id, state_item(deltas["app"])))
        if deltas["user"]:
            log_id = user_log_id(app_name, user_id)
            await self._holder(
                log_id, {"adk_holder": "user", "app_name": app_name, "adk_user_id": user_id}
            )
            out.append((log_id, state_item(deltas["user"])))
        return out

    async def _holder_state(self, log_id: str) -> dict[str, Any]:
        try:
            return _fold(await self._session(log_id).get_async(STATE, reader=self.reader))
        except SessionNotFound:
            return {}

    async def _merged(self, app_name: str, user_id: str, own: dict[str, Any]) -> dict[str, Any]:
        state = dict(own)
        for key, value in (await self._holder_state(app_log_id(app_name))).items():
            state[State.APP_PREFIX + key] = value
        for key, value in (await self._holder_state(user_log_id(app_name, user_id))).items():
            state[State.USER_PREFIX + key] = value
        return state

    async def _load(
        self, app_name: str, user_id: str, session_id: str
    ) -> tuple[AdkSession, int] | None:
        """The stored session with all its events and its projected state, and its version."""
        log_id = session_log_id(app_name, user_id, session_id)
        try:
            info = self.memory.session_info(self.tenant, log_id)
            version = self.memory.session_version(self.tenant, log_id)
            views = await self._session(log_id).get_async(None, reader=self.reader)
        except SessionNotFound:
            return None
        own = _fold([v for v in views if v.section == STATE])  # the seed, then the events'
        events = [Event.model_validate(_view_value(v)) for v in views if v.section == EVENTS]
        for event in events:
            delta = event.actions.state_delta if event.actions else None
            own.update(split_state(delta or {})["session"])
        updated = events[-1].timestamp if events else info["created_ts"] / 1_000_000
        session = AdkSession(
            id=session_id, app_name=app_name, user_id=user_id,
            state=await self._merged(app_name, user_id, own), events=events,
            last_update_time=updated,
        )  # fmt: skip
        session._storage_update_marker = str(version)
        return session, version

    # -- BaseSessionService

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        session_id = session_id.strip() if session_id else None
        session_id = session_id or str(uuid.uuid4())
        deltas = split_state(state or {})
        log_id = session_log_id(app_name, user_id, session_id)
        sections = {EVENTS: SECTIONS[EVENTS], STATE: dict(SECTIONS[STATE])}
        if deltas["session"]:
            sections[STATE]["items"] = [state_item(deltas["session"])]
        metadata = {"app_name": app_name, "user_id": user_id, "adk_session_id": session_id}
        try:
            await self.memory.run_async(command_specs.CREATE_SESSION, self.tenant, log_id,
                                        (self.memory.session_config(sections), metadata))  # fmt: skip
        except SessionExists:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        for holder_id, item in await self._holders(app_name, user_id, deltas):
            await self._session(holder_id).add_many_async(STATE, [item])
        loaded = await self._load(app_name, user_id, session_id)
        if loaded is None:  # deleted by another caller meanwhile
            raise SessionNotFoundError(f"Session {session_id} not found.")
        return loaded[0]

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        session_id = session_id.strip() if session_id else session_id
        loaded = await self._load(app_name, user_id, session_id)
        if loaded is None:
            return None
        session = loaded[0]
        if config is not None:
            events = session.events
            if config.num_recent_events is not None:
                events = events[-config.num_recent_events :] if config.num_recent_events else []
            if config.after_timestamp is not None:
                events = [e for e in events if e.timestamp >= config.after_timestamp]
            session.events = events
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        where = {"app_name": app_name, **({"user_id": user_id} if user_id is not None else {})}
        found = []
        for info in self.memory.list_sessions(self.tenant, where):
            metadata = info["metadata"]
            if "adk_session_id" not in metadata:
                continue  # a holder, or a session made another way
            loaded = await self._load(app_name, metadata["user_id"], metadata["adk_session_id"])
            if loaded is not None:
                found.append(loaded[0].model_copy(update={"events": []}))
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        session = self._session(session_log_id(app_name, user_id, session_id))
        try:
            if self.erase:
                await session.erase_all_async(reason="adk delete_session")
            else:
                await session.delete_async()
        except SessionNotFound:
            return

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._holder_state(user_log_id(app_name, user_id))

    async def append_event(self, session: AdkSession, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        delta = event.actions.state_delta if event.actions else None
        deltas = split_state(delta or {})
        item = event_item(event)
        log_id = session_log_id(session.app_name, session.user_id, session.id)
        marker = session._storage_update_marker
        expected = int(marker) if marker is not None and marker.isdigit() else None
        try:
            self.memory.require_session(self.tenant, log_id)
            holders = await self._holders(session.app_name, session.user_id, deltas)
            appended, version = await self.memory.run_async(
                APPEND_EVENT, self.tenant, log_id, (item, holders), expected_version=expected
            )
        except SessionNotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except VersionConflict as e:
            from google.adk.errors import StaleSessionError

            raise StaleSessionError(  # ADK's database services' wording, which callers match
                f"The session has been modified in storage since it was loaded ({e}). Please "
                "reload the session (get_session) before appending more events."
            ) from None
        if version is not None:
            session._storage_update_marker = str(version)
        if not appended:
            return event
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    def close(self) -> None:
        """Close the memory the service opened (a scratch one is removed); nothing for a
        `memory=` of the caller's."""
        self._own.close()
