"""The OpenAI Agents SDK's `Session` over ledgermem: `LedgerSession` (docs/adapters/openai-agents.md).

The SDK (`openai-agents`, `agents.memory.Session`) keeps a conversation as a list of input
items (messages, tool calls and their outputs, reasoning, ...: JSON objects) behind four async
methods, `get_items(limit)`, `add_items(items)`, `pop_item()` and `clear_session()`, which a
`Runner` calls when given `session=`. Here the conversation is a ledgermem session (its id the
SDK's, encoded by sections/adapters/foreign_ids.py) and each input item is an item of its
`items` section: every add is an `item.added` record, every read an `items.read` record, a pop an
`item.removed`, and a clear the session's verifiable erasure (`session.erased`, its payloads
redacted from the segment files). Nothing is kept here besides the ids: two `LedgerSession`s on
one memory see the same items, and a reopened memory gives them back.

An item keeps its exact shape: its JSON is the item's content, or its JSON text where the log's
canonical JSON would change a value (sections/adapters/exact_json.py).

Nothing of the SDK is imported here: the `Session` protocol is structural.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from eventstore.errors import InvalidInput
from sections.adapters import exact_json, foreign_ids
from sections.adapters.own_memory import Owned
from sections.errors import SectionNotFound, SessionNotFound
from sections.model import commands
from sections.model.commands import Decision, get_session
from sections.model.state import MemoryState
from sections.runtime.memory import ItemView, Memory
from sections.runtime.session import Session
from sections.specs import command_specs
from sections.specs.context import CommandContext
from sections.specs.spec import Call, CommandSpec

ITEMS = "items"  # the section a conversation's input items are kept in
KIND = "openai_agents.item"  # the kind of those items
SECTIONS: dict[str, dict[str, Any]] = {
    ITEMS: {"budget_tokens": None, "policy": "fifo", "searchable": True}
}


def item_of(item: object) -> dict:
    """The ledgermem item an input item becomes; InvalidInput for what is not a JSON object."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"an input item is a JSON object (a dict), not {type(item).__name__}")
    content, metadata = exact_json.stored(dict(item))
    return {"content": content, "kind": KIND, **({"metadata": metadata} if metadata else {})}


def _pop_decide(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    """The newest item of the section, removed: one `item.removed`, decided under the memory's
    lock so two concurrent pops never take the same item; no record when it is empty."""
    (section_name,) = call.args
    target = get_session(state, call.tenant, call.session)
    section = target.sections.get(section_name)
    if section is None or not section.items:
        return Decision((), None)
    last = max(section.items.values(), key=lambda i: i.order)
    command = commands.remove_items(target, section_name, [last.id], call.idem, call.expected)
    return Decision((command,), (ctx.content_of(last), dict(last.metadata)))


POP_LAST = CommandSpec(
    "openai_agents_pop",
    _pop_decide,
    result=lambda _ctx, _record, decision: None if decision is None else decision.result,
    session_local=True,
)


class LedgerSession:
    """The Agents SDK's `Session` on a ledgermem `Memory` (one tenant), for `Runner.run(...,
    session=LedgerSession("user-123"))`.

    `LedgerSession(session_id)` is in-process and not durable, as the SDK's
    `SQLiteSession(session_id)` is: a memory of its own on a scratch directory (no fsync),
    closed and removed by `close()` or when the session is collected. `data_dir=` makes that
    memory durable in a ledgermem data directory; `memory=` uses a `Memory` of the caller's
    (shared by any number of sessions; the caller closes it). `session_settings` is the SDK's
    `SessionSettings` (or a dict): its `limit` is `get_items`'s default. `erase=False` makes
    `clear_session` a plain deletion (the records stay, for time travel) instead of an erasure.
    """

    def __init__(
        self,
        session_id: str,
        *,
        memory: Memory | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        tenant: str | None = None,
        session_settings: Any = None,
        erase: bool = True,
        reader: str = "agent",
    ) -> None:
        if not isinstance(session_id, str):
            raise InvalidInput(f"a session id is a string, not {type(session_id).__name__}")
        log_id = foreign_ids.encode(session_id)
        command_specs.check_not_reserved(log_id)
        self._own = Owned(self, memory, data_dir, tenant, "ledgermem-agents-")
        self.memory = self._own.memory
        self.tenant = self._own.tenant
        self.session_id = session_id
        self.log_id = log_id
        self.session_settings = _settings(session_settings)
        self.erase = erase
        self.reader = reader
        self._closed = False

    @property
    def _session(self) -> Session:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return Session(self.memory, self.tenant, self.log_id)

    def _metadata(self) -> dict:
        metadata: dict[str, Any] = {"framework": "openai-agents"}
        if foreign_ids.needs_original(self.session_id):
            metadata[foreign_ids.ORIGINAL_KEY] = self.session_id
        return metadata

    def _limit(self, limit: int | None) -> int | None:
        if limit is not None:
            return limit
        settings = self.session_settings
        return None if settings is None else getattr(settings, "limit", None)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The conversation's items, oldest first: all (`limit` None, or negative, as the SDK's
        SQLite session reads them), or the newest `limit`. A read: traced. [] for a conversation
        with none."""
        limit = self._limit(limit)
        if limit is not None and (type(limit) is not int):
            raise InvalidInput("limit must be an integer or None")
        if limit == 0:
            return []
        filters: dict[str, Any] = {} if limit is None or limit < 0 else {"recent": limit}
        try:
            views = await self._session.get_async(ITEMS, reader=self.reader, **filters)
        except (SessionNotFound, SectionNotFound):
            return []
        return [_input_of(v) for v in views]

    async def add_items(self, items: list[Any]) -> None:
        """Add items at the end, all in one `item.added` record (the conversation is created by
        the first add). InvalidInput, nothing appended, when one is not a JSON object."""
        session = self._session
        if not items:
            return
        made = [item_of(item) for item in items]
        try:
            await session.add_many_async(ITEMS, made)
        except SessionNotFound:
            await self.memory.run_async(
                command_specs.GET_OR_CREATE_SESSION, self.tenant, self.log_id,
                (self.memory.session_config(SECTIONS), self._metadata()),
            )  # fmt: skip
            await session.add_many_async(ITEMS, made)
        except SectionNotFound:  # a session made another way: give it the items section
            await session.configure_async(ITEMS, **SECTIONS[ITEMS])
            await session.add_many_async(ITEMS, made)

    async def pop_item(self) -> Any:
        """Remove and return the newest item (one `item.removed`); None when there is none."""
        session = self._session
        try:
            popped = await self.memory.run_async(POP_LAST, self.tenant, session.id, (ITEMS,))
        except SessionNotFound:
            return None
        if popped is None:
            return None
        content, metadata = popped
        return exact_json.value_of(content, metadata)

    async def clear_session(self) -> None:
        """Forget the conversation: by default its verifiable erasure (every record of this
        session id redacted from the files, `session.erased`); with `erase=False`, its deletion
        (`session.deleted`). Nothing when there is no conversation."""
        session = self._session
        try:
            if self.erase:
                await session.erase_all_async(reason="openai-agents clear_session")
            else:
                await session.delete_async()
        except SessionNotFound:
            return

    def close(self) -> None:
        """Close the memory the session opened (a scratch one is removed); nothing for a
        `memory=` of the caller's. Later calls raise RuntimeError, as the SDK's do."""
        self._closed = True
        self._own.close()


def _input_of(view: ItemView) -> Any:
    return exact_json.value_of(view.content, view.metadata)


def _settings(settings: Any) -> Any:
    """The SDK's `SessionSettings` as given, a dict made one (with the SDK's own coercion when
    it is installed, else a plain namespace with its `limit`); none given, the SDK's default
    `SessionSettings()` (None without the SDK), as its SQLite session has."""
    if settings is not None and not isinstance(settings, dict):
        return settings
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        if settings is None:
            return None
        unknown = set(settings) - {"limit"}
        if unknown:
            raise InvalidInput(f"unknown session settings {sorted(unknown)}") from None
        from types import SimpleNamespace

        return SimpleNamespace(limit=settings.get("limit"))
    return SessionSettings() if settings is None else coerce_session_settings(settings)
