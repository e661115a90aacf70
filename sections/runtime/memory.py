"""The memory: `Memory.open(dir)`, its state from the log, snapshots, and its consistent reads.

Every command runs the same way: sections/specs/command_specs.py defines each one once, and
sections/runtime/runner.py runs it. Under one lock, and (almost always) without I/O: decide the record
from the current state, hand it to the log writer, which assigns its seq at once, and apply what
was logged to the state with the projection. Then, outside the lock, wait until the record is
durable before returning. The lock is held for microseconds, so many callers share each fsync,
and state is changed in exactly the order of the log. A read appends its `items.read` record the
same way and returns content only once that record is durable (fail closed).

`Session` (sections/runtime/session.py) is a handle on one session: its methods name a command spec and
run it here. Everything outside this module reaches the state through the public reads below.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from eventstore.errors import InvalidInput
from eventstore.identifiers import check_identifier
from eventstore.layout import DataDir
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.store import KeyInfo, open_log
from eventstore.writer import DEFAULT_SEG_BITS, Durability, LogWriter
from sections.errors import NotFound
from sections.model import commands, retention
from sections.model.commands import Decision
from sections.model.compaction import Summarizer, checked_summarizer, digest
from sections.model.config import MemoryConfig, load_config
from sections.model.item import Item
from sections.model.names import TENANT_SESSION
from sections.model.projection import redaction_done
from sections.model.state import MemoryState
from sections.model.tokens import DEFAULT_COUNTER, TokenCounter, counter_named
from sections.retrieval import observations, summaries
from sections.retrieval.search import SearchIndex
from sections.retrieval.views import MAX_TOP_K, Extra, ItemView, SearchHit
from sections.runtime import reads
from sections.runtime.history import History
from sections.runtime.runner import CommandRunner
from sections.runtime.session import Session
from sections.runtime.snapshot import Snapshot, purge_snapshots, read_attachment, write_snapshot
from sections.specs import command_specs, fact_specs

SNAPSHOT_EVERY = 100_000  # records between automatic snapshots
REDACTION_CHUNK = 50_000  # targets per redaction record (about 90 bytes each)
SEARCH_ATTACHMENT = "search.db"  # the search index's database, beside each snapshot
T = TypeVar("T")
log = logging.getLogger("ledgermem.memory")

__all__ = ["Extra", "ItemView", "MAX_TOP_K", "Memory", "SearchHit", "Session"]


class Memory(CommandRunner, fact_specs.FactCommands):
    """Sessions of typed, budgeted sections, kept as a projection of the signed log."""

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
        dedup_window_us: int = observations.DEFAULT_WINDOW_US,
        clock: Callable[[], int] = time.time_ns,
        summarizer: Summarizer = digest,
    ) -> Memory:
        """The memory of a data directory's own file log (created with its key if new).
        `summarizer` writes the summaries of sections with compaction (docs/compaction.md)."""
        data = DataDir(data_dir)
        self = object.__new__(cls)
        self._configure(data.root, config, counter, tenant, snapshot_every, dedup_window_us)
        self.summarizer = checked_summarizer(summarizer)
        writer, key = open_log(
            data.root,
            seg_bits=seg_bits,
            durability=durability,
            checkpoint_interval=checkpoint_interval,
            clock=clock,
        )
        return self._attach(writer, key, data.log)

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
        dedup_window_us: int = observations.DEFAULT_WINDOW_US,
        summarizer: Summarizer = digest,
    ) -> Memory:
        """The memory of a log that someone else opened: `writer` appends (e.g. a shared store's
        partition, on a PgSink), `log_dir` holds the same log as spec segment files to read from
        (that partition's mirror), and `data_dir` keeps this memory's caches (snapshots/, index/).

        The memory owns the writer from here on: `close()` closes it, and so does a failure to
        open. Loading is `open`'s: the newest snapshot, then the log's tail folded in."""
        self = object.__new__(cls)
        try:
            self._configure(
                Path(data_dir), config, counter, tenant, snapshot_every, dedup_window_us
            )
            self.summarizer = checked_summarizer(summarizer)
        except BaseException:
            writer.close()
            raise
        return self._attach(writer, key, Path(log_dir))

    def _attach(self, writer: LogWriter, key: KeyInfo | None, log_dir: Path) -> Memory:
        """Load the state for `writer`'s log, read from `log_dir`: the part `open` and `open_on`
        share."""
        self._writer = writer
        self.key = key
        self.log_dir = log_dir
        try:
            self._reader = LogReader(log_dir, index_dir=self.data.root / "index")
            self.history = History(self._reader, self.snapshot_dir)
            self.erase_hooks.append(self.history.checkpoints.forget)  # they may quote erased data
            self._state, snapshot, touched = self.history.load(self._writer.size - 1)
            self.search_index = self._open_index(self._state, snapshot, touched)
            self._since_snapshot = 0
            self._finish_erasures()
            self._restart()
        except BaseException:
            self._writer.close()
            raise
        return self

    def _configure(
        self,
        root: Path,
        config: MemoryConfig | str | Path | None,
        counter: TokenCounter | str | None,
        tenant: str,
        snapshot_every: int,
        dedup_window_us: int,
    ) -> None:
        """Everything but the log: checked before the log is opened."""
        self.data = DataDir(root)
        self.config = (
            config
            if isinstance(config, MemoryConfig)
            else load_config(config)
            if config
            else MemoryConfig()
        )
        # New sessions count with `counter` (an instance, or a built-in's name), else with the
        # config's `token_counter`, else o200k_base; a session keeps the one it was created with.
        if counter is None:
            counter = self.config.token_counter or DEFAULT_COUNTER
        self.counter = counter_named(counter) if isinstance(counter, str) else counter
        self._counters = {self.counter.name: self.counter}
        self.tenant = tenant
        self.snapshot_every = snapshot_every
        if type(dedup_window_us) is not int or dedup_window_us < 0:
            raise InvalidInput("dedup_window_us must be a non-negative integer of microseconds")
        self.dedup_window_us = dedup_window_us
        self._lock = threading.Lock()
        self._init_batches()
        self._decision_ts = 0  # the ts of the record being decided: valid under _lock
        self._snapshot_lock = threading.Lock()
        self._failed: BaseException | None = None
        self._heal_lock = threading.Lock()
        self.erase_hooks: list[Callable[[], None]] = []  # other projections purge their copies
        # The runtime's `fn(text) -> [(subject, predicate, object), ...]` for extract_facts.
        self.fact_extractor: Callable[[str], object] | None = None

    @property
    def writer(self):
        return self._writer

    @property
    def reader(self) -> LogReader:
        return self._reader

    @property
    def snapshot_dir(self) -> Path:
        return self.data.root / "snapshots"

    # ---- state from the log --------------------------------------------------------------------

    def _load(self, upto: int, use_snapshots: bool = True) -> MemoryState:
        return self.history.state_at(upto, use_snapshots)

    def _open_index(
        self, state: MemoryState, snapshot: Snapshot | None, touched: set
    ) -> SearchIndex:
        """The search index as the snapshot saved it, brought up to date for the sessions the
        log's tail touched; or, without a usable one, built from the state."""
        image = (
            read_attachment(self.snapshot_dir, snapshot, SEARCH_ATTACHMENT) if snapshot else None
        )
        if image is not None:
            try:
                index = SearchIndex(image)
            except sqlite3.DatabaseError as exc:
                log.warning("ignoring the snapshot's search index: %s", exc)
            else:
                index.resync(state, touched, self.content_of)
                self.search_index_source = "snapshot"
                return index
        index = SearchIndex()
        index.build(state, self.content_of)
        self.search_index_source = "built"
        return index

    def heal(self) -> bool:
        """After a failed write: reopen the log and rebuild the live state from it.

        Reopening runs recovery, which drops whatever was never durable and appends
        `log.resume`; the state and the search index are then loaded from the log (snapshot plus
        tail) exactly as `open` loads them, so the live state equals the log again, and only
        then are commands and reads taken again. Returns False when nothing had failed. Raises,
        staying failed, while the cause lasts (a full disk, no file descriptors): the caller
        retries with backoff (the service does, streams/server/service.py)."""
        with self._heal_lock:
            if self.failure is None:
                return False
            with self._lock:  # from here on every command and read is refused until rebuilt
                self._failed = self._failed or self._writer.failure
            self._writer.reopen()
            state, snapshot, touched = self.history.load(self._writer.size - 1)
            index = self._open_index(state, snapshot, touched)
            with self._lock:
                old_index, self.search_index = self.search_index, index
                self._state = state
                self._since_snapshot = 0
                self._failed = None
            old_index.close()
            self._finish_erasures()  # an erase whose redaction the failure stopped
            return True

    def rebuild(self, upto: int | None = None, use_snapshots: bool = False) -> MemoryState:
        """The projection rebuilt from the files alone (from zero unless `use_snapshots`)."""
        with self._lock:
            # Records the writer appends by itself (redactions) are not applied live: go to the head.
            seq = max(self._state.seq, self._writer.size - 1) if upto is None else upto
        self._writer.wait_for(seq)
        return self._load(seq, use_snapshots)

    def _finish_erasures(self) -> None:
        """Redact what an erase that a crash interrupted still left in the log."""
        for erase_seq, seqs in sorted(self._state.pending_erasures.items()):
            erase = self._reader.get(erase_seq)
            reason = erase.payload.get("reason", "erasure") if erase.has_payload else "erasure"
            left = [seq for seq in seqs if self._reader.get(seq).has_payload]
            if left:
                self.redact_erased(left, reason, f"{erase.type}@{erase_seq}")
            else:
                purge_snapshots(self.snapshot_dir)
                self._state.pending_erasures.pop(erase_seq, None)
        self.erase_retained()  # a retention erase a crash kept from being appended

    def _restart(self) -> None:
        """Append what a restart clears (process lifetime) or reverts (commit lifetime), and the
        summaries a crash kept from being appended after their session ended."""
        for command in commands.restart(self._state):
            self.append(lambda _state, c=command: Decision((c,)))
        for session in summaries.unsummarized(self._state):
            tenant, id_ = session.tenant, session.id
            self.append(lambda state, t=tenant, i=id_: command_specs.summarize(self, state, t, i))

    def state_at(self, seq: int) -> MemoryState:
        """Time travel: the projection as it was right after record `seq`."""
        return self._load(seq)

    def context_at(self, seq: int) -> list[dict]:
        """The messages exactly as the `context.assembled` record at `seq` assembled them."""
        return self.history.context_at(seq)

    def state_hash(self) -> str:
        return self.read(lambda state: state.state_hash())

    def snapshot(self) -> Path:
        """Write a snapshot of the state as of now (the log's durable head)."""
        # The snapshot lock keeps an erase's purge from running between taking the state and
        # writing the file: a snapshot taken before an erase must never appear after its purge.
        with self._snapshot_lock:
            with self._lock:
                state_json = self._state.to_json()
                snapshot = Snapshot(self._state.seq, self._state.h, {"sections": state_json})
                # The same point of the log: waits for a query running on the index, if any.
                image = self.search_index.serialize()
                self._since_snapshot = 0
            self._writer.wait_for(snapshot.seq)
            return write_snapshot(
                self.snapshot_dir, self._writer.origin, snapshot, {SEARCH_ATTACHMENT: image}
            )

    # ---- what command specs use besides the state (sections/specs/command_specs.py, erase_flow.py) ---

    @property
    def decision_ts(self) -> int:
        """The ts of the record being decided: valid only inside a decide function."""
        return self._decision_ts

    def content_of(self, item: Item) -> object:
        """An item's content; one kept in the log is read once its record is durable (it may
        still be on its way when a command decides under the lock)."""
        if item.content is None:
            self._writer.wait_for(item.content_seq)
        return self.history.content_of(item)

    def record_at(self, seq: int) -> Record:
        """The record at `seq`, once durable (one applied under the lock may be on its way)."""
        self._writer.wait_for(seq)
        return self._reader.get(seq)

    def fill(self, views: list[ItemView]) -> list[ItemView]:
        """The views with every content kept in the log read back from it."""
        return [
            view
            if view.content is not None
            else replace(view, content=self.history.logged_content(view.id, view.content_seq))
            for view in views
        ]

    def redact_erased(self, seqs: list[int], reason: str, request: str) -> None:
        """Steps 2 and 3 of an erase: redact the payloads, then purge what still holds them."""
        # Chunks keep each redaction record far below the 16 MiB line limit; only the last one
        # names the erase alone, so an erase is pending until its last chunk is done.
        chunks = [seqs[i : i + REDACTION_CHUNK] for i in range(0, len(seqs), REDACTION_CHUNK)]
        for n, chunk in enumerate(chunks, 1):
            tag = request if n == len(chunks) else f"{request}#{n}/{len(chunks)}"
            redaction = self._writer.redact(chunk, reason, tag)
            with self._lock:  # the writer appended it, not a command: mark the erase done
                redaction_done(self._state, redaction.payload)
        # Purge the projections' copies before the snapshots, under the snapshot lock, so no
        # snapshot taken meanwhile can hold what the erase removed.
        with self._snapshot_lock:
            self.search_index.purge()
            for hook in self.erase_hooks:
                hook()
            purge_snapshots(self.snapshot_dir)

    # ---- consistent reads ----------------------------------------------------------------------

    def read(self, fn: Callable[[MemoryState], T], *, session: tuple[str, str] | None = None) -> T:
        """`fn(state)` under the memory's lock: a consistent read of the live state. `fn` must
        not change the state, nor keep references into it that it reads later.

        The answer comes only once every record it may reflect is durable, so no read shows a
        record that a failed write then drops. `session=(tenant, id)` says `fn` reads that one
        session only: then only its own last record is waited for, not every record in flight
        (an HTTP answer's ETag after a write would otherwise wait for other sessions' group
        commits on the event loop)."""
        with self._lock:
            self._refuse_if_failed()
            result = fn(self._state)
            if session is None:
                seq = self._state.seq
            else:
                found = self._state.sessions.get(session)
                seq = found.last_seq if found is not None else -1
        if seq >= self._writer.size:  # still on its way to the disk
            self._writer.wait_for(seq)
        return result

    def require_session(self, tenant: str, session_id: str) -> None:
        """SessionNotFound unless the session exists."""
        self.read(
            lambda state: commands.get_session(state, tenant, session_id),
            session=(tenant, session_id),
        )

    def session_info(self, tenant: str, session_id: str) -> dict:
        return self.read(
            lambda state: reads.session_info(commands.get_session(state, tenant, session_id)),
            session=(tenant, session_id),
        )

    def session_version(self, tenant: str, session_id: str) -> int:
        return self.read(
            lambda state: commands.get_session(state, tenant, session_id).version,
            session=(tenant, session_id),
        )

    def session_sections(self, tenant: str, session_id: str) -> dict:
        """Each section's config with its tokens, item count and evictions."""
        return self.read(
            lambda state: reads.session_sections(state, tenant, session_id),
            session=(tenant, session_id),
        )

    def session_summary(self, tenant: str, session_id: str) -> dict | None:
        """The summary appended when the session last ended, or None. A read: traced."""
        found = self.run(command_specs.READ_SUMMARIES, tenant, session_id, (1, "agent"))
        return found[0] if found else None

    # ---- sessions ------------------------------------------------------------------------------

    def session(
        self,
        session_id: str | None = None,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict[str, dict] | None = None,
        create: bool = True,
        token_counter: str | None = None,
    ) -> Session:
        """Get a session, creating it (with `metadata`, per-section overrides and its token
        counter) if it is new. Without an id, a new session gets a generated one (`s.id`)."""
        tenant = tenant or self.tenant
        new = {"metadata": metadata, "sections": sections, "token_counter": token_counter}
        if session_id is None:
            record = self.create_session(tenant=tenant, **new)
            return Session(self, tenant, record.session)
        if create:
            self.get_or_create(session_id, tenant=tenant, **new)
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
            counter_named(token_counter, self._counters)  # an unknown name fails here
            config = replace(config, token_counter=token_counter)
        return config

    def counter_for(self, config: MemoryConfig) -> TokenCounter:
        """The counter a session created with `config` counts with."""
        name = config.token_counter
        return self.counter if name is None else counter_named(name, self._counters)

    def counter_of(self, session) -> TokenCounter:
        """The counter a session was created with (its `session.created` names it), so a log
        written with one counter goes on counting with it, whatever this memory's default."""
        return counter_named(session.counter["name"], self._counters)

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
        return self.run(
            command_specs.GET_OR_CREATE_SESSION,
            tenant or self.tenant,
            session_id,
            (config, metadata),
        )

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
            session_id = command_specs.session_id_for(idempotency_key)
        command_specs.check_not_reserved(session_id)
        return self.run(
            command_specs.CREATE_SESSION,
            tenant or self.tenant,
            session_id,
            (config, metadata),
            idempotency_key,
        )

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
        tenant = tenant or self.tenant
        metadata = {**(where or {}), **metadata}
        return self.read(
            lambda state: reads.list_sessions(state, tenant, metadata, since, until, offset, limit)
        )

    # ---- retention (sections/model/retention.py, docs/sections.md "Retention") -----------------------

    def _cleanup_args(self, max_age_seconds: object, tenant: str | None) -> tuple[str, tuple]:
        tenant = tenant or self.tenant
        check_identifier("tenant", tenant)
        return tenant, (retention.max_age_us(max_age_seconds), retention.MAX_AGE, False)

    def cleanup(self, max_age_seconds: float, *, tenant: str | None = None) -> list[str]:
        """Remove the tenant's sessions whose last activity (`active_ts`) is more than
        `max_age_seconds` old, each with a `session.deleted` record (reason `max_age`; erased
        from the files too with `retention_erase`); returns their ids, least recently active
        first. The reserved session `_tenant` is never removed."""
        tenant, args = self._cleanup_args(max_age_seconds, tenant)
        return [sid for _, sid in self.run(command_specs.CLEANUP, tenant, None, args)]

    async def cleanup_async(
        self, max_age_seconds: float, *, tenant: str | None = None
    ) -> list[str]:
        tenant, args = self._cleanup_args(max_age_seconds, tenant)
        removed = await self.run_async(command_specs.CLEANUP, tenant, None, args)
        return [sid for _, sid in removed]

    def expire_sessions(self, ttl_seconds: float) -> list[tuple[str, str]]:
        """The TTL the service applies (`session_ttl_seconds`): `cleanup` over every tenant,
        reason `ttl`; returns the (tenant, session id) removed."""
        args = (retention.max_age_us(ttl_seconds), retention.TTL, True)
        return self.run(command_specs.CLEANUP, self.tenant, None, args)

    async def expire_sessions_async(self, ttl_seconds: float) -> list[tuple[str, str]]:
        args = (retention.max_age_us(ttl_seconds), retention.TTL, True)
        return await self.run_async(command_specs.CLEANUP, self.tenant, None, args)

    def erase_retained(self) -> int:
        """Append the erase of every retention deletion with `erase` whose erase is not in the
        log yet, and redact (the commands that delete call this once their records are durable;
        open and heal, for what a crash interrupted). Returns how many were erased."""
        by_reason: dict[str, list[tuple[int, str, str]]] = {}
        for seq, (tenant, session_id, reason) in sorted(
            self.read(lambda state: list(state.pending_retention.items()))
        ):
            by_reason.setdefault(reason, []).append((seq, tenant, session_id))
        # One redaction per reason (a redaction record has one), of all its sessions at once.
        return sum(
            self.run(command_specs.ERASE_DELETED, self.tenant, None, (deletions,))
            for deletions in by_reason.values()
        )

    def stats(self, tenant: str | None = None, session: str | None = None) -> dict:
        found = self.read(lambda state: reads.stats(state, tenant or self.tenant, session))
        if found is None:
            raise NotFound(f"session {session!r} not found")
        return found

    # ---- search, observations, summaries -------------------------------------------------------

    def _search_args(
        self,
        query: str,
        *,
        tenant: str | None = None,
        sessions: list[str] | None = None,
        sections: list[str] | None = None,
        tags: list[str] | None = None,
        since: int | None = None,
        until: int | None = None,
        top_k: int = 10,
        reader: str = "agent",
        markers: tuple[str, str] = ("[", "]"),
        tenant_observations: bool = False,
    ) -> tuple[str, None, tuple]:
        q = command_specs.search_query(
            query, sessions, sections, tags, since, until, top_k, reader, markers,
            tenant_observations,
        )  # fmt: skip
        return tenant or self.tenant, None, (q, reader)

    def search(self, query: str, **options: object) -> list[SearchHit]:
        """BM25 search over the tenant's searchable sections, best first (ties by seq).

        Options: tenant, sessions, sections, tags (all of them), the item's time (`since` <= ts
        < `until`, microseconds), top_k, reader, markers; `tenant_observations=True` adds the
        tenant-wide observations to the `sessions` searched (a session's own search does). Hits are reads: each session with hits
        gets an `items.read` record (purpose "search"), and hits are returned once those are
        durable.
        """
        return self.run(command_specs.SEARCH, *self._search_args(query, **options))  # type: ignore[arg-type]

    async def search_async(self, query: str, **options: object) -> list[SearchHit]:
        return await self.run_async(command_specs.SEARCH, *self._search_args(query, **options))  # type: ignore[arg-type]

    def observe(
        self, type: str, title: str, content: str, *, tenant: str | None = None, **options: object
    ) -> observations.Outcome:
        """Record an observation: tenant-wide, or in `session=`'s own `observations` section.
        Options: tags, topic_key, session, source ({str: str} kept in its metadata: where it came
        from), from_session (the session a tenant-wide observation came from: kept in its
        `metadata.session`; that session must exist and not have ended). Deduplicated in one
        atomic command
        (sections/retrieval/observations.py): a revision of the same topic, a duplicate of recent
        identical content, or a new item."""
        args = command_specs.observation_args(type, title, content, **options)  # type: ignore[arg-type]
        return self.run(command_specs.OBSERVE, tenant or self.tenant, None, args)

    async def observe_async(
        self, type: str, title: str, content: str, *, tenant: str | None = None, **options: object
    ) -> observations.Outcome:
        args = command_specs.observation_args(type, title, content, **options)  # type: ignore[arg-type]
        return await self.run_async(command_specs.OBSERVE, tenant or self.tenant, None, args)

    def summaries(self, tenant: str | None = None, limit: int = 10) -> list[dict]:
        """The newest session summaries of a tenant, newest first. A read: traced."""
        return self.run(command_specs.READ_SUMMARIES, tenant or self.tenant, None, (limit, "agent"))

    # ---- facts: tenant-wide (sections/retrieval/facts.py, docs/facts.md) ---------------------------------

    # assert_fact, assert_facts, retract_fact, facts and their *_async twins: FactCommands

    def _fact_scope(self, kw: dict) -> tuple[Memory, str, None]:
        return self, kw.pop("tenant", None) or self.tenant, None

    def erase_facts(self, ids: list[str] | str, *, reason: str, tenant: str | None = None):
        """Erase facts for good (their statements, through items erasure of `_tenant`)."""
        holder = Session(self, tenant or self.tenant, TENANT_SESSION)
        return holder.erase(ids, reason=reason)

    def close(self) -> None:
        """Snapshot, then close the log (log.close and the final checkpoint)."""
        if self._writer.closed:
            return
        try:
            if self._since_snapshot and self.failure is None:
                self.snapshot()
        except OSError as exc:
            # A snapshot is a cache of the log: without it the next open replays a longer tail.
            # It must not stop the log from closing cleanly (log.close, the final checkpoint).
            log.warning("no snapshot at close (%s): the next open replays the log's tail", exc)
        finally:
            self._writer.close()
            self.search_index.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
