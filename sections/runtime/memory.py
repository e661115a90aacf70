"""The memory: `Memory.open(dir)`, the public face on one log's engine.

Every command runs the same way: the command table (sections/specs/command_specs.py) defines each
one once, and the engine (sections/runtime/engine.py) runs it. Under one lock, and (almost
always) without I/O: decide the record from the current state, hand it to the log writer, which
assigns its seq at once, and apply what was logged to the state with the projection. Then,
outside the lock, wait until the record is durable before returning. The lock is held for
microseconds, so many callers share each fsync, and state is changed in exactly the order of the
log. A read appends its `items.read` record the same way and returns content only once that
record is durable (fail closed).

`Memory` holds its engine and no state of its own: it checks what it is opened with, and each of
its methods names a command and its arguments, or a read of the engine's state. `Session`
(sections/runtime/session.py) is the same for one session.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from eventstore.identifiers import check_identifier
from eventstore.layout import DataDir
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.store import KeyInfo, open_log
from eventstore.writer import DEFAULT_SEG_BITS, Durability, LogWriter, Pending
from sections.model import retention
from sections.model.commands import Decision, get_session
from sections.model.compaction import Summarizer, digest
from sections.model.config import MemoryConfig
from sections.model.item import Item
from sections.model.names import TENANT_SESSION
from sections.model.state import MemoryState
from sections.model.tokens import TokenCounter
from sections.retrieval.facts import Fact
from sections.retrieval.observations import DEFAULT_WINDOW_US, Outcome
from sections.retrieval.search import SearchIndex
from sections.retrieval.views import ItemView, SearchHit
from sections.runtime import reads
from sections.runtime.engine import Engine, engine_settings
from sections.runtime.history import History
from sections.runtime.live_state import LiveState
from sections.runtime.session import Session
from sections.runtime.tracing import Tracing
from sections.specs import command_specs as specs
from sections.specs import fact_specs
from sections.specs.spec import CommandSpec

SNAPSHOT_EVERY = 100_000  # records between automatic snapshots
T = TypeVar("T")

__all__ = ["ItemView", "Memory", "SearchHit", "Session"]


class Memory:
    """Sessions of typed, budgeted sections, kept as a projection of the signed log."""

    data: DataDir
    key: KeyInfo | None
    log_dir: Path
    _engine: Engine
    _live: LiveState  # the engine's
    # The runtime's `fn(text) -> [(subject, predicate, object), ...]` for extract_facts.
    fact_extractor: Callable[[str], object] | None

    def __init__(self) -> None:
        raise TypeError("use Memory.open()")

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        config: MemoryConfig | str | Path | None = None,
        counter: TokenCounter | str | None = None,
        tenant: str = "default",
        durability: Durability = Durability.FSYNC,
        seg_bits: int = DEFAULT_SEG_BITS,
        checkpoint_interval: float = 1.0,
        snapshot_every: int = SNAPSHOT_EVERY,
        dedup_window_us: int = DEFAULT_WINDOW_US,
        clock: Callable[[], int] = time.time_ns,
        summarizer: Summarizer = digest,
    ) -> Memory:
        """The memory of a data directory's own file log (created with its key if new).
        `summarizer` writes the summaries of sections with compaction (docs/compaction.md)."""
        data = DataDir(data_dir)
        settings = engine_settings(config, counter, tenant, dedup_window_us, summarizer)
        writer, key = open_log(
            data.root,
            seg_bits=seg_bits,
            durability=durability,
            checkpoint_interval=checkpoint_interval,
            clock=clock,
        )
        return cls._attach(writer, key, data.log, data, snapshot_every, settings)

    @classmethod
    def open_on(
        cls,
        writer: LogWriter,
        log_dir: str | os.PathLike[str],
        data_dir: str | os.PathLike[str],
        *,
        key: KeyInfo | None = None,
        config: MemoryConfig | str | Path | None = None,
        counter: TokenCounter | str | None = None,
        tenant: str = "default",
        snapshot_every: int = SNAPSHOT_EVERY,
        dedup_window_us: int = DEFAULT_WINDOW_US,
        summarizer: Summarizer = digest,
    ) -> Memory:
        """The memory of a log that someone else opened: `writer` appends (e.g. a shared store's
        partition, on a PgSink), `log_dir` holds the same log as spec segment files to read from
        (that partition's mirror), and `data_dir` keeps this memory's caches (snapshots/, index/).

        The memory owns the writer from here on: `close()` closes it, and so does a failure to
        open. Loading is `open`'s: the newest snapshot, then the log's tail folded in."""
        try:
            data = DataDir(data_dir)
            settings = engine_settings(config, counter, tenant, dedup_window_us, summarizer)
        except BaseException:
            writer.close()
            raise
        return cls._attach(writer, key, Path(log_dir), data, snapshot_every, settings)

    @classmethod
    def _attach(
        cls, writer: LogWriter, key: KeyInfo | None, log_dir: Path, data: DataDir,
        snapshot_every: int, settings: dict[str, Any],
    ) -> Memory:  # fmt: skip
        """Load the state for `writer`'s log, read from `log_dir`: the part `open` and `open_on`
        share."""
        self = object.__new__(cls)
        self.data, self.key, self.log_dir = data, key, log_dir
        self.fact_extractor = None
        try:
            live = LiveState(writer, log_dir, data.root, snapshot_every,
                             settings["config"].recall_semantic)  # fmt: skip
            self._engine = Engine(live, **settings)
            self._live = live
            self._engine.recover()
        except BaseException:
            writer.close()
            raise
        return self

    # ---- what it was opened with, and its parts -------------------------------------------------

    @property
    def config(self) -> MemoryConfig:
        return self._engine.config

    @property
    def counter(self) -> TokenCounter:
        """The counter new sessions count with unless they name another."""
        return self._engine.counter

    @property
    def tenant(self) -> str:
        """The tenant of calls that name none."""
        return self._engine.tenant

    @property
    def writer(self) -> LogWriter:
        return self._live.writer

    @property
    def reader(self) -> LogReader:
        return self._live.reader

    @property
    def history(self) -> History:
        return self._live.history

    @property
    def search_index(self) -> SearchIndex:
        return self._live.search_index

    @property
    def search_index_source(self) -> str:
        """Where the search index came from at open: "snapshot" or "built"."""
        return self._live.search_index_source

    @property
    def snapshot_dir(self) -> Path:
        return self._live.snapshot_dir

    @property
    def tracing(self) -> Tracing | None:
        """A tracer (sections/runtime/tracing.py), or None. Set it before commands run."""
        return self._engine.tracing

    @tracing.setter
    def tracing(self, tracing: Tracing | None) -> None:
        self._engine.tracing = tracing

    @property
    def failure(self) -> BaseException | None:
        """Why commands and reads are refused after a failed write, or None (see `heal`)."""
        return self._live.failure

    @property
    def _lock(self) -> threading.Lock:  # the engine's, which tests watch
        return self._live.lock

    @property
    def _append_spans(self) -> dict[Pending, Callable[[BaseException | None], None]]:
        return self._engine.append_spans  # the spans of appends still open, which tests watch

    # ---- running commands ------------------------------------------------------------------------

    def run(self, spec: CommandSpec, tenant: str, session: str | None = None, args: tuple = (),
            idempotency_key: str | None = None, expected_version: int | None = None) -> Any:  # fmt: skip
        """Run one command of the table (sections/specs/command_specs.py); returns once durable."""
        return self._engine.run(spec, tenant, session, args, idempotency_key, expected_version)

    async def run_async(self, spec: CommandSpec, tenant: str, session: str | None = None,
                        args: tuple = (), idempotency_key: str | None = None,
                        expected_version: int | None = None) -> Any:  # fmt: skip
        """`run` for asyncio: the same steps; those that read files go to a worker thread."""
        return await self._engine.run_async(spec, tenant, session, args, idempotency_key,
                                            expected_version)  # fmt: skip

    def append(self, decide: Callable[[MemoryState], Decision | None]) -> Record | None:
        """The primitive under every command: `decide(state)` under the lock, its records
        appended and applied; the first, once durable (None when it needs none). For the
        memory's own records, and for tests that write what a crash leaves."""
        return self._engine.append(decide)

    # ---- the state from the log ------------------------------------------------------------------

    def heal(self) -> bool:
        """After a failed write: reopen the log and rebuild the live state from it.

        Reopening runs recovery, which drops whatever was never durable and appends
        `log.resume`; the state and the search index are then loaded from the log (snapshot plus
        tail) exactly as `open` loads them, so the live state equals the log again, and only
        then are commands and reads taken again. Returns False when nothing had failed. Raises,
        staying failed, while the cause lasts (a full disk, no file descriptors): the caller
        retries with backoff (the service does, streams/server/service.py)."""
        return self._engine.heal()

    def rebuild(self, upto: int | None = None, use_snapshots: bool = False) -> MemoryState:
        """The projection rebuilt from the files alone (from zero unless `use_snapshots`)."""
        return self._live.rebuild(upto, use_snapshots)

    def state_at(self, seq: int) -> MemoryState:
        """Time travel: the projection as it was right after record `seq`."""
        return self._live.history.state_at(seq)

    def context_at(self, seq: int) -> list[dict]:
        """The messages exactly as the `context.assembled` record at `seq` assembled them."""
        return self._live.history.context_at(seq)

    def state_hash(self) -> str:
        return self.read(lambda state: state.state_hash())

    def snapshot(self) -> Path:
        """Write a snapshot of the state as of now (the log's durable head)."""
        return self._live.snapshot()

    def content_of(self, item: Item) -> object:
        """An item's content; one kept in the log is read once its record is durable."""
        return self._live.content_of(item)

    def record_at(self, seq: int) -> Record:
        """The record at `seq`, once durable (one applied under the lock may be on its way)."""
        return self._live.record_at(seq)

    # ---- consistent reads ------------------------------------------------------------------------

    def read(self, fn: Callable[[MemoryState], T], *, session: tuple[str, str] | None = None) -> T:
        """`fn(state)` under the memory's lock: a consistent read of the live state. `fn` must
        not change the state, nor keep references into it that it reads later.

        The answer comes only once every record it may reflect is durable, so no read shows a
        record that a failed write then drops. `session=(tenant, id)` says `fn` reads that one
        session only: then only its own last record is waited for, not every record in flight
        (an HTTP answer's ETag after a write would otherwise wait for other sessions' group
        commits on the event loop)."""
        return self._live.read(fn, session=session)

    def require_session(self, tenant: str, session_id: str) -> None:
        """SessionNotFound unless the session exists."""
        self.read(
            lambda state: get_session(state, tenant, session_id), session=(tenant, session_id)
        )

    def session_info(self, tenant: str, session_id: str) -> dict:
        return Session(self, tenant, session_id).info()

    def session_version(self, tenant: str, session_id: str) -> int:
        """The seq of the last record that changed the session (what `expected_version` names)."""
        return Session(self, tenant, session_id).version

    def session_summary(self, tenant: str, session_id: str) -> dict | None:
        """The summary appended when the session last ended, or None. A read: traced."""
        return Session(self, tenant, session_id).summary()

    def session_sections(self, tenant: str, session_id: str) -> dict:
        """Each section's config with its tokens, item count and evictions."""
        return self.read(
            lambda state: reads.session_sections(state, tenant, session_id),
            session=(tenant, session_id),
        )

    def stats(self, tenant: str | None = None, session: str | None = None) -> dict:
        """Sessions, items, tokens and evictions of a tenant or one session (NotFound)."""
        tenant = tenant or self.tenant
        return self.read(lambda state: reads.stats(state, tenant, session))

    def list_sessions(
        self,
        tenant: str | None = None,
        where: dict | None = None,
        *,
        since: int | None = None,
        until: int | None = None,
        offset: int = 0,
        limit: int | None = None,
        **metadata: object,
    ) -> list[dict]:
        """Sessions of a tenant in creation order, filtered by equality on creation metadata
        (e.g. app=, user=), by last activity (`since` <= active_ts < `until`, microseconds),
        then paged by `offset` and `limit`."""
        found = tenant or self.tenant
        wanted = {**(where or {}), **metadata}
        return self.read(
            lambda state: reads.list_sessions(state, found, wanted, since, until, offset, limit)
        )

    # ---- sessions --------------------------------------------------------------------------------

    def session(
        self,
        session_id: str | None = None,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict[str, dict] | None = None,
        create: bool = True,
        token_counter: str | None = None,
    ) -> Session[Memory]:
        """Get a session, creating it (with `metadata`, per-section overrides and its token
        counter) if it is new. Without an id, a new session gets a generated one (`s.id`)."""
        tenant = tenant or self.tenant
        if session_id is None:
            record = self.create_session(tenant=tenant, metadata=metadata, sections=sections,
                                         token_counter=token_counter)  # fmt: skip
            return Session(self, tenant, record.session)
        if create:
            self.get_or_create(session_id, tenant=tenant, metadata=metadata, sections=sections,
                               token_counter=token_counter)  # fmt: skip
        else:
            self.require_session(tenant, session_id)
        return Session(self, tenant, session_id)

    def session_config(
        self, sections: dict | None = None, token_counter: str | None = None
    ) -> MemoryConfig:
        """The config of a new session: the memory's, with per-section overrides and the token
        counter it will count with for good (a built-in's name: o200k_base, cl100k_base,
        approx-chars-per-4, or one this memory was opened with)."""
        config = self.config.with_overrides(sections)
        if token_counter is not None:
            config = replace(config, token_counter=token_counter)
            self.counter_for(config)  # an unknown name fails here
        return config

    def counter_for(self, config: MemoryConfig) -> TokenCounter:
        """The counter a session created with `config` counts with."""
        return self._engine.counter_for(config)

    def get_or_create(
        self,
        session_id: str,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict | None = None,
        token_counter: str | None = None,
    ) -> tuple[Record | None, bool]:
        """Create the session unless it exists; returns (its creation record or None, created)."""
        config = self.session_config(sections, token_counter)
        args = (config, metadata)
        return self.run(specs.GET_OR_CREATE_SESSION, tenant or self.tenant, session_id, args)

    def create_session(
        self,
        session_id: str | None = None,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict | None = None,
        idempotency_key: str | None = None,
        token_counter: str | None = None,
    ) -> Record:
        """Create a session; SessionExists if it is there already. `sections` overrides settings
        per section and seeds sections with `{"items": [...]}`, immutable ones included
        (docs/sections.md, "Seeding a session"). Without an id the memory makes one (the
        record's `session`): random, or derived from `idempotency_key`, so that a retry with
        the same key answers the first `session.created` and creates nothing. `token_counter`
        names the counter the session counts with for good (docs/tokens.md)."""
        config = self.session_config(sections, token_counter)
        if session_id is None:
            session_id = specs.session_id_for(idempotency_key)
        specs.check_not_reserved(session_id)
        return self.run(specs.CREATE_SESSION, tenant or self.tenant, session_id,
                        (config, metadata), idempotency_key)  # fmt: skip

    # ---- retention (sections/model/retention.py, docs/sections.md "Retention") -----------------

    def cleanup(self, max_age_seconds: float, *, tenant: str | None = None) -> list[str]:
        """Remove the tenant's sessions whose last activity (`active_ts`) is more than
        `max_age_seconds` old, each with a `session.deleted` record (reason `max_age`; erased
        from the files too with `retention_erase`); returns their ids, least recently active
        first. The reserved session `_tenant` is never removed."""
        tenant, args = self._cleanup_args(max_age_seconds, tenant)
        return [sid for _, sid in self.run(specs.CLEANUP, tenant, None, args)]

    async def cleanup_async(self, max_age_seconds: float, *,
                            tenant: str | None = None) -> list[str]:  # fmt: skip
        tenant, args = self._cleanup_args(max_age_seconds, tenant)
        return [sid for _, sid in await self.run_async(specs.CLEANUP, tenant, None, args)]

    def _cleanup_args(self, max_age_seconds: object, tenant: str | None) -> tuple[str, tuple]:
        tenant = tenant or self.tenant
        check_identifier("tenant", tenant)
        return tenant, (retention.max_age_us(max_age_seconds), retention.MAX_AGE, False)

    def expire_sessions(self, ttl_seconds: float) -> list[tuple[str, str]]:
        """The TTL the service applies (`session_ttl_seconds`): `cleanup` over every tenant,
        reason `ttl`; returns the (tenant, session id) removed."""
        args = (retention.max_age_us(ttl_seconds), retention.TTL, True)
        return self.run(specs.CLEANUP, self.tenant, None, args)

    async def expire_sessions_async(self, ttl_seconds: float) -> list[tuple[str, str]]:
        args = (retention.max_age_us(ttl_seconds), retention.TTL, True)
        return await self.run_async(specs.CLEANUP, self.tenant, None, args)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until the semantic extra's embeddings cover everything applied; False on timeout
        (recall runs on what is embedded meanwhile: docs/recall.md)."""
        return self._live.semantic is None or self._live.semantic.flush(timeout)

    # ---- search, observations, summaries ---------------------------------------------------------

    def search(self, query: str, *, tenant: str | None = None, **options: Any) -> list[SearchHit]:
        """BM25 search over the tenant's searchable sections, best first (ties by seq).

        Options: sessions, sections, tags (all of them), the item's time (`since` <= ts <
        `until`, microseconds), top_k, reader, markers; `tenant_observations=True` adds the
        tenant-wide observations the `sessions` see; `user` leaves out other users' sessions
        and observations (docs/search.md, "Users"). `scope="user"|"session"|"tenant"` with
        `session=ID` ranks as recall does, hits with `signals` and `time` (docs/recall.md).
        Hits are reads: each session with hits gets an `items.read` record (purpose "search"),
        and hits are returned once those are durable."""
        args = specs.search_args(query, **options)
        return self.run(specs.SEARCH, tenant or self.tenant, None, args)

    async def search_async(self, query: str, *, tenant: str | None = None,
                           **options: Any) -> list[SearchHit]:  # fmt: skip
        args = specs.search_args(query, **options)
        return await self.run_async(specs.SEARCH, tenant or self.tenant, None, args)

    def observe(self, type: str, title: str, content: str, *, tenant: str | None = None,
                **options: Any) -> Outcome:  # fmt: skip
        """Record an observation: tenant-wide, or in `session=`'s own `observations` section.
        Options: tags, topic_key, session, source ({str: str} kept in its metadata: where it came
        from), from_session (the session a tenant-wide observation came from: kept in its
        `metadata.session`; that session must exist and not have ended), user (a tenant-wide
        observation for that user only, kept in `metadata.user_id`: the sessions whose metadata
        `user_id` is the same see it, no other). Deduplicated in one atomic command
        (sections/retrieval/observations.py): a revision of the same topic, a duplicate of
        recent identical content, or a new item."""
        args = specs.observation_args(type, title, content, **options)
        return self.run(specs.OBSERVE, tenant or self.tenant, None, args)

    async def observe_async(self, type: str, title: str, content: str, *,
                            tenant: str | None = None, **options: Any) -> Outcome:  # fmt: skip
        args = specs.observation_args(type, title, content, **options)
        return await self.run_async(specs.OBSERVE, tenant or self.tenant, None, args)

    def summaries(self, tenant: str | None = None, limit: int = 10) -> list[dict]:
        """The newest session summaries of a tenant, newest first. A read: traced."""
        return self.run(specs.READ_SUMMARIES, tenant or self.tenant, None, (limit, "agent"))

    # ---- facts: tenant-wide (sections/retrieval/facts.py, docs/facts.md) -----------------------

    def assert_fact(self, subject: str, predicate: str, object: str, *,
                    tenant: str | None = None, sources: list | None = None,
                    valid_from: int | None = None, metadata: dict | None = None,
                    multi: bool = False, idempotency_key: str | None = None) -> Fact:  # fmt: skip
        """Assert one fact: it closes the facts of the same subject and predicate valid at its
        start (`valid_from`, default now; with `multi=True` only those with the same object).
        `sources`: the items it was learned from ({session, id}). Returns the Fact."""
        made = fact_specs.assert_one(subject, predicate, object, sources=sources,
                                     valid_from=valid_from, metadata=metadata, multi=multi,
                                     idempotency_key=idempotency_key)  # fmt: skip
        return self._facts(fact_specs.ASSERT_FACTS, tenant, made)[1][0]

    async def assert_fact_async(self, subject: str, predicate: str, object: str, *,
                                tenant: str | None = None, sources: list | None = None,
                                valid_from: int | None = None, metadata: dict | None = None,
                                multi: bool = False,
                                idempotency_key: str | None = None) -> Fact:  # fmt: skip
        made = fact_specs.assert_one(subject, predicate, object, sources=sources,
                                     valid_from=valid_from, metadata=metadata, multi=multi,
                                     idempotency_key=idempotency_key)  # fmt: skip
        return (await self._facts_async(fact_specs.ASSERT_FACTS, tenant, made))[1][0]

    def assert_facts(self, facts: list[dict], *, tenant: str | None = None,
                     idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        """Assert several facts in one record, in order (a later one may close an earlier)."""
        made = fact_specs.assert_many(facts, idempotency_key=idempotency_key)
        return self._facts(fact_specs.ASSERT_FACTS, tenant, made)[1]

    async def assert_facts_async(self, facts: list[dict], *, tenant: str | None = None,
                                 idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        made = fact_specs.assert_many(facts, idempotency_key=idempotency_key)
        return (await self._facts_async(fact_specs.ASSERT_FACTS, tenant, made))[1]

    def extract_facts(self, items: list[str] | str, *, tenant: str | None = None,
                      extract: fact_specs.Extractor | None = None,
                      idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        """Extraction reads a session's items: see `Session.extract_facts` (InvalidInput here)."""
        made = fact_specs.extract(items, extract=extract, idempotency_key=idempotency_key)
        return self._facts(fact_specs.ASSERT_FACTS, tenant, made)[1]

    async def extract_facts_async(self, items: list[str] | str, *, tenant: str | None = None,
                                  extract: fact_specs.Extractor | None = None,
                                  idempotency_key: str | None = None) -> list[Fact]:  # fmt: skip
        made = fact_specs.extract(items, extract=extract, idempotency_key=idempotency_key)
        return (await self._facts_async(fact_specs.ASSERT_FACTS, tenant, made))[1]

    def retract_fact(self, fact: str, *, tenant: str | None = None, at: int | None = None,
                     reason: str | None = None,
                     idempotency_key: str | None = None) -> Fact | None:  # fmt: skip
        """End a valid fact at `at` (default now). Returns the Fact as it now is."""
        made = fact_specs.retract(fact, at=at, reason=reason, idempotency_key=idempotency_key)
        return self._facts(fact_specs.RETRACT_FACT, tenant, made)[1]

    async def retract_fact_async(self, fact: str, *, tenant: str | None = None,
                                 at: int | None = None, reason: str | None = None,
                                 idempotency_key: str | None = None) -> Fact | None:  # fmt: skip
        made = fact_specs.retract(fact, at=at, reason=reason, idempotency_key=idempotency_key)
        return (await self._facts_async(fact_specs.RETRACT_FACT, tenant, made))[1]

    def facts(self, subject: str | None = None, predicate: str | None = None,
              object: str | None = None, *, tenant: str | None = None, as_of: int | None = None,
              include_history: bool = False, reader: str = "agent") -> list[Fact]:  # fmt: skip
        """Facts matching the given fields, valid now (or `as_of` a time, microseconds), or every
        one of them with `include_history=True`; by start. A read: traced on `_tenant`."""
        made = fact_specs.query(subject, predicate, object, as_of=as_of,
                                include_history=include_history, reader=reader)  # fmt: skip
        return self._facts(fact_specs.READ_FACTS, tenant, made)

    async def facts_async(self, subject: str | None = None, predicate: str | None = None,
                          object: str | None = None, *, tenant: str | None = None,
                          as_of: int | None = None, include_history: bool = False,
                          reader: str = "agent") -> list[Fact]:  # fmt: skip
        made = fact_specs.query(subject, predicate, object, as_of=as_of,
                                include_history=include_history, reader=reader)  # fmt: skip
        return await self._facts_async(fact_specs.READ_FACTS, tenant, made)

    def _facts(self, spec: CommandSpec, tenant: str | None, made: fact_specs.Arguments) -> Any:
        """A fact command of the tenant's (no session: `where` is None), run on `_tenant`."""
        args, key, _ = made
        return self.run(spec, tenant or self.tenant, fact_specs.HOLDER, (None, *args), key)

    async def _facts_async(self, spec: CommandSpec, tenant: str | None,
                           made: fact_specs.Arguments) -> Any:  # fmt: skip
        args, key, _ = made
        return await self.run_async(spec, tenant or self.tenant, fact_specs.HOLDER,
                                    (None, *args), key)  # fmt: skip

    def erase_facts(
        self, ids: list[str] | str, *, reason: str, tenant: str | None = None
    ) -> list[str]:
        """Erase facts for good (their statements, through items erasure of `_tenant`)."""
        return Session(self, tenant or self.tenant, TENANT_SESSION).erase(ids, reason=reason)

    # ---- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Snapshot, then close the log (log.close and the final checkpoint)."""
        self._live.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
