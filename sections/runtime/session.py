"""`Session`: a handle on one (tenant, session id) of a `Memory`.

It holds no state. Each command is one line of the table below: a function that takes the
caller's arguments and turns them into the command's (args, idempotency key, expected version),
and the command spec it runs (sections/specs/command_specs.py). `_twins` derives the sync method and
its `*_async` twin from that one line, so the two cannot disagree.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eventstore.errors import InvalidInput
from sections.model.compaction import checked_summarizer
from sections.model.item_filter import ItemFilter
from sections.model.names import TENANT_SESSION
from sections.retrieval import observations
from sections.retrieval.views import Extra
from sections.runtime import capture
from sections.specs import command_specs as specs
from sections.specs import fact_specs
from sections.specs.erase_flow import item_ids

if TYPE_CHECKING:
    from sections.runtime.memory import Memory

Arguments = Callable[..., tuple[tuple, str | None, int | None]]


def _twins(spec: specs.CommandSpec, arguments: Arguments, pick: Callable[[Any], Any] | None = None):
    """The sync method and the async method that run `spec` with what `arguments` makes of the
    caller's arguments; `pick` takes the caller's part of the spec's result."""

    def run(self: Session, *a: Any, **kw: Any) -> Any:
        args, key, expected = arguments(*a, **kw)
        result = self.memory.run(spec, self.tenant, self.id, args, key, expected)
        return result if pick is None else pick(result)

    async def run_async(self: Session, *a: Any, **kw: Any) -> Any:
        args, key, expected = arguments(*a, **kw)
        result = await self.memory.run_async(spec, self.tenant, self.id, args, key, expected)
        return result if pick is None else pick(result)

    signature = inspect.signature(arguments)
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    signature = signature.replace(
        parameters=params + list(signature.parameters.values()),
        return_annotation=inspect.Signature.empty,
    )
    for method in (run, run_async):
        method.__signature__ = signature  # type: ignore[attr-defined]
        method.__doc__ = arguments.__doc__
    return run, run_async


def _first(items: list) -> Any:
    return items[0]


def _second(pair: tuple) -> Any:
    return pair[1]


# ---- what each command takes ------------------------------------------------------------------
# Every function returns (the spec's args, idempotency key, expected version).


def _add(section: str, content: object, *, idempotency_key: str | None = None,
         expected_version: int | None = None, **fields: object):  # fmt: skip
    """Add one item (fields: kind, role, tags, priority, metadata, group, name, tool_calls, tool_call_id)."""
    return (section, [{"content": content, **fields}]), idempotency_key, expected_version


def _add_many(section: str, items: list[dict], *, idempotency_key: str | None = None,
              expected_version: int | None = None):  # fmt: skip
    """Add items atomically: one record."""
    return (section, list(items)), idempotency_key, expected_version


def _update(section: str, item: str, *, idempotency_key: str | None = None,
            expected_version: int | None = None, **changes: object):  # fmt: skip
    """Change an item's content, tags, priority, metadata, kind or role."""
    return (section, item, changes), idempotency_key, expected_version


def _remove(section: str, items: list[str] | str, *, idempotency_key: str | None = None,
            expected_version: int | None = None):  # fmt: skip
    """Remove items from a section."""
    return (section, item_ids(items)), idempotency_key, expected_version


def _configure(section: str, *, idempotency_key: str | None = None,
               expected_version: int | None = None, **settings: object):  # fmt: skip
    """Change a section's budget, policy, lifetime or flags for this session (or add one)."""
    return (section, settings), idempotency_key, expected_version


def _commit(section: str | None = None, *, idempotency_key: str | None = None,
            expected_version: int | None = None):  # fmt: skip
    """Mark what `commit`-lifetime sections hold now as surviving restarts."""
    return (section,), idempotency_key, expected_version


def _session_command(*, idempotency_key: str | None = None, expected_version: int | None = None):
    return (), idempotency_key, expected_version


def _end(messages: list[dict] | None = None, *, idempotency_key: str | None = None,
         expected_version: int | None = None):  # fmt: skip
    """End the session; its summary follows. `messages` ([{role, content}], a runtime's
    transcript) are first added to `messages`, one record, so the summary counts them. With a
    transcript, `expected_version` is checked against the session before it is added."""
    if messages is None:
        return (None, None, None), idempotency_key, expected_version
    items = specs.transcript_items(messages)
    return (items, idempotency_key, expected_version), idempotency_key, None


def _get(section: str | None = None, ids: list[str] | None = None, *, reader: str = "agent",
         **filters: object):  # fmt: skip
    """Items of a section (or of every section, section by section), oldest first. Filters:
    kind (event types), role, since/until (microseconds), recent=N (the newest N), offset,
    limit (sections/model/item_filter.py). Leaves an `items.read` record of what it returns."""
    return (section, ids, reader, _filter(filters)), None, None


def _events(types: list[str] | str | None = None, *, reader: str = "agent", **filters: object):
    """The session's timeline: items with an event type, across sections in the order they
    were written, of these `types` (all when None). Filters: role, since/until, recent, offset,
    limit. Leaves an `items.read` record (purpose "events") of what it returns."""
    return (None, None, reader, _filter({**filters, "kind": types}, timeline=True)), None, None


def _filter(filters: dict, timeline: bool = False) -> ItemFilter:
    unknown = set(filters) - {"kind", "role", "since", "until", "recent", "offset", "limit"}
    if unknown:
        raise InvalidInput(f"unknown filters {sorted(unknown)}")
    return ItemFilter.of(
        filters.get("kind"), filters.get("role"), filters.get("since"), filters.get("until"),
        filters.get("recent"), filters.get("offset", 0), filters.get("limit"), timeline,
    )  # fmt: skip


def _assemble(budget: int = 8000, sections: list[str] | None = None, *, reader: str = "agent",
              **extra: object):  # fmt: skip
    """The `context.assembled` record and the messages: OpenAI-style, within `budget` tokens.
    `query=`, `observations=N`, `summaries=M`, `observation_chars=C`, `facts=K`, `sessions=N`
    (AgentOps' `<memory:sessions>` block): see sections/retrieval/inject.py."""
    return (budget, sections, reader, Extra.of(**extra)), None, None  # type: ignore[arg-type]


def _compact_for_payload(target_bytes: int, *, section: str = "messages", budget: int = 8000,
                         sections: list[str] | None = None, summarizer=None,
                         idempotency_key: str | None = None,
                         expected_version: int | None = None):  # fmt: skip
    """After a model call failed with "payload too large": compact `section` until what
    `context(budget, sections)` renders fits `target_bytes` (compact JSON). Appends one
    `section.compacted` record, or none when it fits already; CannotCompact when nothing makes
    it fit. `summarizer` (messages, max_tokens) -> str overrides the memory's for this call.
    Returns {compacted, seq, bytes_before, bytes_after, tokens_before, tokens_after, replaced,
    truncated}, the last two counts (docs/compaction.md)."""
    if summarizer is not None:  # called outside the memory's lock, as the memory's own
        summarizer = checked_summarizer(summarizer)
    args = (section, target_bytes, budget, sections, summarizer)
    return args, idempotency_key, expected_version


def _erase(ids: list[str] | str, *, reason: str):
    """Erase items for good: remove them, redact every payload holding their content, tags or
    metadata, purge snapshots. Items no longer live (evicted, removed) can be erased too.
    Items added in the same batch record go as well. Gives every erased id."""
    return (item_ids(ids), reason), None, None


def _erase_all(*, reason: str):
    """Erase the whole session, deleted or not: every record this (tenant, session id) ever
    wrote, in every incarnation, has its payload redacted; then the session leaves state."""
    return (reason,), None, None


class Session(fact_specs.FactCommands):
    """One session's commands. Every write returns once its record is durable."""

    def __init__(self, memory: Memory, tenant: str, session_id: str) -> None:
        self.memory = memory
        self.tenant = tenant
        self.id = session_id

    @property
    def version(self) -> int:
        return self.memory.session_version(self.tenant, self.id)

    def info(self) -> dict:
        return self.memory.session_info(self.tenant, self.id)

    def summary(self) -> dict | None:
        """The summary appended when the session last ended, or None."""
        return self.memory.session_summary(self.tenant, self.id)

    def stats(self) -> dict:
        return self.memory.stats(self.tenant, self.id)

    # -- commands: each a spec, run sync or async

    add, add_async = _twins(specs.ADD_ITEMS, _add, _first)
    add_many, add_many_async = _twins(specs.ADD_ITEMS, _add_many)
    update, update_async = _twins(specs.UPDATE_ITEM, _update)
    remove, remove_async = _twins(specs.REMOVE_ITEMS, _remove)
    configure, configure_async = _twins(specs.CONFIGURE_SECTION, _configure)
    commit, commit_async = _twins(specs.COMMIT, _commit)
    end_turn, end_turn_async = _twins(specs.END_TURN, _session_command)
    end, end_async = _twins(specs.END_SESSION, _end)  # then its summary
    delete, delete_async = _twins(specs.DELETE_SESSION, _session_command)
    get, get_async = _twins(specs.READ_ITEMS, _get)
    events, events_async = _twins(specs.READ_ITEMS, _events)
    assemble, assemble_async = _twins(specs.ASSEMBLE_CONTEXT, _assemble)
    context, context_async = _twins(specs.ASSEMBLE_CONTEXT, _assemble, _second)
    compact_for_payload_error, compact_for_payload_error_async = _twins(
        specs.COMPACT_FOR_PAYLOAD, _compact_for_payload
    )
    erase_items, erase_items_async = _twins(specs.ERASE_ITEMS, _erase)
    erase, erase_async = _twins(specs.ERASE_ITEMS, _erase, _second)
    erase_all, erase_all_async = _twins(specs.ERASE_SESSION, _erase_all)

    # -- facts asserted in this session; sources are its item ids (docs/facts.md). The methods
    # (assert_fact, assert_facts, extract_facts, retract_fact, facts, *_async) are
    # fact_specs.FactCommands'.

    def _fact_scope(self, _kw: dict) -> tuple[Memory, str, str]:
        return self.memory, self.tenant, self.id

    # -- tenant-wide commands, narrowed to this session

    def search(self, query: str, **options: object) -> list:
        """Search this session's searchable sections and the tenant-wide observations, which
        every session sees (see `Memory.search`)."""
        return self.memory.search(query, **self._search_scope(options))

    async def search_async(self, query: str, **options: object) -> list:
        return await self.memory.search_async(query, **self._search_scope(options))

    def _search_scope(self, options: dict) -> dict:
        # tenant_observations=False: this session's own items only
        return {
            "tenant_observations": True,
            **options,
            "tenant": self.tenant,
            "sessions": [self.id],
        }

    # -- a runtime's tool call through the memory's capture rules (sections/runtime/capture.py)

    def tool_call(self, tool: str, args: dict | None = None, output: object = None, *,
                  call_id: str | None = None) -> dict:  # fmt: skip
        """Report a tool call and its result: the tool's inject rule traces what a search finds,
        the first matching save rule makes the result an observation naming the rule. Returns
        {"injected": {rule, query, seq, found} | None, "saved": {rule, id, tier, ...} | None}."""
        return capture.report(self.memory, self.tenant, self.id, tool, args, output, call_id)

    async def tool_call_async(self, tool: str, args: dict | None = None, output: object = None,
                              *, call_id: str | None = None) -> dict:  # fmt: skip
        return await capture.report_async(
            self.memory, self.tenant, self.id, tool, args, output, call_id
        )

    def _observation(self, scope: str) -> dict:
        if scope not in observations.SCOPES:
            raise InvalidInput(f"scope must be one of {', '.join(observations.SCOPES)}")
        if scope == "session":
            return {"tenant": self.tenant, "session": self.id}
        return {
            "tenant": self.tenant,
            "from_session": None if self.id == TENANT_SESSION else self.id,
        }

    def observe(self, type: str, title: str, content: str, *, scope: str = "tenant",
                **options: object) -> observations.Outcome:  # fmt: skip
        """Record an observation for the whole tenant (scope "tenant", the default: every
        session of the tenant sees it, and its `metadata.session` names this one), or in this
        session's own `observations` section (scope "session")."""
        return self.memory.observe(type, title, content, **self._observation(scope), **options)

    async def observe_async(self, type: str, title: str, content: str, *, scope: str = "tenant",
                            **options: object) -> observations.Outcome:  # fmt: skip
        where = self._observation(scope)
        return await self.memory.observe_async(type, title, content, **where, **options)
