"""`Session`: a handle on one (tenant, session id) of a `Memory`.

It holds no state: each method names a command of the table (sections/specs/command_specs.py),
makes its arguments from the caller's, and runs it on the memory. A method and its `*_async`
twin share the function that makes the arguments, so the two cannot disagree; writes return once
their record is durable, reads once their `items.read` record is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.model.capture_rules import CaptureRules
from sections.model.commands import get_session
from sections.model.compaction import Summarizer, checked_summarizer
from sections.model.config import MemoryConfig
from sections.model.item_filter import ItemFilter
from sections.model.names import OBSERVATION_SCOPES, TENANT_SESSION
from sections.model.render import DEFAULT_CONTEXT_BUDGET
from sections.model.state import MemoryState
from sections.retrieval.facts import Fact
from sections.retrieval.observations import Outcome
from sections.retrieval.views import Extra, ItemView, SearchHit
from sections.runtime import reads
from sections.specs import command_specs as specs
from sections.specs import fact_specs
from sections.specs.capture_specs import INJECT_TRACE, answer, checked_call, plan
from sections.specs.erase_flow import item_ids
from sections.specs.search_specs import SourceUser
from sections.specs.spec import CommandSpec

T = TypeVar("T")
Arguments = tuple[tuple, str | None, int | None]  # the spec's args, idempotency key, version


class SessionHost(Protocol):
    """What a session needs of its memory (`Memory` is one)."""

    @property
    def config(self) -> MemoryConfig: ...

    @property
    def fact_extractor(self) -> Callable[[str], object] | None: ...

    def run(self, spec: CommandSpec, tenant: str, session: str | None = None, args: tuple = (),
            idempotency_key: str | None = None, expected_version: int | None = None) -> Any: ...  # fmt: skip

    async def run_async(self, spec: CommandSpec, tenant: str, session: str | None = None,
                        args: tuple = (), idempotency_key: str | None = None,
                        expected_version: int | None = None) -> Any: ...  # fmt: skip

    def read(self, fn: Callable[[MemoryState], T], *,
             session: tuple[str, str] | None = None) -> T: ...  # fmt: skip


M = TypeVar("M", bound=SessionHost)


class Session(Generic[M]):
    """One session's commands. Every write returns once its record is durable."""

    def __init__(self, memory: M, tenant: str, session_id: str) -> None:
        self.memory = memory
        self.tenant = tenant
        self.id = session_id

    def _run(self, spec: CommandSpec, made: Arguments) -> Any:
        args, key, expected = made
        return self.memory.run(spec, self.tenant, self.id, args, key, expected)

    async def _run_async(self, spec: CommandSpec, made: Arguments) -> Any:
        args, key, expected = made
        return await self.memory.run_async(spec, self.tenant, self.id, args, key, expected)

    # ---- what the session is -------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The seq of the last record that changed this session's memory."""
        tenant, id_ = self.tenant, self.id
        return self.memory.read(
            lambda state: get_session(state, tenant, id_).version, session=(tenant, id_)
        )

    def info(self) -> dict:
        tenant, id_ = self.tenant, self.id
        return self.memory.read(
            lambda state: reads.session_info(get_session(state, tenant, id_)), session=(tenant, id_)
        )

    def summary(self) -> dict | None:
        """The summary appended when the session last ended, or None. A read: traced."""
        found = self.memory.run(specs.READ_SUMMARIES, self.tenant, self.id, (1, "agent"))
        return found[0] if found else None

    def stats(self) -> dict:
        """Items, tokens and evictions of this session, by section."""
        tenant, id_ = self.tenant, self.id
        return self.memory.read(lambda state: reads.stats(state, tenant, id_))

    # ---- writes ----------------------------------------------------------------------------------

    def add(self, section: str, content: object, *, idempotency_key: str | None = None,
            expected_version: int | None = None, **fields: object) -> ItemView:  # fmt: skip
        """Add one item (fields: kind, role, tags, priority, metadata, group, name, tool_calls,
        tool_call_id)."""
        args = (section, [{"content": content, **fields}])
        return self._run(specs.ADD_ITEMS, (args, idempotency_key, expected_version))[0]

    async def add_async(self, section: str, content: object, *,
                        idempotency_key: str | None = None, expected_version: int | None = None,
                        **fields: object) -> ItemView:  # fmt: skip
        args = (section, [{"content": content, **fields}])
        return (await self._run_async(specs.ADD_ITEMS, (args, idempotency_key, expected_version)))[
            0
        ]

    def add_many(self, section: str, items: list[dict], *, idempotency_key: str | None = None,
                 expected_version: int | None = None) -> list[ItemView]:  # fmt: skip
        """Add items atomically: one record."""
        made = ((section, list(items)), idempotency_key, expected_version)
        return self._run(specs.ADD_ITEMS, made)

    async def add_many_async(self, section: str, items: list[dict], *,
                             idempotency_key: str | None = None,
                             expected_version: int | None = None) -> list[ItemView]:  # fmt: skip
        made = ((section, list(items)), idempotency_key, expected_version)
        return await self._run_async(specs.ADD_ITEMS, made)

    def update(self, section: str, item: str, *, idempotency_key: str | None = None,
               expected_version: int | None = None, **changes: object) -> Record:  # fmt: skip
        """Change an item's content, tags, priority, metadata, kind or role."""
        made = ((section, item, changes), idempotency_key, expected_version)
        return self._run(specs.UPDATE_ITEM, made)

    async def update_async(self, section: str, item: str, *, idempotency_key: str | None = None,
                           expected_version: int | None = None,
                           **changes: object) -> Record:  # fmt: skip
        made = ((section, item, changes), idempotency_key, expected_version)
        return await self._run_async(specs.UPDATE_ITEM, made)

    def remove(self, section: str, items: list[str] | str, *, idempotency_key: str | None = None,
               expected_version: int | None = None) -> Record:  # fmt: skip
        """Remove items from a section."""
        made = ((section, item_ids(items)), idempotency_key, expected_version)
        return self._run(specs.REMOVE_ITEMS, made)

    async def remove_async(self, section: str, items: list[str] | str, *,
                           idempotency_key: str | None = None,
                           expected_version: int | None = None) -> Record:  # fmt: skip
        made = ((section, item_ids(items)), idempotency_key, expected_version)
        return await self._run_async(specs.REMOVE_ITEMS, made)

    def configure(self, section: str, *, idempotency_key: str | None = None,
                  expected_version: int | None = None, **settings: object) -> Record:  # fmt: skip
        """Change a section's budget, policy, lifetime or flags for this session (or add one)."""
        made = ((section, settings), idempotency_key, expected_version)
        return self._run(specs.CONFIGURE_SECTION, made)

    async def configure_async(self, section: str, *, idempotency_key: str | None = None,
                              expected_version: int | None = None,
                              **settings: object) -> Record:  # fmt: skip
        made = ((section, settings), idempotency_key, expected_version)
        return await self._run_async(specs.CONFIGURE_SECTION, made)

    def commit(self, section: str | None = None, *, idempotency_key: str | None = None,
               expected_version: int | None = None) -> Record:  # fmt: skip
        """Mark what `commit`-lifetime sections hold now as surviving restarts."""
        return self._run(specs.COMMIT, ((section,), idempotency_key, expected_version))

    async def commit_async(self, section: str | None = None, *,
                           idempotency_key: str | None = None,
                           expected_version: int | None = None) -> Record:  # fmt: skip
        return await self._run_async(specs.COMMIT, ((section,), idempotency_key, expected_version))

    def end_turn(self, *, idempotency_key: str | None = None,
                 expected_version: int | None = None) -> Record:  # fmt: skip
        """End the turn: turn-lifetime sections are cleared."""
        return self._run(specs.END_TURN, ((), idempotency_key, expected_version))

    async def end_turn_async(self, *, idempotency_key: str | None = None,
                             expected_version: int | None = None) -> Record:  # fmt: skip
        return await self._run_async(specs.END_TURN, ((), idempotency_key, expected_version))

    def end(self, messages: list[dict] | None = None, *, idempotency_key: str | None = None,
            expected_version: int | None = None) -> Record:  # fmt: skip
        """End the session; its summary follows. `messages` ([{role, content}], a runtime's
        transcript) are first added to `messages`, one record, so the summary counts them. With a
        transcript, `expected_version` is checked against the session before it is added."""
        return self._run(specs.END_SESSION, _end(messages, idempotency_key, expected_version))

    async def end_async(self, messages: list[dict] | None = None, *,
                        idempotency_key: str | None = None,
                        expected_version: int | None = None) -> Record:  # fmt: skip
        made = _end(messages, idempotency_key, expected_version)
        return await self._run_async(specs.END_SESSION, made)

    def delete(self, *, idempotency_key: str | None = None,
               expected_version: int | None = None) -> Record:  # fmt: skip
        """Delete the session (`session.deleted`); its records stay in the log."""
        return self._run(specs.DELETE_SESSION, ((), idempotency_key, expected_version))

    async def delete_async(self, *, idempotency_key: str | None = None,
                           expected_version: int | None = None) -> Record:  # fmt: skip
        return await self._run_async(specs.DELETE_SESSION, ((), idempotency_key, expected_version))

    def compact_for_payload_error(
        self, target_bytes: int, *, section: str = "messages", budget: int = DEFAULT_CONTEXT_BUDGET,
        sections: list[str] | None = None, summarizer: Summarizer | None = None,
        idempotency_key: str | None = None, expected_version: int | None = None,
    ) -> dict:  # fmt: skip
        """After a model call failed with "payload too large": compact `section` until what
        `context(budget, sections)` renders fits `target_bytes` (compact JSON). Appends one
        `section.compacted` record, or none when it fits already; CannotCompact when nothing
        makes it fit. `summarizer` (messages, max_tokens) -> str overrides the memory's for this
        call. Returns {compacted, seq, bytes_before, bytes_after, tokens_before, tokens_after,
        replaced, truncated}, the last two counts (docs/compaction.md)."""
        made = _compaction(target_bytes, section, budget, sections, summarizer, idempotency_key,
                           expected_version)  # fmt: skip
        return self._run(specs.COMPACT_FOR_PAYLOAD, made)

    async def compact_for_payload_error_async(
        self, target_bytes: int, *, section: str = "messages", budget: int = DEFAULT_CONTEXT_BUDGET,
        sections: list[str] | None = None, summarizer: Summarizer | None = None,
        idempotency_key: str | None = None, expected_version: int | None = None,
    ) -> dict:  # fmt: skip
        made = _compaction(target_bytes, section, budget, sections, summarizer, idempotency_key,
                           expected_version)  # fmt: skip
        return await self._run_async(specs.COMPACT_FOR_PAYLOAD, made)

    # ---- reads -----------------------------------------------------------------------------------

    def get(self, section: str | None = None, ids: list[str] | None = None, *,
            reader: str = "agent", **filters: object) -> list[ItemView]:  # fmt: skip
        """Items of a section (or of every section, section by section), oldest first. Filters:
        kind (event types), role, since/until (microseconds), recent=N (the newest N), offset,
        limit (sections/model/item_filter.py). Leaves an `items.read` record of what it
        returns."""
        return self._run(specs.READ_ITEMS, ((section, ids, reader, _filter(filters)), None, None))

    async def get_async(self, section: str | None = None, ids: list[str] | None = None, *,
                        reader: str = "agent", **filters: object) -> list[ItemView]:  # fmt: skip
        made = ((section, ids, reader, _filter(filters)), None, None)
        return await self._run_async(specs.READ_ITEMS, made)

    def events(self, types: list[str] | str | None = None, *, reader: str = "agent",
               **filters: object) -> list[ItemView]:  # fmt: skip
        """The session's timeline: items with an event type, across sections in the order they
        were written, of these `types` (all when None). Filters: role, since/until, recent,
        offset, limit. Leaves an `items.read` record (purpose "events") of what it returns."""
        return self._run(specs.READ_ITEMS, _events(types, reader, filters))

    async def events_async(self, types: list[str] | str | None = None, *, reader: str = "agent",
                           **filters: object) -> list[ItemView]:  # fmt: skip
        return await self._run_async(specs.READ_ITEMS, _events(types, reader, filters))

    def assemble(self, budget: int = DEFAULT_CONTEXT_BUDGET, sections: list[str] | None = None, *,
                 reader: str = "agent", **extra: Any) -> tuple[Record, list[dict]]:  # fmt: skip
        """The `context.assembled` record and the messages: OpenAI-style, within `budget`
        tokens. `query=`, `observations=N`, `summaries=M`, `observation_chars=C`, `facts=K`,
        `sessions=N` (AgentOps' `<memory:sessions>` block): see sections/retrieval/inject.py."""
        made = ((budget, sections, reader, Extra.of(**extra)), None, None)
        return self._run(specs.ASSEMBLE_CONTEXT, made)

    async def assemble_async(self, budget: int = DEFAULT_CONTEXT_BUDGET, sections: list[str] | None = None, *,
                             reader: str = "agent",
                             **extra: Any) -> tuple[Record, list[dict]]:  # fmt: skip
        made = ((budget, sections, reader, Extra.of(**extra)), None, None)
        return await self._run_async(specs.ASSEMBLE_CONTEXT, made)

    def context(self, budget: int = DEFAULT_CONTEXT_BUDGET, sections: list[str] | None = None, *,
                reader: str = "agent", **extra: Any) -> list[dict]:  # fmt: skip
        """The messages of `assemble` (its record is in the log)."""
        return self.assemble(budget, sections, reader=reader, **extra)[1]

    async def context_async(self, budget: int = DEFAULT_CONTEXT_BUDGET, sections: list[str] | None = None, *,
                            reader: str = "agent", **extra: Any) -> list[dict]:  # fmt: skip
        return (await self.assemble_async(budget, sections, reader=reader, **extra))[1]

    # ---- erasure ---------------------------------------------------------------------------------

    def erase_items(self, ids: list[str] | str, *, reason: str) -> tuple[Record, list[str]]:
        """Erase items for good: remove them, redact every payload holding their content, tags
        or metadata, purge snapshots. Items no longer live (evicted, removed) can be erased too.
        Items added in the same batch record go as well. Gives the record and every erased id."""
        return self._run(specs.ERASE_ITEMS, ((item_ids(ids), reason), None, None))

    async def erase_items_async(self, ids: list[str] | str, *,
                                reason: str) -> tuple[Record, list[str]]:  # fmt: skip
        return await self._run_async(specs.ERASE_ITEMS, ((item_ids(ids), reason), None, None))

    def erase(self, ids: list[str] | str, *, reason: str) -> list[str]:
        """`erase_items`, giving every erased id."""
        return self.erase_items(ids, reason=reason)[1]

    async def erase_async(self, ids: list[str] | str, *, reason: str) -> list[str]:
        return (await self.erase_items_async(ids, reason=reason))[1]

    def erase_all(self, *, reason: str) -> Record:
        """Erase the whole session, deleted or not: every record this (tenant, session id) ever
        wrote, in every incarnation, has its payload redacted; then the session leaves state."""
        return self._run(specs.ERASE_SESSION, ((reason,), None, None))

    async def erase_all_async(self, *, reason: str) -> Record:
        return await self._run_async(specs.ERASE_SESSION, ((reason,), None, None))

    # ---- facts asserted in this session; sources are its item ids (docs/facts.md) --------------

    def assert_fact(self, subject: str, predicate: str, object: str, *,
                    sources: list | None = None, valid_from: int | None = None,
                    metadata: dict | None = None, multi: bool = False,
                    idempotency_key: str | None = None) -> Fact:  # fmt: skip
        """Assert one fact in this session (see `Memory.assert_fact`); returns the Fact."""
        made = fact_specs.assert_one(subject, predicate, object, sources=sources,
                                     valid_from=valid_from, metadata=metadata, multi=multi,
                                     idempotency_key=idempotency_key)  # fmt: skip
        return self._facts(fact_specs.ASSERT_FACTS, made)[1][0]

    async def assert_fact_async(self, subject: str, predicate: str, object: str, *,
                                sources: list | None = None, valid_from: int | None = None,
                                metadata: dict | None = None, multi: bool = False,
                                idempotency_key: str | None = None) -> Fact:  # fmt: skip
        made = fact_specs.assert_one(subject, predicate, object, sources=sources,
                                     valid_from=valid_from, metadata=metadata, multi=multi,
                                     idempotency_key=idempotency_key)  # fmt: skip
        return (await self._facts_async(fact_specs.ASSERT_FACTS, made))[1][0]

    def assert_facts(self, facts: list[dict], *,
                     idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        """Assert several facts in one record, in order (a later one may close an earlier)."""
        made = fact_specs.assert_many(facts, idempotency_key=idempotency_key)
        return self._facts(fact_specs.ASSERT_FACTS, made)[1]

    async def assert_facts_async(self, facts: list[dict], *,
                                 idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        made = fact_specs.assert_many(facts, idempotency_key=idempotency_key)
        return (await self._facts_async(fact_specs.ASSERT_FACTS, made))[1]

    def extract_facts(self, items: list[str] | str, *,
                      extract: fact_specs.Extractor | None = None,
                      idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        """Facts extracted from these items' text by `extract(text) -> [(s, p, o), ...]`
        (default `Memory.fact_extractor`), called outside the lock; its output is stored in the
        record, and the read of the items traced."""
        made = fact_specs.extract(items, extract=self._extractor(extract),
                                  idempotency_key=idempotency_key)  # fmt: skip
        return self._facts(fact_specs.ASSERT_FACTS, made)[1]

    async def extract_facts_async(self, items: list[str] | str, *,
                                  extract: fact_specs.Extractor | None = None,
                                  idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        made = fact_specs.extract(items, extract=self._extractor(extract),
                                  idempotency_key=idempotency_key)  # fmt: skip
        return (await self._facts_async(fact_specs.ASSERT_FACTS, made))[1]

    def retract_fact(self, fact: str, *, at: int | None = None, reason: str | None = None,
                     idempotency_key: str | None = None) -> Fact | None:  # fmt: skip
        """End a valid fact at `at` (default now). Returns the Fact as it now is."""
        made = fact_specs.retract(fact, at=at, reason=reason, idempotency_key=idempotency_key)
        return self._facts(fact_specs.RETRACT_FACT, made)[1]

    async def retract_fact_async(self, fact: str, *, at: int | None = None,
                                 reason: str | None = None,
                                 idempotency_key: str | None = None) -> Fact | None:  # fmt: skip
        made = fact_specs.retract(fact, at=at, reason=reason, idempotency_key=idempotency_key)
        return (await self._facts_async(fact_specs.RETRACT_FACT, made))[1]

    def facts(self, subject: str | None = None, predicate: str | None = None,
              object: str | None = None, *, as_of: int | None = None,
              include_history: bool = False, reader: str = "agent") -> list[Fact]:  # fmt: skip
        """The facts asserted in this session or learned from its items, matching the given
        fields (see `Memory.facts`). A read: traced on `_tenant`."""
        made = fact_specs.query(subject, predicate, object, as_of=as_of,
                                include_history=include_history, reader=reader)  # fmt: skip
        return self._facts(fact_specs.READ_FACTS, made)

    async def facts_async(self, subject: str | None = None, predicate: str | None = None,
                          object: str | None = None, *, as_of: int | None = None,
                          include_history: bool = False,
                          reader: str = "agent") -> list[Fact]:  # fmt: skip
        made = fact_specs.query(subject, predicate, object, as_of=as_of,
                                include_history=include_history, reader=reader)  # fmt: skip
        return await self._facts_async(fact_specs.READ_FACTS, made)

    def _extractor(self, extract: fact_specs.Extractor | None) -> fact_specs.Extractor | None:
        return extract if extract is not None else self.memory.fact_extractor

    def _facts(self, spec: CommandSpec, made: fact_specs.Arguments) -> Any:
        """A fact command runs on the tenant's `_tenant` session, for this one (`where`)."""
        args, key, _ = made
        return self.memory.run(spec, self.tenant, fact_specs.HOLDER, (self.id, *args), key)

    async def _facts_async(self, spec: CommandSpec, made: fact_specs.Arguments) -> Any:
        args, key, _ = made
        return await self.memory.run_async(spec, self.tenant, fact_specs.HOLDER, (self.id, *args),
                                           key)  # fmt: skip

    # ---- the tenant's commands, narrowed to this session ----------------------------------------

    def search(self, query: str, **options: Any) -> list[SearchHit]:
        """Search this session's searchable sections and the tenant-wide observations, which
        every session sees (see `Memory.search`; tenant_observations=False: this session's own
        items only). `scope="session"|"user"|"tenant"` ranks as recall does, over this session,
        its user's sessions, or the tenant (docs/recall.md)."""
        return self.memory.run(specs.SEARCH, self.tenant, None, self._search(query, options))

    async def search_async(self, query: str, **options: Any) -> list[SearchHit]:
        args = self._search(query, options)
        return await self.memory.run_async(specs.SEARCH, self.tenant, None, args)

    def _search(self, query: str, options: dict) -> tuple:
        options.pop("tenant", None)  # this session's
        if options.get("scope") is not None:
            return specs.search_args(query, **{**options, "session": self.id})
        scoped = {"tenant_observations": True, **options, "sessions": [self.id]}
        return specs.search_args(query, **scoped)

    def observe(self, type: str, title: str, content: str, *, scope: str | None = None,
                **options: Any) -> Outcome:  # fmt: skip
        """Record an observation for this session's user (scope "user": the sessions with the
        same metadata `user_id` see it), for the whole tenant (scope "tenant": every session of
        the tenant sees it), or in this session's own `observations` section (scope "session").
        The default: "user" when the session has a `user_id`, else "tenant". A tenant-wide one's
        `metadata.session` names this session. Options: tags, topic_key, source (see
        `Memory.observe`)."""
        args = self._observation(type, title, content, scope, options)
        return self.memory.run(specs.OBSERVE, self.tenant, None, args)

    async def observe_async(self, type: str, title: str, content: str, *,
                            scope: str | None = None, **options: Any) -> Outcome:  # fmt: skip
        args = self._observation(type, title, content, scope, options)
        return await self.memory.run_async(specs.OBSERVE, self.tenant, None, args)

    def _observation(
        self, type: str, title: str, content: str, scope: str | None, options: dict
    ) -> tuple:
        if scope is not None and scope not in OBSERVATION_SCOPES:
            raise InvalidInput(f"scope must be one of {', '.join(OBSERVATION_SCOPES)}")
        if "user" in options:
            raise InvalidInput("a session's observation is for its own user (metadata user_id)")
        if scope == "session":
            return specs.observation_args(type, title, content, session=self.id, **options)
        source = None if self.id == TENANT_SESSION else self.id
        required = scope == "user"  # refused from a session of no user (`_tenant` included)
        plain = scope == "tenant" or (source is None and not required)
        user = None if plain else SourceUser(required)
        return specs.observation_args(type, title, content, from_session=source, user=user,
                                      **options)  # fmt: skip

    # ---- a runtime's tool call through the memory's capture rules (specs/capture_specs.py) ------

    def tool_call(self, tool: str, args: dict | None = None, output: object = None, *,
                  call_id: str | None = None) -> dict:  # fmt: skip
        """Report a tool call and its result: the tool's inject rule traces what a search finds,
        the first matching save rule makes the result an observation naming the rule. Returns
        {"injected": {rule, query, seq, found} | None, "saved": {rule, id, tier, ...} | None}."""
        planned = plan(self._rules(tool, args, call_id), self.id, tool, args or {}, output,
                       call_id)  # fmt: skip
        run = self.memory.run
        traced = run(INJECT_TRACE, self.tenant, self.id, planned.trace) if planned.trace else None
        outcome = (
            run(specs.OBSERVE, self.tenant, None, planned.observe) if planned.observe else None
        )
        return answer(planned, traced, outcome)

    async def tool_call_async(self, tool: str, args: dict | None = None, output: object = None,
                              *, call_id: str | None = None) -> dict:  # fmt: skip
        planned = plan(self._rules(tool, args, call_id), self.id, tool, args or {}, output,
                       call_id)  # fmt: skip
        run = self.memory.run_async
        traced = (
            await run(INJECT_TRACE, self.tenant, self.id, planned.trace) if planned.trace else None
        )
        outcome = (
            await run(specs.OBSERVE, self.tenant, None, planned.observe)
            if planned.observe
            else None
        )
        return answer(planned, traced, outcome)

    def _rules(self, tool: object, args: object, call_id: object) -> CaptureRules:
        """The memory's capture rules, once the call is checked and the session found."""
        checked_call(tool, args, call_id)
        tenant, id_ = self.tenant, self.id
        self.memory.read(lambda state: get_session(state, tenant, id_), session=(tenant, id_))
        return self.memory.config.capture


# ---- what each command takes ------------------------------------------------------------------


def _end(messages: list[dict] | None, key: str | None, expected: int | None) -> Arguments:
    if messages is None:
        return (None, None, None), key, expected
    items = specs.transcript_items(messages)
    return (items, key, expected), key, None


def _filter(filters: dict, timeline: bool = False) -> ItemFilter:
    unknown = set(filters) - {"kind", "role", "since", "until", "recent", "offset", "limit"}
    if unknown:
        raise InvalidInput(f"unknown filters {sorted(unknown)}")
    return ItemFilter.of(
        filters.get("kind"), filters.get("role"), filters.get("since"), filters.get("until"),
        filters.get("recent"), filters.get("offset", 0), filters.get("limit"), timeline,
    )  # fmt: skip


def _events(types: list[str] | str | None, reader: str, filters: dict) -> Arguments:
    return (None, None, reader, _filter({**filters, "kind": types}, timeline=True)), None, None


def _compaction(
    target_bytes: int, section: str, budget: int, sections: list[str] | None,
    summarizer: Summarizer | None, key: str | None, expected: int | None,
) -> Arguments:  # fmt: skip
    if summarizer is not None:  # called outside the memory's lock, as the memory's own
        summarizer = checked_summarizer(summarizer)
    return (section, target_bytes, budget, sections, summarizer), key, expected
