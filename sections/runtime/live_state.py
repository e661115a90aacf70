"""One log and the projections kept live from it: the memory's state and its search index.

`LiveState` holds the log's writer and reader, the state folded from the files (loaded from the
newest snapshot and the tail, sections/runtime/history.py), the search index that follows it,
and the lock both change under. Records reach it already appended: the engine
(sections/runtime/engine.py) submits a group of entries and has them applied here in log order,
exactly as replay applies them. It answers consistent reads, writes snapshots, rebuilds itself
from the log after a failed write (`heal`), and carries out the redactions of an erase.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import orjson

from eventstore.errors import WriterClosed
from eventstore.filters import RecordFilter
from eventstore.reader import LogReader
from eventstore.record import Record
from eventstore.writer import Entry, LogWriter, Pending
from sections.errors import ConfigError
from sections.model.commands import payload
from sections.model.item import Item, item_id
from sections.model.projection import apply, redaction_done
from sections.model.state import MemoryState
from sections.retrieval.documents import K_BITS, changes_of
from sections.retrieval.search import Hit, Query
from sections.retrieval.semantic import SemanticIndex, load_embedder
from sections.retrieval.views import ItemView
from sections.runtime.history import History
from sections.runtime.snapshot import (
    SEARCH_ATTACHMENT,
    Snapshot,
    open_search_index,
    purge_snapshots,
    write_snapshot,
)

REDACTION_CHUNK = 50_000  # targets per redaction record (about 90 bytes each)
T = TypeVar("T")
log = logging.getLogger("ledgermem.memory")


class LiveState:
    """A log's state and search index, kept equal to the log record by record."""

    def __init__(
        self, writer: LogWriter, log_dir: Path, root: Path, snapshot_every: int,
        semantic: bool = False,
    ) -> None:  # fmt: skip
        """Load the state of `writer`'s log, read from `log_dir`; `root` keeps the caches
        (snapshots/, index/). With `semantic`, an embedding index follows the state too
        (sections/retrieval/semantic.py; ConfigError without the install extra)."""
        self.writer = writer
        self.reader = LogReader(log_dir, index_dir=root / "index")
        self.snapshot_dir = root / "snapshots"
        self.snapshot_every = snapshot_every
        self.history = History(self.reader, self.snapshot_dir)
        # Other projections purge their copies of erased content (checkpoints may quote it).
        self.erase_hooks: list[Callable[[], None]] = [self.history.checkpoints.forget]
        self.lock = threading.Lock()  # the state and the index change under it, in log order
        self._snapshot_lock = threading.Lock()
        self._heal_lock = threading.Lock()
        self.failed: BaseException | None = None  # set when the state outran the log
        self.since_snapshot = 0  # records applied since the last snapshot
        self.state, snapshot, touched = self.history.load(writer.size - 1)
        self.search_index, self.search_index_source = open_search_index(
            self.snapshot_dir, snapshot, self.state, touched, self.content_of
        )
        self.semantic: SemanticIndex | None = None
        if semantic:
            self.semantic = self._semantic_index()

    def _semantic_index(self) -> SemanticIndex:
        """An embedding index of the state, its vectors computed in its own thread."""
        embedder = load_embedder()
        if embedder is None:
            self.search_index.close()
            raise ConfigError(
                "recall semantic = true needs the semantic extra: pip install 'ledgermem[semantic]'"
            )
        index = SemanticIndex(embedder)
        index.build(self.state, self.content_of)
        return index

    # ---- applying what was appended --------------------------------------------------------------

    def submit(self, entries: Sequence[Entry], ts: int) -> Pending:
        """Hand entries to the writer, which assigns their seqs at once (under the lock)."""
        return self.writer.submit(entries, ts=ts)

    def apply(self, records: list[Record], entries: Sequence[Entry]) -> None:
        """Apply a submitted group's records in log order (under the lock), each as parsed back
        from its JCS bytes, exactly as replay will see it: not the caller's object (key order,
        1.0 vs 1, later mutation). `records` end up as logged. A failure stops the memory: the
        log then has records the projections do not, until `heal`."""
        try:
            for n, entry in enumerate(entries):
                logged = _logged(records[n], orjson.loads(entry.jcs))
                records[n] = logged
                apply(self.state, logged, self.history.restate)
                changes = changes_of(self.state, logged, self.content_of)
                self.search_index.follow_changes(changes)
                if self.semantic is not None:
                    self.semantic.follow_changes(changes)
        except BaseException as exc:
            self.failed = exc
            error = WriterClosed(f"memory stopped: applying a logged record failed ({exc!r})")
            error.__cause__ = exc
            raise error from exc
        self.since_snapshot += len(entries)

    @property
    def failure(self) -> BaseException | None:
        """Why commands and reads are refused, or None. A failed write leaves records in the live
        state that the log will never have, so nothing answers from that state until `heal()`
        has rebuilt it from the log."""
        return self.failed or self.writer.failure

    def refuse_if_failed(self) -> None:
        """Under the lock: raise WriterClosed, naming the storage's error, while failed."""
        failure = self.failure
        if failure is None:
            return
        if self.failed is None:
            self.failed = failure  # in-flight records may be in the state: heal() rebuilds it
        error = WriterClosed(
            f"memory stopped after a failed write ({failure}); it reloads its state from the "
            "log once the log is reopened (heal)"
        )
        error.cause = failure.cause if isinstance(failure, WriterClosed) else failure
        raise error

    # ---- reads -----------------------------------------------------------------------------------

    def read(self, fn: Callable[[MemoryState], T], *, session: tuple[str, str] | None = None) -> T:
        """`fn(state)` under the lock, answered once what it may reflect is durable
        (`Memory.read`)."""
        with self.lock:
            self.refuse_if_failed()
            result = fn(self.state)
            if session is None:
                seq = self.state.seq
            else:
                found = self.state.sessions.get(session)
                seq = found.last_seq if found is not None else -1
        if seq >= self.writer.size:  # still on its way to the disk
            self.writer.wait_for(seq)
        return result

    def content_of(self, item: Item) -> object:
        """An item's content; one kept in the log is read once its record is durable (it may
        still be on its way when a command decides under the lock)."""
        if item.content is None:
            self.writer.wait_for(item.content_seq)
        return self.history.content_of(item)

    def record_at(self, seq: int) -> Record:
        """The record at `seq`, once durable (one applied under the lock may be on its way)."""
        self.writer.wait_for(seq)
        return self.reader.get(seq)

    def fill(self, views: list[ItemView]) -> list[ItemView]:
        """The views with every content kept in the log read back from it."""
        return [
            view
            if view.content is not None
            else replace(view, content=self.history.logged_content(view.id, view.content_seq))
            for view in views
        ]

    def search(self, tenant: str, query: Query) -> list[Hit]:
        """The index's hits (its own lock: a query never holds up writers)."""
        if self.writer.closed:
            raise WriterClosed("the memory is closed")
        return self.search_index.search(tenant, query)

    def similar(
        self, tenant: str, text: str, sessions: tuple[str, ...] | None, top_k: int
    ) -> list[tuple[str, str, str, float]]:
        """The semantic index's nearest items, (session, section, id, cosine), best first;
        none without the index."""
        if self.writer.closed:
            raise WriterClosed("the memory is closed")
        if self.semantic is None:
            return []
        return [
            (session, section, item_id(row >> K_BITS, row & ((1 << K_BITS) - 1)), score)
            for row, session, section, score in self.semantic.search(tenant, text, sessions, top_k)
        ]

    def session_records(self, tenant: str, session: str) -> tuple[list[Record], int]:
        """Every record of (tenant, session), from a scan of the files, unlocked; the last seq
        the scan covered."""
        where = RecordFilter.of(tenant=tenant, session=session)
        found = list(self.reader.records(where=where))
        return found, self.writer.size - 1

    def rebuild(self, upto: int | None = None, use_snapshots: bool = False) -> MemoryState:
        """The projection rebuilt from the files alone (from zero unless `use_snapshots`)."""
        with self.lock:
            # Records the writer appends by itself (redactions) are not applied live: go to the head.
            seq = max(self.state.seq, self.writer.size - 1) if upto is None else upto
        self.writer.wait_for(seq)
        return self.history.state_at(seq, use_snapshots)

    # ---- erasure ---------------------------------------------------------------------------------

    def redact_erased(self, seqs: list[int], reason: str, request: str) -> None:
        """Steps 2 and 3 of an erase: redact the payloads, then purge what still holds them."""
        # Chunks keep each redaction record far below the 16 MiB line limit; only the last one
        # names the erase alone, so an erase is pending until its last chunk is done.
        chunks = [seqs[i : i + REDACTION_CHUNK] for i in range(0, len(seqs), REDACTION_CHUNK)]
        for n, chunk in enumerate(chunks, 1):
            tag = request if n == len(chunks) else f"{request}#{n}/{len(chunks)}"
            redaction = self.writer.redact(chunk, reason, tag)
            with self.lock:  # the writer appended it, not a command: mark the erase done
                redaction_done(self.state, payload(redaction))
        # Purge the projections' copies before the snapshots, under the snapshot lock, so no
        # snapshot taken meanwhile can hold what the erase removed.
        with self._snapshot_lock:
            self.search_index.purge()
            for hook in self.erase_hooks:
                hook()
            purge_snapshots(self.snapshot_dir)

    def finish_redactions(self) -> None:
        """Redact what an erase that a crash interrupted still left in the log."""
        for erase_seq, seqs in sorted(self.state.pending_erasures.items()):
            erase = self.reader.get(erase_seq)
            reason = payload(erase).get("reason", "erasure") if erase.has_payload else "erasure"
            left = [seq for seq in seqs if self.reader.get(seq).has_payload]
            if left:
                self.redact_erased(left, reason, f"{erase.type}@{erase_seq}")
            else:
                purge_snapshots(self.snapshot_dir)
                self.state.pending_erasures.pop(erase_seq, None)

    # ---- snapshots, healing, closing -------------------------------------------------------------

    def snapshot(self) -> Path:
        """Write a snapshot of the state as of now (the log's durable head)."""
        # The snapshot lock keeps an erase's purge from running between taking the state and
        # writing the file: a snapshot taken before an erase must never appear after its purge.
        with self._snapshot_lock:
            with self.lock:
                state_json = self.state.to_json()
                snapshot = Snapshot(self.state.seq, self.state.h, {"sections": state_json})
                # The same point of the log: waits for a query running on the index, if any.
                image = self.search_index.serialize()
                self.since_snapshot = 0
            self.writer.wait_for(snapshot.seq)
            return write_snapshot(
                self.snapshot_dir, self.reader.origin, snapshot, {SEARCH_ATTACHMENT: image}
            )

    def maybe_snapshot(self) -> None:
        if self.since_snapshot >= self.snapshot_every:
            self.snapshot()

    def heal(self) -> bool:
        """After a failed write: reopen the log and load the state and the index from it again
        (`Memory.heal`); False when nothing had failed."""
        with self._heal_lock:
            if self.failure is None:
                return False
            with self.lock:  # from here on every command and read is refused until rebuilt
                self.failed = self.failed or self.writer.failure
            self.writer.reopen()
            state, snapshot, touched = self.history.load(self.writer.size - 1)
            index, source = open_search_index(
                self.snapshot_dir, snapshot, state, touched, self.content_of
            )
            with self.lock:
                old_index, self.search_index = self.search_index, index
                self.search_index_source = source
                self.state = state
                self.since_snapshot = 0
                self.failed = None
                old_semantic = self.semantic
                if old_semantic is not None:
                    self.semantic = self._semantic_index()
            old_index.close()
            if old_semantic is not None:
                old_semantic.close()
            self.finish_redactions()  # an erase whose redaction the failure stopped
            return True

    def close(self) -> None:
        """Snapshot, then close the log (log.close and the final checkpoint)."""
        if self.writer.closed:
            return
        try:
            if self.since_snapshot and self.failure is None:
                self.snapshot()
        except OSError as exc:
            # A snapshot is a cache of the log: without it the next open replays a longer tail.
            # It must not stop the log from closing cleanly (log.close, the final checkpoint).
            log.warning("no snapshot at close (%s): the next open replays the log's tail", exc)
        finally:
            self.writer.close()
            self.search_index.close()
            if self.semantic is not None:
                self.semantic.close()


def _logged(record: Record, payload: object) -> Record:
    """`record` with the payload as parsed back from the log (positional: `dataclasses.replace`
    costs several times as much, and this runs once per appended record)."""
    return Record(
        record.seq, record.ts, record.tenant, record.session, record.section, record.type,
        record.prev, record.h, record.pd, record.salt, payload, record.redacted, record.line,
    )  # fmt: skip
