"""Full-text search over the searchable sections: BM25 by SQLite's FTS5 (docs/search.md).

The index is a projection like the state, held in an in-memory SQLite database: built from the
state when the memory opens, then kept in step by `follow`, which the memory calls with every
record it applies (under its lock, in log order). Nothing of it is written to disk, so an erase
leaves no copy behind, and secure_delete zeroes the pages a removed document used.

`follow` never touches the database: it turns the record into index changes (taking what they
need from the state at that moment) and queues them, and the index's own thread applies the
queue. A query first applies everything still queued, so it sees every record applied before it
started.

- **Tenant isolation.** Each tenant has its own FTS5 table, so the corpus statistics behind a
  BM25 score (document count, average length, document frequencies) are that tenant's alone.
- **Determinism.** Scores depend only on the indexed documents, and ties break by the item's
  (seq, k), which is also the rowid: the same query on the same state gives the same order.
- **Users.** Each document keeps the user it belongs to: its session's `user_id` (creation
  metadata, so it never changes), or for the tenant's own session the item's `metadata.user_id`
  (a user's tenant-wide observation). `Query.users` leaves out the documents of other users.
- **Tokens.** FTS5's `porter unicode61` tokenizer: unicode-aware words, diacritics folded, then
  the Porter stemmer. Queries go through the same tokenizer; their words are ORed, as BM25 means.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from collections import deque
from dataclasses import dataclass

import orjson

from eventstore.errors import WriterClosed
from eventstore.record import Record
from sections.model.item import item_id
from sections.model.names import TENANT_SESSION
from sections.model.state import MemoryState
from sections.retrieval.documents import (
    K_BITS,
    Change,
    ContentOf,
    Doc,
    Put,
    Remove,
    changes_of,
    section_docs,
)

TOKENIZER = "porter unicode61 remove_diacritics 2"
# What the index holds and how: an image saved by a snapshot with another format is not loaded
# (the index is built from the state instead). 2: a message's speaker is indexed as its title;
# 3: each document keeps its user (`owner_of`); 4: and its FTS5 row holds its owner's token
# (`owner_token`), so a search of one user's documents reads that user's rows only.
INDEX_FORMAT = "4"
COMMIT_EVERY = 1000  # writes: lets FTS5 merge its segments now and then (queries read fewer)
MIN_COMMON_DOCS = 50  # fewer documents than this say too little of which words are common
MAX_QUERY_TERMS = 32  # a pasted page as a query costs one OR per word: bound it
SNIPPET_TOKENS = 16
_WORD = re.compile(r"\w+")
MAX_TIME = 2**62  # `since`/`until` beyond this are refused (ts values stay below 2**53)


@dataclass(frozen=True)
class Hit:
    """One result: where the item lives, its BM25 score (higher is better) and a snippet with
    the matched words between the markers."""

    session: str
    section: str
    id: str
    score: float
    snippet: str
    content_seq: int  # the version indexed: a hit whose item changed since is stale
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Query:
    text: str
    sessions: tuple[str, ...] | None = None
    sections: tuple[str, ...] | None = None
    tags: tuple[str, ...] = ()  # every one of them
    since: int | None = None  # item ts >= since (microseconds)
    until: int | None = None  # item ts < until
    top_k: int = 10
    markers: tuple[str, str] = ("[", "]")
    # (session, section) pairs searched besides `sessions`: a session sees the tenant's
    # observations (`_tenant`, `observations`). The other filters apply to them too.
    also: tuple[tuple[str, str], ...] = ()
    snippets: bool = True  # recall ranks hundreds of candidates and shows none of their snippets
    rows: tuple[int, ...] | None = None  # only these documents (a ranked search's snippets)
    # Leave out the query's words found in more than this share of the documents the filters
    # keep: the tenant's statistics rate a user's own names as rare (docs/recall.md).
    common: float | None = None
    # Whose documents: None, everyone's; else those of no user and of these users (a document's
    # user: the module's docstring), never another user's. () is a session of no user's view.
    users: tuple[str, ...] | None = None
    # Only the documents of these owners (a user, or None: of no user) and the tenant's own of
    # no user (its observations, which every session sees), matched inside FTS5 by their owner
    # token: recall's scope, cheap however large the tenant (docs/recall.md).
    owners: tuple[str | None, ...] | None = None


TENANTS_OWN = "t0"  # the owner token of the tenant's own documents of no user


def owner_token(owner: str | None) -> str:
    """The word a document's FTS5 row holds for its owner: digits after a letter, which no
    tokenizer step (case folding, the Porter stemmer) changes; `o0` for no user's."""
    if owner is None:
        return "o0"
    return "o" + str(int(hashlib.sha256(owner.encode()).hexdigest()[:15], 16) + 1)


def _row_owner(doc: Doc) -> str:
    return (
        TENANTS_OWN
        if doc.session == TENANT_SESSION and doc.owner is None
        else owner_token(doc.owner)
    )


def _owned_by(owners: tuple[str | None, ...]) -> str:
    """The FTS5 condition: the row's owner is one of these, or it is the tenant's own."""
    tokens = [owner_token(o) for o in owners] + [TENANTS_OWN]
    return "(" + " OR ".join(f'owner : "{t}"' for t in tokens) + ")"


def match_expression(text: str) -> str | None:
    """The FTS5 query for free text: each distinct word quoted (so no word is an operator), ORed.
    None when the text has no word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:MAX_QUERY_TERMS]
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


class SearchIndex:
    def __init__(self, image: bytes | None = None) -> None:
        """An empty index, or the one a snapshot saved (`image`, from `serialize`)."""
        # One connection shared by the memory's threads; `lock` serialises every use of it.
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        if image is not None:
            self._db.deserialize(image)
            found = self._db.execute(
                "SELECT value FROM meta WHERE key = 'format'"
            ).fetchone() if _has_meta(self._db) else None  # fmt: skip
            if found is None or found[0] != INDEX_FORMAT:
                self._db.close()
                raise sqlite3.DatabaseError(
                    f"an index of another format ({found}) than {INDEX_FORMAT}"
                )
        else:
            self._db.execute(
                "PRAGMA page_size = 16384"
            )  # long doclists on fewer pages: ~10% faster
        self._db.execute("PRAGMA secure_delete = ON")
        # A transaction kept open across writes, committed every COMMIT_EVERY of them: FTS5
        # flushes its pending terms into a new index segment at every commit, which made each
        # autocommitted add cost ~20x more. Statements on this connection see its own uncommitted
        # writes, and an in-memory index needs no rollback journal (nothing is ever rolled back).
        self._db.execute("PRAGMA journal_mode = OFF")
        if image is None:
            self._db.executescript(
                """
                CREATE TABLE docs (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL,
                    session TEXT NOT NULL, section TEXT NOT NULL, ts INTEGER NOT NULL,
                    content_seq INTEGER NOT NULL, tags TEXT NOT NULL, owner TEXT);
                CREATE INDEX docs_by_session ON docs (tenant, session, section);
                CREATE TABLE tags (id INTEGER NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (tag, id))
                    WITHOUT ROWID;
                CREATE TABLE tenants (tenant TEXT PRIMARY KEY, fts TEXT NOT NULL);
                CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                """
            )
            self._db.execute("INSERT INTO meta VALUES ('format', ?)", (INDEX_FORMAT,))
        # tenant -> its FTS5 table
        self._tables: dict[str, str] = dict(self._db.execute("SELECT tenant, fts FROM tenants"))
        self._writes = 0
        self._queue: deque[Change] = deque()  # changes `follow` queued while a query ran
        self._closed = False
        self._db.execute("BEGIN")
        self.lock = threading.Lock()
        self._queued = threading.Event()
        self._applier = threading.Thread(target=self._apply_loop, name="search-index", daemon=True)
        self._applier.start()

    def __len__(self) -> int:
        with self.lock:
            self._apply_queued()
            return self._db.execute("SELECT count(*) FROM docs").fetchone()[0]

    # ---- changes (applied with `lock` held) ----------------------------------------------------

    def _table(self, tenant: str) -> str:
        table = self._tables.get(tenant)
        if table is None:
            table = f"fts_{len(self._tables)}"
            self._db.execute(
                f"CREATE VIRTUAL TABLE {table} USING fts5(title, text, owner,"
                f" tokenize = '{TOKENIZER}')"
            )
            self._db.execute("INSERT INTO tenants VALUES (?, ?)", (tenant, table))
            self._tables[tenant] = table
        return table

    def _put(self, docs: list[Doc], replace: bool = False) -> None:
        """Index new documents, or `replace` indexed ones (keeping the text if `text` is None)."""
        for doc in docs:
            table = self._table(doc.tenant)
            text = doc.text
            if replace:
                if text is None:
                    found = self._db.execute(
                        f"SELECT text FROM {table} WHERE rowid = ?", (doc.row,)
                    )
                    text = (found.fetchone() or ("",))[0]
                self._remove(doc.tenant, [doc.row])
            self._db.execute(
                f"INSERT INTO {table} (rowid, title, text, owner) VALUES (?, ?, ?, ?)",
                (doc.row, doc.title, text, _row_owner(doc)),
            )
            self._db.execute(
                "INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (doc.row, doc.tenant, doc.session, doc.section, doc.ts, doc.content_seq,
                 orjson.dumps(doc.tags).decode(), doc.owner),
            )  # fmt: skip
            self._db.executemany(
                "INSERT OR IGNORE INTO tags VALUES (?, ?)", [(doc.row, t) for t in doc.tags]
            )
        self._wrote(len(docs))

    def _remove(self, tenant: str, rows: list[int]) -> None:
        table = self._tables.get(tenant)
        if table is None or not rows:
            return
        params = [(row,) for row in rows]
        self._db.executemany(f"DELETE FROM {table} WHERE rowid = ?", params)
        self._db.executemany("DELETE FROM docs WHERE id = ?", params)
        self._db.executemany("DELETE FROM tags WHERE id = ?", params)
        self._wrote(len(rows))

    def _remove_where(self, tenant: str, session: str, section: str | None = None) -> None:
        args: tuple[str, ...] = (tenant, session)
        sql = "tenant = ? AND session = ?"
        if section is not None:
            args += (section,)
            sql += " AND section = ?"
        rows = [r for (r,) in self._db.execute(f"SELECT id FROM docs WHERE {sql}", args)]
        self._remove(tenant, rows)

    def _wrote(self, count: int) -> None:
        before, self._writes = self._writes, self._writes + count
        if before // COMMIT_EVERY != self._writes // COMMIT_EVERY:
            self._db.execute("COMMIT")
            self._db.execute("BEGIN")

    def _apply(self, change: Change) -> None:
        if isinstance(change, Put):
            self._put(change.docs, change.replace)
        elif isinstance(change, Remove):
            self._remove(change.tenant, change.rows)
        else:
            self._remove_where(change.tenant, change.session, change.section)

    def _optimize(self) -> None:
        self._db.execute("COMMIT")
        for table in self._tables.values():
            self._db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
        self._db.execute("BEGIN")

    def _apply_queued(self) -> None:
        while self._queue:
            self._apply(self._queue.popleft())

    # ---- keeping in step with the state --------------------------------------------------------

    def build(self, state: MemoryState, content_of: ContentOf) -> None:
        """Index every live item of every searchable section (at open)."""
        with self.lock:
            for _, session in sorted(state.sessions.items()):
                for name in session.sections:
                    self._put(section_docs(session, name, content_of))
            self._optimize()  # one merged b-tree per tenant: what queries read fastest

    def resync(self, state: MemoryState, keys: set[tuple[str, str]], content_of: ContentOf) -> None:
        """Index these sessions anew from the state: after loading a snapshot's index, the
        sessions the log's tail touched."""
        with self.lock:
            self._apply_queued()
            for tenant, session_id in sorted(keys):
                self._remove_where(tenant, session_id)
                session = state.sessions.get((tenant, session_id))
                if session is not None:
                    for name in session.sections:
                        self._put(section_docs(session, name, content_of))

    def serialize(self) -> bytes:
        """The whole index as a database image, for a snapshot (`SearchIndex(image)`)."""
        with self.lock:
            self._apply_queued()
            self._db.execute("COMMIT")
            try:
                return self._db.serialize()
            finally:
                self._db.execute("BEGIN")

    def follow(self, state: MemoryState, record: Record, content_of: ContentOf) -> None:
        """Queue what `record`, just applied to `state`, changes in the index; the index's own
        thread applies the queue (and a query applies what is left before it runs)."""
        self.follow_changes(changes_of(state, record, content_of))

    def follow_changes(self, changes: list[Change]) -> None:
        """Queue changes already computed by `changes_of` (one computation for every index)."""
        if changes:
            self._queue.extend(changes)
            self._queued.set()

    def _apply_loop(self) -> None:
        # Off the memory's lock: under it each FTS5 insert took ~200 µs of wall time against
        # 20-27 µs in a bare loop (SQLite releases the GIL around every statement).
        while True:
            self._queued.wait()
            self._queued.clear()
            with self.lock:
                if self._closed:
                    return
                self._apply_queued()

    # ---- queries -------------------------------------------------------------------------------

    def search(self, tenant: str, query: Query) -> list[Hit]:
        """The best `top_k` live documents of `tenant` for the query, best first."""
        expression = match_expression(query.text)
        if expression is None:
            return []
        where: list[str] = []
        args: list[str | int] = [expression]
        if query.sessions is not None:
            scope = f"d.session IN ({','.join('?' * len(query.sessions))})"
            args.extend(query.sessions)
            for session, section in query.also:
                scope += " OR (d.session = ? AND d.section = ?)"
                args.extend((session, section))
            where.append(f"({scope})")
        if query.users is not None:
            users = f" OR d.owner IN ({','.join('?' * len(query.users))})" if query.users else ""
            where.append(f"(d.owner IS NULL{users})")
            args.extend(query.users)
        if query.sections is not None:
            where.append(f"d.section IN ({','.join('?' * len(query.sections))})")
            args.extend(query.sections)
        for tag in query.tags:
            where.append("EXISTS (SELECT 1 FROM tags t WHERE t.tag = ? AND t.id = d.id)")
            args.append(tag)
        if query.rows is not None:
            where.append(f"d.id IN ({','.join('?' * len(query.rows))})")
            args.extend(query.rows)
        if query.since is not None:
            where.append("d.ts >= ?")
            args.append(query.since)
        if query.until is not None:
            where.append("d.ts < ?")
            args.append(query.until)
        owned = _owned_by(query.owners) if query.owners is not None else None
        with self.lock:
            if self._closed:
                raise WriterClosed("the search index is closed")
            self._apply_queued()
            table = self._tables.get(tenant)
            if table is None:
                return []
            if query.common is not None and (where or owned):
                expression = self._informative(table, query, expression, where, args[1:], owned)
            args[0] = expression if owned is None else f"{owned} AND ({expression})"
            if where:  # the filters need the docs table; without them the join costs ~10%
                filters = "".join(" AND " + w for w in where)
                sql = (
                    f"SELECT {table}.rowid, bm25({table}, 1, 1, 0) AS rank FROM {table}"
                    f" JOIN docs d ON d.id = {table}.rowid WHERE {table} MATCH ?{filters}"
                    f" ORDER BY rank, {table}.rowid LIMIT ?"
                )
            else:
                sql = (
                    f"SELECT rowid, bm25({table}, 1, 1, 0) AS rank FROM {table} WHERE {table} MATCH ?"
                    " ORDER BY rank, rowid LIMIT ?"
                )
            ranked = self._db.execute(sql, (*args, query.top_k)).fetchall()
            if not ranked:
                return []
            rows = [row for row, _ in ranked]
            marks = ",".join("?" * len(rows))
            start, end = query.markers
            snippets = (
                {}
                if not query.snippets
                else dict(  # the winners only, in one pass
                    self._db.execute(
                        f"SELECT rowid, snippet({table}, -1, ?, ?, '…', {SNIPPET_TOKENS}) FROM {table}"
                        f" WHERE {table} MATCH ? AND rowid IN ({marks})",
                        (start, end, expression, *rows),
                    )
                )
            )
            where_is = {
                row: rest
                for row, *rest in self._db.execute(
                    f"SELECT id, session, section, content_seq, tags FROM docs WHERE id IN ({marks})",
                    rows,
                )
            }
        hits = []
        for row, rank in ranked:
            session, section, content_seq, tags = where_is[row]
            id_ = item_id(row >> K_BITS, row & ((1 << K_BITS) - 1))
            tag_tuple = tuple(orjson.loads(tags))
            snippet = snippets.get(row, "")
            hits.append(Hit(session, section, id_, -rank, snippet, content_seq, tag_tuple))
        return hits

    def _informative(
        self, table: str, query: Query, expression: str, where: list[str], filters: list,
        owned: str | None,
    ) -> str:  # fmt: skip
        """The query's words without those in more than `query.common` of the filtered
        documents, when there are enough of them to tell (all of them if none is left)."""
        assert query.common is not None

        def count(words: str | None) -> int:
            match = " AND ".join(f"({m})" for m in (owned, words) if m is not None)
            if not where:  # the owners alone: FTS5 counts them from their own rows
                sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH ?"
                return self._db.execute(sql, (match,)).fetchone()[0]
            condition = " AND ".join(where)
            if not match:
                sql = f"SELECT count(*) FROM docs d WHERE {condition}"
                return self._db.execute(sql, filters).fetchone()[0]
            sql = (f"SELECT count(*) FROM {table} JOIN docs d ON d.id = {table}.rowid"
                   f" WHERE {table} MATCH ? AND {condition}")  # fmt: skip
            return self._db.execute(sql, (match, *filters)).fetchone()[0]

        total = count(None)
        if total < MIN_COMMON_DOCS:
            return expression
        kept = [w for w in expression.split(" OR ") if 0 < count(w) <= query.common * total]
        return " OR ".join(kept) if kept else expression

    def purge(self) -> None:
        """After an erase: merge every table into one b-tree. FTS5 deletes by adding delete
        markers, so a removed document's terms stay in older segments until they are merged;
        `optimize` drops them (and secure_delete zeroes the freed pages)."""
        with self.lock:
            self._apply_queued()
            self._optimize()

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._db.close()
        self._queued.set()  # the applier sees `_closed` and ends
        if self._applier is not threading.current_thread():
            self._applier.join()

    def size_bytes(self) -> int:
        """The index's database size (its pages), for benchmarks and status."""
        with self.lock:
            self._apply_queued()
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            return pages * self._db.execute("PRAGMA page_size").fetchone()[0]


def _has_meta(db: sqlite3.Connection) -> bool:
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
    return found.fetchone() is not None
