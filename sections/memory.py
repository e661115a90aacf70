"""The memory API: `Memory.open(dir)`, `mem.session(id)`, `s.add(...)`, `s.get(...)`, `s.context(...)`.

Every command runs the same way. Under one lock, and (almost always) without I/O: decide the
record from the current state (sections/commands.py), hand it to the log writer, which assigns its
seq at once, and apply what was logged to the state with the projection. Then, outside the lock, wait until the record is
durable before returning. The lock is held for microseconds, so many callers share each fsync,
and state is changed in exactly the order of the log. A read appends its `items.read` record the
same way and returns content only once that record is durable (fail closed).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from eventstore.errors import InvalidInput, WriterClosed
from eventstore.filters import RecordFilter
from eventstore.layout import DataDir
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.store import open_log
from eventstore.writer import DEFAULT_SEG_BITS, Durability, Entry, Pending

from . import commands, erasure, inject, observations, summaries
from .commands import Command
from .config import SESSION_SECTION, MemoryConfig, load_config
from .errors import IdempotencyConflict, ItemNotFound, NotFound, SessionNotFound
from .history import History
from .observations import TENANT_SESSION, Observation
from .projection import apply, redaction_done
from .search import MAX_TIME, Query, SearchIndex
from .snapshot import Snapshot, purge_snapshots, read_attachment, write_snapshot
from .state import Item, MemoryState, SessionState, item_id, parse_item_id
from .tokens import DEFAULT_COUNTER, TokenCounter

SNAPSHOT_EVERY = 100_000  # records between automatic snapshots
REDACTION_CHUNK = 50_000  # targets per redaction record (about 90 bytes each)
Decide = Callable[[MemoryState], Command | list[Command] | None]
SEARCH_ATTACHMENT = "search.db"  # the search index's database, beside each snapshot
log = logging.getLogger("ledgermem.memory")


@dataclass(frozen=True)
class ItemView:
    """An item as returned to callers: a copy, safe to keep."""

    id: str
    section: str
    content: object
    tokens: int
    kind: str | None
    role: str | None
    tags: tuple[str, ...]
    priority: float
    metadata: dict
    group: str | None
    seq: int
    h: str
    content_seq: int  # the record holding the current content
    record: Record | None = field(default=None, compare=False, repr=False)  # set on writes

    def to_json(self) -> dict:
        return {
            "id": self.id, "section": self.section, "content": self.content, "tokens": self.tokens,
            "kind": self.kind, "role": self.role, "tags": list(self.tags), "priority": self.priority,
            "metadata": self.metadata, "group": self.group, "seq": self.seq, "h": self.h,
        }  # fmt: skip


@dataclass(frozen=True)
class SearchHit:
    """A search result: the item, its session, its BM25 score (higher is better) and a snippet
    with the matched words between the markers."""

    session: str
    item: ItemView
    score: float
    snippet: str

    def to_json(self) -> dict:
        return {"session": self.session, "score": self.score, "snippet": self.snippet,
                "item": self.item.to_json()}  # fmt: skip


MAX_TOP_K = 1000


@dataclass(frozen=True)
class Extra:
    """What context assembly injects besides the sections (sections/inject.py)."""

    query: str | None = None
    observations: int = 0
    summaries: int = 0
    observation_chars: int = inject.OBSERVATION_CHARS

    @classmethod
    def of(cls, query: str | None = None, observations: int = 0, summaries: int = 0,
           observation_chars: int = inject.OBSERVATION_CHARS) -> Extra:  # fmt: skip
        if query is not None and not isinstance(query, str):
            raise InvalidInput("query must be a string")
        for name, value, top in (("observations", observations, MAX_TOP_K),
                                 ("summaries", summaries, MAX_TOP_K),
                                 ("observation_chars", observation_chars, 1 << 20)):  # fmt: skip
            if type(value) is not int or not 0 <= value <= top:
                raise InvalidInput(f"{name} must be an integer from 0 to {top}")
        if observation_chars < 1:
            raise InvalidInput("observation_chars must be at least 1")
        return cls(query, observations, summaries, observation_chars)


class Memory:
    """Sessions of typed, budgeted sections, kept as a projection of the signed log."""

    def __init__(self) -> None:
        raise TypeError("use Memory.open()")

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        config: MemoryConfig | str | Path | None = None,
        counter: TokenCounter = DEFAULT_COUNTER,
        tenant: str = "default",
        durability: Durability = Durability.FSYNC,
        seg_bits: int = DEFAULT_SEG_BITS,
        checkpoint_interval: float = 1.0,
        snapshot_every: int = SNAPSHOT_EVERY,
        dedup_window_us: int = observations.DEFAULT_WINDOW_US,
        clock: Callable[[], int] = time.time_ns,
    ) -> Memory:
        self = object.__new__(cls)
        self.data = DataDir(data_dir)
        self.config = (
            config
            if isinstance(config, MemoryConfig)
            else load_config(config)
            if config
            else MemoryConfig()
        )
        self.counter = counter
        self.tenant = tenant
        self.snapshot_every = snapshot_every
        if type(dedup_window_us) is not int or dedup_window_us < 0:
            raise InvalidInput("dedup_window_us must be a non-negative integer of microseconds")
        self.dedup_window_us = dedup_window_us
        self._lock = threading.Lock()
        self._decision_ts = 0  # the ts of the record being decided: valid under _lock
        self._snapshot_lock = threading.Lock()
        self._failed: BaseException | None = None
        self.erase_hooks: list[Callable[[], None]] = []  # other projections purge their copies
        self._writer, self.key = open_log(
            self.data.root,
            seg_bits=seg_bits,
            durability=durability,
            checkpoint_interval=checkpoint_interval,
            clock=clock,
        )
        try:
            self._reader = LogReader(self.data.log, index_dir=self.data.root / "index")
            self.history = History(self._reader, self.snapshot_dir)
            self._state, snapshot, touched = self.history.load(self._writer.size - 1)
            self.search_index = self._open_index(snapshot, touched)
            self._since_snapshot = 0
            self._finish_erasures()
            self._restart()
        except BaseException:
            self._writer.close()
            raise
        return self

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

    def _open_index(self, snapshot: Snapshot | None, touched: set) -> SearchIndex:
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
                index.resync(self._state, touched, self._content_of)
                self.search_index_source = "snapshot"
                return index
        index = SearchIndex()
        index.build(self._state, self._content_of)
        self.search_index_source = "built"
        return index

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
                self._redact(left, reason, f"{erase.type}@{erase_seq}")
            else:
                purge_snapshots(self.snapshot_dir)
                self._state.pending_erasures.pop(erase_seq, None)

    def _restart(self) -> None:
        """Append what a restart clears (process lifetime) or reverts (commit lifetime), and the
        summaries a crash kept from being appended after their session ended."""
        for command in commands.restart(self._state):
            self._commit(lambda _state, c=command: c)
        for session in summaries.unsummarized(self._state):
            self._summarize(session.tenant, session.id)

    def state_at(self, seq: int) -> MemoryState:
        """Time travel: the projection as it was right after record `seq`."""
        return self._load(seq)

    def context_at(self, seq: int) -> list[dict]:
        """The messages exactly as the `context.assembled` record at `seq` assembled them."""
        return self.history.context_at(seq)

    def state_hash(self) -> str:
        with self._lock:
            return self._state.state_hash()

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

    # ---- running commands ----------------------------------------------------------------------

    def _submit(self, decide: Decide, idem: tuple | None) -> Pending | int | None:
        """Decide, append and apply under the lock. A decision is one record, or several
        (appended together, consecutive seqs), or none.

        Returns the pending append; or, for a retried idempotency key, the seq of the record the
        first call made; or None when the command needs no record.
        """
        with self._lock:
            if self._failed is not None:
                raise WriterClosed(
                    f"memory stopped after a failed write ({self._failed}); reopen it to reload state from the log"
                )
            if idem is not None:
                tenant, session_id, key, type_ = idem
                session = self._state.sessions.get((tenant, session_id))
                if session is not None and key in session.idempotency:
                    seq, _, made = session.idempotency[key]
                    if made != type_:
                        raise IdempotencyConflict(
                            f"idempotency key {key!r} was used for a {made} (seq {seq}), not a {type_}: "
                            "use a new key for a different command"
                        )
                    return seq
            self._decision_ts = now = self._writer.now()
            decided = decide(self._state)
            if not decided:
                return None
            batch = decided if isinstance(decided, list) else [decided]
            entries = [Entry(c.tenant, c.session, c.section, c.type, c.payload) for c in batch]
            pending = self._writer.submit(entries, ts=now)
            try:
                for n, entry in enumerate(entries):
                    # Apply what was logged, parsed back from its JCS bytes, exactly as replay
                    # will see it: not the caller's object (key order, 1.0 vs 1, later mutation).
                    logged = replace(pending.records[n], payload=orjson.loads(entry.jcs))
                    pending.records[n] = logged
                    apply(self._state, logged, self.history.restate)
                    self.search_index.follow(self._state, logged, self._content_of)
            except BaseException as exc:  # the log has records the projections do not
                self._failed = exc
                raise WriterClosed(
                    f"memory stopped: applying a logged record failed ({exc!r})"
                ) from exc
            self._since_snapshot += len(entries)
            return pending

    def _commit(self, decide: Decide, idem: tuple | None = None) -> Record | None:
        outcome = self._submit(decide, idem)
        if outcome is None:
            return None
        if isinstance(outcome, int):
            return self._replayed(outcome)
        self._wait(outcome.wait)
        self._maybe_snapshot()
        return outcome.records[0]

    async def _commit_async(self, decide: Decide, idem: tuple | None = None) -> Record | None:
        outcome = self._submit(decide, idem)
        if outcome is None:
            return None
        if isinstance(outcome, int):
            return await asyncio.to_thread(self._replayed, outcome)
        try:
            await outcome.wait_async()
        except WriterClosed as exc:
            self._failed = exc  # the state holds a record the log will never have
            raise
        if self._since_snapshot >= self.snapshot_every:
            await asyncio.to_thread(self._maybe_snapshot)
        return outcome.records[0]

    def _wait(self, wait: Callable[[], object]) -> None:
        try:
            wait()
        except WriterClosed as exc:
            self._failed = exc  # the state holds a record the log will never have
            raise

    def _replayed(self, seq: int) -> Record:
        """An idempotent retry: the original record, once it is durable."""
        self._writer.wait_for(seq)
        record = self._reader.get(seq)
        if not record.has_payload:
            raise NotFound(f"the record this idempotency key made (seq {seq}) was erased")
        return record

    def _content_of(self, item: Item) -> object:
        """An item's content; one kept in the log is read once its record is durable (it may
        still be on its way when a command decides under the lock)."""
        if item.content is None:
            self._writer.wait_for(item.content_seq)
        return self.history.content_of(item)

    def _reader_get(self, seq: int) -> Record:
        self._writer.wait_for(seq)  # a record applied under the lock may still be on its way
        return self._reader.get(seq)

    def _redact(self, seqs: list[int], reason: str, request: str) -> None:
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

    def _maybe_snapshot(self) -> None:
        if self._since_snapshot >= self.snapshot_every:
            self.snapshot()

    def _view(self, section: str, item: Item) -> ItemView:
        return ItemView(
            item.id, section, item.content, item.tokens, item.kind, item.role, item.tags,
            item.priority, dict(item.metadata), item.group, item.seq, item.h, item.content_seq,
        )  # fmt: skip

    def _filled(self, views: list[ItemView]) -> list[ItemView]:
        return [
            view
            if view.content is not None
            else replace(view, content=self.history.logged_content(view.id, view.content_seq))
            for view in views
        ]

    # ---- sessions ------------------------------------------------------------------------------

    def session(
        self,
        session_id: str | None = None,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict[str, dict] | None = None,
        create: bool = True,
    ) -> Session:
        """Get a session, creating it (with `metadata` and per-section overrides) if it is new.
        Without an id, a new session gets a generated one (`s.id`)."""
        tenant = tenant or self.tenant
        if session_id is None:
            session_id = uuid.uuid4().hex
            self.create_session(session_id, tenant=tenant, metadata=metadata, sections=sections)
            return Session(self, tenant, session_id)
        if create:
            self.get_or_create(session_id, tenant=tenant, metadata=metadata, sections=sections)
        else:
            with self._lock:
                commands.get_session(self._state, tenant, session_id)
        return Session(self, tenant, session_id)

    def get_or_create(
        self,
        session_id: str,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict | None = None,
    ) -> tuple[Record | None, bool]:
        """Create the session unless it exists; returns (its creation record or None, created)."""
        tenant = tenant or self.tenant
        config = self.config.with_overrides(sections)

        def decide(state: MemoryState) -> Command | None:
            if (tenant, session_id) in state.sessions:
                return None
            _check_not_reserved(session_id)
            return commands.create_session(
                state, tenant, session_id, config, self.counter, metadata
            )

        record = self._commit(decide)
        return record, record is not None

    def create_session(
        self,
        session_id: str,
        *,
        tenant: str | None = None,
        metadata: dict | None = None,
        sections: dict | None = None,
    ) -> Record:
        """Create a session; SessionExists if it is there already."""
        tenant = tenant or self.tenant
        config = self.config.with_overrides(sections)
        _check_not_reserved(session_id)
        return self._commit(  # type: ignore[return-value]
            lambda state: commands.create_session(
                state, tenant, session_id, config, self.counter, metadata
            )
        )

    def list_sessions(
        self, tenant: str | None = None, where: dict | None = None, **metadata: object
    ) -> list[dict]:
        """Sessions of a tenant, filtered by equality on creation metadata (e.g. app=, user=)."""
        tenant = tenant or self.tenant
        metadata = {**(where or {}), **metadata}
        with self._lock:
            found = [
                _session_summary(s)
                for (t, _), s in sorted(self._state.sessions.items())
                if t == tenant and all(s.metadata.get(k) == v for k, v in metadata.items())
            ]
        return found

    def stats(self, tenant: str | None = None, session: str | None = None) -> dict:
        tenant = tenant or self.tenant
        with self._lock:
            sessions = [
                s
                for (t, sid), s in self._state.sessions.items()
                if t == tenant and session in (None, sid)
            ]
            if session is not None and not sessions:
                raise NotFound(f"session {session!r} not found")
            tokens: dict[str, int] = {}
            evictions: dict[str, int] = {}
            items = 0
            for s in sessions:
                for name, section in s.sections.items():
                    tokens[name] = tokens.get(name, 0) + section.tokens
                    evictions[name] = evictions.get(name, 0) + section.evictions
                    items += len(section.items)
        return {"sessions": len(sessions), "items": items, "tokens": tokens, "evictions": evictions}

    # ---- search, observations, summaries -------------------------------------------------------

    def search(
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
    ) -> list[SearchHit]:
        """BM25 search over the tenant's searchable sections, best first (ties by seq).

        Filters: sessions, sections, tags (all of them), and the item's time (`since` <= ts <
        `until`, microseconds). Hits are reads: each session with hits gets an `items.read`
        record (purpose "search"), and hits are returned once those are durable.
        """
        tenant = tenant or self.tenant
        q = _query(query, sessions, sections, tags, since, until, top_k, reader, markers)
        if self._writer.closed:
            raise WriterClosed("the memory is closed")
        # The index has its own lock: a query never holds up writers. Hits whose item left
        # meanwhile are dropped under the memory's lock, where the read record is decided.
        hits = self.search_index.search(tenant, q)
        found: list[SearchHit] = []
        seen = [-1]

        def decide(state: MemoryState) -> list[Command]:
            found.clear()
            seen[0] = state.seq
            reads: dict[str, dict[str, list[str]]] = {}
            for hit in hits:
                session = state.sessions.get((tenant, hit.session))
                section = session.sections.get(hit.section) if session is not None else None
                item = section.items.get(hit.id) if section is not None else None
                if item is None or (item.content_seq, item.tags) != (hit.content_seq, hit.tags):
                    continue  # left or changed since the index was queried
                found.append(
                    SearchHit(hit.session, self._view(hit.section, item), hit.score, hit.snippet)
                )
                reads.setdefault(hit.session, {}).setdefault(hit.section, []).append(item.id)
            made = [
                commands.read_items(state.sessions[(tenant, sid)], by_section, reader, "search")
                for sid, by_section in reads.items()
            ]
            return [c for c in made if c is not None]

        if self._commit(decide) is None:
            self._writer.wait_for(seen[0])  # show only durable state
        views = self._filled([hit.item for hit in found])
        return [replace(hit, item=view) for hit, view in zip(found, views, strict=True)]

    async def search_async(self, query: str, **options: object) -> list[SearchHit]:
        return await asyncio.to_thread(self.search, query, **options)  # type: ignore[arg-type]

    def observe(
        self,
        type: str,
        title: str,
        content: str,
        *,
        tags: list[str] | tuple[str, ...] = (),
        topic_key: str | None = None,
        tenant: str | None = None,
        session: str | None = None,
    ) -> observations.Outcome:
        """Record an observation: tenant-wide, or in `session`'s own `observations` section.
        Deduplicated in one atomic command (sections/observations.py): a revision of the same
        topic, a duplicate of recent identical content, or a new item."""
        tenant = tenant or self.tenant
        obs = Observation.of(type, title, content, tags, topic_key)
        session_id = TENANT_SESSION if session is None else session
        if session is None:
            self._tenant_session(tenant)
        touched: list[Item | None] = []
        tier: list[str] = []

        def decide(state: MemoryState) -> Command:
            target = commands.get_session(state, tenant, session_id)
            command, chose, item = observations.decide(
                target, obs, self._decision_ts, self.dedup_window_us, self.counter,
                self._content_of,
            )  # fmt: skip
            touched[:], tier[:] = [item], [chose]
            return command

        record = self._commit(decide)
        payload = record.payload  # type: ignore[union-attr]
        item = touched[0]
        if item is None:
            id_, meta = item_id(record.seq, 0), payload["items"][0]["metadata"]  # type: ignore[union-attr]
        else:
            id_, meta = item.id, payload["set"]["metadata"]
        return observations.Outcome(id_, session_id, tier[0], meta["revision"], meta["duplicates"])

    async def observe_async(self, type: str, title: str, content: str, **options: object):
        return await asyncio.to_thread(self.observe, type, title, content, **options)  # type: ignore[arg-type]

    def _tenant_session(self, tenant: str) -> None:
        """Create the session that holds the tenant's observations, once."""

        def decide(state: MemoryState) -> Command | None:
            if (tenant, TENANT_SESSION) in state.sessions:
                return None
            metadata = {"reserved": "tenant-wide observations"}
            return commands.create_session(
                state, tenant, TENANT_SESSION, self.config, self.counter, metadata
            )

        self._commit(decide)

    def _summarize(self, tenant: str, session_id: str) -> Record | None:
        """Append the summary of a session that has just ended (sections/summaries.py)."""

        def decide(state: MemoryState) -> Command | None:
            session = state.sessions.get((tenant, session_id))
            if session is None or session.ended_seq is None:
                return None
            return summaries.summarize(session, lambda id_: self._message(session, id_))

        return self._commit(decide)

    def _message(self, session: SessionState, id_: str) -> object:
        """A message's content: live, or from the record that added it (None if erased)."""
        section = session.sections.get("messages")
        item = section.items.get(id_) if section is not None else None
        if item is not None:
            return self._content_of(item)
        seq = parse_item_id(id_)[0]
        self._writer.wait_for(seq)
        return self.history.logged_content(id_, seq)

    def summaries(self, tenant: str | None = None, limit: int = 10) -> list[dict]:
        """The newest session summaries of a tenant, newest first."""
        tenant = tenant or self.tenant
        with self._lock:
            recent = summaries.recent(self._state, tenant, TENANT_SESSION, limit)
            return [
                {"session": s.id, "seq": s.summary_at[0], **s.summary}  # type: ignore[index]
                for s in recent
            ]

    def close(self) -> None:
        """Snapshot, then close the log (log.close and the final checkpoint)."""
        if self._writer.closed:
            return
        try:
            if self._since_snapshot:
                self.snapshot()
        finally:
            self._writer.close()
            self.search_index.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_not_reserved(session_id: str) -> None:
    if session_id == TENANT_SESSION:
        raise InvalidInput(
            f"session id {TENANT_SESSION!r} is reserved for tenant-wide observations: observe() "
            "writes there"
        )


def _query(
    text: object, sessions, sections, tags, since, until, top_k, reader, markers
) -> Query:  # fmt: skip
    """A search's arguments, checked: bad ones raise InvalidInput naming the argument."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("give a search query: a non-empty string")
    for name, value in (("sessions", sessions), ("sections", sections), ("tags", tags)):
        if value is not None and (
            isinstance(value, str) or not all(isinstance(v, str) for v in value)
        ):
            raise InvalidInput(f"{name} must be a list of strings")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (type(value) is not int or abs(value) > MAX_TIME):
            raise InvalidInput(
                f"{name} must be an integer of microseconds since the epoch, within ±2**62"
            )
    if type(top_k) is not int or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}")
    if reader not in commands.READERS:
        raise InvalidInput(f"reader must be one of {', '.join(commands.READERS)}")
    if len(markers) != 2 or not all(isinstance(m, str) for m in markers):
        raise InvalidInput("markers must be two strings: before and after each matched word")
    return Query(
        text,
        tuple(sessions) if sessions is not None else None,
        tuple(sections) if sections is not None else None,
        tuple(tags or ()),
        since,
        until,
        top_k,
        (markers[0], markers[1]),
    )


def _session_summary(session: SessionState) -> dict:
    return {
        "tenant": session.tenant,
        "session": session.id,
        "metadata": session.metadata,
        "created_seq": session.created_seq,
        "version": session.version,
        "turn": session.turn,
        "ended": session.ended_seq is not None,
        "items": sum(len(s.items) for s in session.sections.values()),
    }


class Session:
    """One session's commands. Every write returns once its record is durable."""

    def __init__(self, memory: Memory, tenant: str, session_id: str) -> None:
        self.memory = memory
        self.tenant = tenant
        self.id = session_id

    def _state(self) -> SessionState:
        return commands.get_session(self.memory._state, self.tenant, self.id)

    def _idem(self, key: str | None, type_: str) -> tuple | None:
        return None if key is None else (self.tenant, self.id, key, type_)

    @property
    def version(self) -> int:
        with self.memory._lock:
            return self._state().version

    def info(self) -> dict:
        with self.memory._lock:
            return _session_summary(self._state())

    # -- writes

    def _add_command(
        self, section: str, items: list[dict], idem: str | None, expected_version: int | None
    ):
        def decide(state: MemoryState) -> Command:
            session = commands.get_session(state, self.tenant, self.id)
            return commands.add_items(
                session, section, items, self.memory.counter, idem, expected_version
            )

        return decide

    def _added(self, record: Record) -> list[ItemView]:
        payload = record.payload
        return [
            ItemView(
                item_id(record.seq, k),
                record.section,
                data.get("content"),
                data["tokens"],
                data.get("kind"),
                data.get("role"),
                tuple(data.get("tags", ())),
                data.get("priority", 0),
                data.get("metadata", {}),
                data.get("group"),
                record.seq,
                record.h,
                record.seq,
                record,
            )
            for k, data in enumerate(payload["items"])
        ]

    def add(
        self, section: str, content: object, *, idempotency_key: str | None = None,
        expected_version: int | None = None, **fields: object,
    ) -> ItemView:  # fmt: skip
        """Add one item (fields: kind, role, tags, priority, metadata, group, name, tool_calls, tool_call_id)."""
        return self.add_many(section, [{"content": content, **fields}], idempotency_key=idempotency_key,
                             expected_version=expected_version)[0]  # fmt: skip

    def add_many(
        self,
        section: str,
        items: list[dict],
        *,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> list[ItemView]:
        """Add items atomically: one record."""
        decide = self._add_command(section, items, idempotency_key, expected_version)
        return self._added(self.memory._commit(decide, self._idem(idempotency_key, "item.added")))  # type: ignore[arg-type]

    async def add_async(
        self, section: str, content: object, *, idempotency_key: str | None = None,
        expected_version: int | None = None, **fields: object,
    ) -> ItemView:  # fmt: skip
        items = [{"content": content, **fields}]
        return (await self.add_many_async(section, items, idempotency_key=idempotency_key,
                                          expected_version=expected_version))[0]  # fmt: skip

    async def add_many_async(
        self,
        section: str,
        items: list[dict],
        *,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> list[ItemView]:
        decide = self._add_command(section, items, idempotency_key, expected_version)
        record = await self.memory._commit_async(decide, self._idem(idempotency_key, "item.added"))
        return self._added(record)  # type: ignore[arg-type]

    def _simple(
        self, fn: Callable[..., Command], *args: object, idem: str | None = None, **kwargs: object
    ):
        def decide(state: MemoryState) -> Command:
            return fn(commands.get_session(state, self.tenant, self.id), *args, **kwargs)

        return decide

    def update(
        self, section: str, item: str, *, idempotency_key: str | None = None,
        expected_version: int | None = None, **changes: object,
    ) -> Record:  # fmt: skip
        decide = self._simple(commands.update_item, section, item, changes, self.memory.counter,
                              idempotency_key, expected_version)  # fmt: skip
        return self.memory._commit(decide, self._idem(idempotency_key, "item.updated"))  # type: ignore[return-value]

    def remove(
        self, section: str, items: list[str] | str, *, idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> Record:  # fmt: skip
        ids = [items] if isinstance(items, str) else list(items)
        decide = self._simple(
            commands.remove_items, section, ids, idempotency_key, expected_version
        )
        return self.memory._commit(decide, self._idem(idempotency_key, "item.removed"))  # type: ignore[return-value]

    def end_turn(
        self, *, idempotency_key: str | None = None, expected_version: int | None = None
    ) -> Record:
        decide = self._simple(commands.end_turn, idempotency_key, expected_version)
        return self.memory._commit(decide, self._idem(idempotency_key, "turn.ended"))  # type: ignore[return-value]

    async def end_turn_async(
        self, *, idempotency_key: str | None = None, expected_version: int | None = None
    ):
        decide = self._simple(commands.end_turn, idempotency_key, expected_version)
        return await self.memory._commit_async(decide, self._idem(idempotency_key, "turn.ended"))

    def commit(self, section: str | None = None, *, idempotency_key: str | None = None,
               expected_version: int | None = None) -> Record:  # fmt: skip
        decide = self._simple(commands.commit, section, idempotency_key, expected_version)
        return self.memory._commit(decide, self._idem(idempotency_key, "section.committed"))  # type: ignore[return-value]

    def configure(
        self, section: str, *, idempotency_key: str | None = None, expected_version: int | None = None,
        **settings: object,
    ) -> Record:  # fmt: skip
        """Change a section's budget, policy, lifetime or flags for this session (or add one)."""
        decide = self._simple(
            commands.configure_section, section, settings, idempotency_key, expected_version
        )
        return self.memory._commit(decide, self._idem(idempotency_key, "section.configured"))  # type: ignore[return-value]

    async def update_async(self, section: str, item: str, *, idempotency_key: str | None = None,
                           expected_version: int | None = None, **changes: object) -> Record:  # fmt: skip
        decide = self._simple(commands.update_item, section, item, changes, self.memory.counter,
                              idempotency_key, expected_version)  # fmt: skip
        return await self.memory._commit_async(
            decide, self._idem(idempotency_key, "section.configured")
        )  # type: ignore[return-value]

    async def remove_async(self, section: str, items: list[str] | str, *, idempotency_key: str | None = None,
                           expected_version: int | None = None) -> Record:  # fmt: skip
        ids = [items] if isinstance(items, str) else list(items)
        decide = self._simple(
            commands.remove_items, section, ids, idempotency_key, expected_version
        )
        return await self.memory._commit_async(decide, self._idem(idempotency_key, "item.removed"))  # type: ignore[return-value]

    async def commit_async(self, section: str | None = None, *, idempotency_key: str | None = None,
                           expected_version: int | None = None) -> Record:  # fmt: skip
        decide = self._simple(commands.commit, section, idempotency_key, expected_version)
        return await self.memory._commit_async(
            decide, self._idem(idempotency_key, "section.committed")
        )  # type: ignore[return-value]

    async def end_async(
        self, *, idempotency_key: str | None = None, expected_version: int | None = None
    ) -> Record:
        return await asyncio.to_thread(
            self.end, idempotency_key=idempotency_key, expected_version=expected_version
        )

    async def delete_async(
        self, *, idempotency_key: str | None = None, expected_version: int | None = None
    ) -> Record:
        decide = self._simple(commands.delete_session, idempotency_key, expected_version)
        return await self.memory._commit_async(
            decide, self._idem(idempotency_key, "session.deleted")
        )  # type: ignore[return-value]

    async def erase_async(self, ids: list[str] | str, *, reason: str) -> list[str]:
        return await asyncio.to_thread(self.erase, ids, reason=reason)

    async def erase_all_async(self, *, reason: str) -> Record:
        return await asyncio.to_thread(self.erase_all, reason=reason)

    def end(
        self, *, idempotency_key: str | None = None, expected_version: int | None = None
    ) -> Record:
        """End the session, then append its summary (`session.summarized`)."""
        decide = self._simple(commands.end_session, idempotency_key, expected_version)
        record = self.memory._commit(decide, self._idem(idempotency_key, "session.ended"))
        with self.memory._lock:
            summarized = self._state().summary_at
        if summarized is None or summarized[0] < record.seq:  # type: ignore[union-attr]
            self.memory._summarize(self.tenant, self.id)
        return record  # type: ignore[return-value]

    def summary(self) -> dict | None:
        """The summary appended when the session last ended, or None."""
        with self.memory._lock:
            session = self._state()
            if session.summary_at is None:
                return None
            return {"session": self.id, "seq": session.summary_at[0], **session.summary}  # type: ignore[dict-item]

    def search(self, query: str, **options: object) -> list[SearchHit]:
        """Search this session's searchable sections (see `Memory.search`)."""
        return self.memory.search(query, tenant=self.tenant, sessions=[self.id], **options)  # type: ignore[arg-type]

    async def search_async(self, query: str, **options: object) -> list[SearchHit]:
        return await asyncio.to_thread(self.search, query, **options)

    def observe(self, type: str, title: str, content: str, *, scope: str = "session",
                **options: object) -> observations.Outcome:  # fmt: skip
        """Record an observation in this session (scope "session") or for the whole tenant."""
        if scope not in observations.SCOPES:
            raise InvalidInput(f"scope must be one of {', '.join(observations.SCOPES)}")
        session = self.id if scope == "session" else None
        return self.memory.observe(
            type, title, content, tenant=self.tenant, session=session, **options
        )  # type: ignore[arg-type]

    async def observe_async(self, type: str, title: str, content: str, **options: object):
        return await asyncio.to_thread(self.observe, type, title, content, **options)  # type: ignore[arg-type]

    def delete(
        self, *, idempotency_key: str | None = None, expected_version: int | None = None
    ) -> Record:
        decide = self._simple(commands.delete_session, idempotency_key, expected_version)
        return self.memory._commit(decide, self._idem(idempotency_key, "session.deleted"))  # type: ignore[return-value]

    # -- reads

    def _read(self, section: str | None, ids: list[str] | None, reader: str):
        views: list[ItemView] = []

        def decide(state: MemoryState) -> Command | None:
            session = commands.get_session(state, self.tenant, self.id)
            reads: dict[str, list[str]] = {}
            if ids is None:  # whole sections
                for name in [section] if section is not None else list(session.sections):
                    items = list(commands.get_section(session, name).items.values())
                    views.extend(self.memory._view(name, item) for item in items)
                    reads[name] = [item.id for item in items]
            else:  # these ids, in this section or wherever they are
                for id_ in ids:
                    name = section if section is not None else commands.section_of(session, id_)
                    item = commands.get_item(commands.get_section(session, name), id_)
                    views.append(self.memory._view(name, item))
                    reads.setdefault(name, []).append(item.id)
            return commands.read_items(session, reads, reader, "get")

        return decide, views

    def get(
        self, section: str | None = None, ids: list[str] | None = None, *, reader: str = "agent"
    ) -> list[ItemView]:
        """Items of a section (or of every section), oldest first. Leaves an `items.read` record."""
        decide, views = self._read(section, ids, reader)
        if self.memory._commit(decide) is None:
            self.memory._writer.wait_for(self.version)  # show only durable state
        return self.memory._filled(views)

    async def get_async(
        self, section: str | None = None, ids: list[str] | None = None, *, reader: str = "agent"
    ) -> list[ItemView]:
        decide, views = self._read(section, ids, reader)
        if await self.memory._commit_async(decide) is None:
            await asyncio.to_thread(self.memory._writer.wait_for, self.version)
        return await asyncio.to_thread(self.memory._filled, views)

    def _assemble(self, budget: int, sections: list[str] | None, reader: str, messages: list[dict],
                  extra: Extra) -> Decide:  # fmt: skip
        if type(budget) is not int or budget <= 0:
            raise InvalidInput("the context budget must be a positive number of tokens")
        memory = self.memory
        hits = []
        if extra.query and extra.observations:  # ranked outside the memory's lock
            query = Query(
                extra.query[: inject.QUERY_CHARS],
                sessions=(self.id, TENANT_SESSION),
                sections=(observations.SECTION,),
                top_k=extra.observations,
            )
            hits = [(h.session, h.id) for h in memory.search_index.search(self.tenant, query)]

        def decide(state: MemoryState) -> Command:
            session = commands.get_session(state, self.tenant, self.id)
            injection = None
            if extra.observations or extra.summaries:
                pool = inject.observation_pool(state, self.tenant, self.id)
                chosen = inject.choose_observations(pool, hits, extra.observations)
                recent = summaries.recent(state, self.tenant, self.id, extra.summaries)
                settings = {"observations": extra.observations, "summaries": extra.summaries,
                            "observation_chars": extra.observation_chars}  # fmt: skip
                injection = inject.build(
                    chosen, recent, extra.observation_chars, memory._content_of,
                    memory.counter, budget, settings,
                )  # fmt: skip
            command, rendered = commands.assemble_context(
                session, sections, budget, memory._content_of, reader, injection
            )
            messages.extend(rendered)
            return command

        return decide

    def assemble(
        self, budget: int = 8000, sections: list[str] | None = None, *, reader: str = "agent",
        **extra: object,
    ) -> tuple[Record, list[dict]]:  # fmt: skip
        """The context messages and the `context.assembled` record that traces them.
        `query=`, `observations=N`, `summaries=M`, `observation_chars=C`: see sections/inject.py."""
        messages: list[dict] = []
        decide = self._assemble(budget, sections, reader, messages, Extra.of(**extra))
        record = self.memory._commit(decide)
        return record, messages  # type: ignore[return-value]

    async def assemble_async(
        self, budget: int = 8000, sections: list[str] | None = None, *, reader: str = "agent",
        **extra: object,
    ) -> tuple[Record, list[dict]]:  # fmt: skip
        messages: list[dict] = []
        decide = self._assemble(budget, sections, reader, messages, Extra.of(**extra))
        record = await self.memory._commit_async(decide)
        return record, messages  # type: ignore[return-value]

    def context(
        self, budget: int = 8000, sections: list[str] | None = None, *, reader: str = "agent",
        **extra: object,
    ) -> list[dict]:  # fmt: skip
        """OpenAI-style messages within `budget` tokens; records a `context.assembled` manifest."""
        return self.assemble(budget, sections, reader=reader, **extra)[1]

    async def context_async(
        self, budget: int = 8000, sections: list[str] | None = None, *, reader: str = "agent",
        **extra: object,
    ) -> list[dict]:  # fmt: skip
        return (await self.assemble_async(budget, sections, reader=reader, **extra))[1]

    def stats(self) -> dict:
        return self.memory.stats(self.tenant, self.id)

    # -- erasure

    def erase(self, ids: list[str] | str, *, reason: str) -> list[str]:
        """Erase items (see `erase_items`); returns every erased id."""
        return self.erase_items(ids, reason=reason)[1]

    def erase_items(self, ids: list[str] | str, *, reason: str) -> tuple[Record, list[str]]:
        """Erase items for good: remove them, redact every payload holding their content, tags or
        metadata, purge snapshots. Items no longer live (evicted, removed) can be erased too.
        Items added in the same batch record go as well; returns every erased id."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        if not ids:
            raise InvalidInput("give at least one item id to erase")
        try:
            oldest = min(parse_item_id(i)[0] for i in ids)
        except (ValueError, TypeError):
            raise ItemNotFound(f"session {self.id!r} has no item among {ids!r}") from None
        memory = self.memory
        with memory._lock:
            head = commands.get_session(memory._state, self.tenant, self.id).last_seq
        # The walk down the session's back-links reads the files: done outside the lock.
        chain = erasure.session_chain(
            head, memory._reader_get, memory.history.payload_of, oldest - 1
        )
        erased: list[str] = []

        def decide(state: MemoryState) -> Command:
            session = commands.get_session(state, self.tenant, self.id)
            full = chain
            if session.last_seq != head:  # records that landed meanwhile: only those
                newer = erasure.session_chain(
                    session.last_seq, memory._reader_get, memory.history.payload_of, head
                )
                full = newer + chain
            by_seq = {r.seq: (r, p) for r, p in full}
            for id_ in ids:
                seq, k = parse_item_id(id_)
                if seq not in by_seq or k >= len(erasure.added_items(*by_seq[seq])):
                    raise ItemNotFound(f"session {self.id!r} never had an item {id_!r}")
            seqs, all_ids = erasure.records_holding(session, set(ids), full)
            items: dict[str, list[str]] = {}
            for name, section in session.sections.items():
                chosen = [i for i in section.items if i in all_ids]
                if chosen:
                    items[name] = chosen
            erased.extend(sorted(all_ids, key=parse_item_id))
            payload = commands.base_payload(session, None)
            restated = {}
            for seq in sorted(seqs):
                record, _ = by_seq[seq]
                if record.has_payload:
                    keep = record.type == "session.created"
                    restated[str(seq)] = erasure.restate(record.payload, keep_session_metadata=keep)
            payload.update({"reason": reason, "items": items, "restate": restated})
            return Command(self.tenant, self.id, SESSION_SECTION, "items.erased", payload)

        record = memory._commit(decide)
        seqs = [int(s) for s in record.payload["restate"]]  # type: ignore[union-attr]
        memory._redact(seqs, reason, f"items.erased@{record.seq}")  # type: ignore[union-attr]
        return record, erased  # type: ignore[return-value]

    def erase_all(self, *, reason: str) -> Record:
        """Erase the whole session, deleted or not: every record this (tenant, session id) ever
        wrote, in every incarnation, has its payload redacted; then the session leaves state."""
        memory = self.memory
        where = RecordFilter.of(tenant=self.tenant, session=self.id)
        found = [r for r in memory._reader.records(where=where)]  # a scan of the files, unlocked
        if not found:
            raise SessionNotFound(f"session {self.id!r} not found")
        scanned_to = memory.writer.size - 1
        seqs = [r.seq for r in found if r.has_payload]

        def decide(state: MemoryState) -> Command:
            session = state.sessions.get((self.tenant, self.id))
            last = found[-1].seq
            if session is not None and session.last_seq > scanned_to:  # landed meanwhile
                newer = erasure.session_chain(
                    session.last_seq, memory._reader_get, memory.history.payload_of, scanned_to
                )
                seqs.extend(r.seq for r, _ in reversed(newer) if r.has_payload)
                last = session.last_seq
            payload = {
                "prev_seq": session.last_seq if session is not None else last,
                "reason": reason,
                "records": seqs,
            }
            return Command(self.tenant, self.id, SESSION_SECTION, "session.erased", payload)

        record = memory._commit(decide)
        memory._redact(seqs, reason, f"session.erased@{record.seq}")  # type: ignore[union-attr]
        return record  # type: ignore[return-value]
