"""Full-text search over the searchable sections: BM25 by SQLite's FTS5 (docs/search.md).

The index is a projection like the state, held in an in-memory SQLite database: built from the
state when the memory opens, then kept in step by `follow`, which the memory calls with every
record it applies (under its lock, in log order). Nothing of it is written to disk, so an erase
leaves no copy behind, and secure_delete zeroes the pages a removed document used.

- **Tenant isolation.** Each tenant has its own FTS5 table, so the corpus statistics behind a
  BM25 score (document count, average length, document frequencies) are that tenant's alone.
- **Determinism.** Scores depend only on the indexed documents, and ties break by the item's
  (seq, k), which is also the rowid: the same query on the same state gives the same order.
- **Tokens.** FTS5's `porter unicode61` tokenizer: unicode-aware words, diacritics folded, then
  the Porter stemmer. Queries go through the same tokenizer; their words are ORed, as BM25 means.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from eventstore.record import Record

from .state import Item, MemoryState, SessionState, item_id, parse_item_id

TOKENIZER = "porter unicode61 remove_diacritics 2"
COMMIT_EVERY = 1000  # writes: lets FTS5 merge its segments now and then (queries read fewer)
MAX_QUERY_TERMS = 32  # a pasted page as a query costs one OR per word: bound it
SNIPPET_TOKENS = 16
K_BITS = 20  # rowid = seq << K_BITS | k: ids order as (seq, k) does
_WORD = re.compile(r"\w+")
_TAG_SEP = "\x1f"


@dataclass(frozen=True)
class Hit:
    """One result: where the item lives, its BM25 score (higher is better) and a snippet with
    the matched words between the markers."""

    session: str
    section: str
    id: str
    score: float
    snippet: str


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


def rowid(seq: int, k: int) -> int:
    return seq << K_BITS | k


def match_expression(text: str) -> str | None:
    """The FTS5 query for free text: each distinct word quoted (so no word is an operator), ORed.
    None when the text has no word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:MAX_QUERY_TERMS]
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def text_of(item: Item, content: object) -> str:
    """What is indexed for an item: its title (observations have one) and its content's text."""
    parts: list[str] = []
    title = item.metadata.get("title") if isinstance(item.metadata, dict) else None
    if isinstance(title, str):
        parts.append(title)
    _strings(content, parts)
    return "\n".join(parts)


def _strings(value: object, out: list[str]) -> None:
    """The string leaves of a JSON value (structured contents are searched by their text)."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


ContentOf = Callable[[Item], object]


class SearchIndex:
    def __init__(self) -> None:
        # One connection shared by the memory's threads; `lock` serialises every use of it.
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA page_size = 16384")  # long doclists on fewer pages: ~10% faster
        self._db.execute("PRAGMA secure_delete = ON")
        # A transaction kept open across writes, committed every COMMIT_EVERY of them: FTS5
        # flushes its pending terms into a new index segment at every commit, which made each
        # autocommitted add cost ~20x more. Statements on this connection see its own uncommitted
        # writes, and an in-memory index needs no rollback journal (nothing is ever rolled back).
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute(
            "CREATE TABLE docs (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, session TEXT NOT NULL,"
            " section TEXT NOT NULL, ts INTEGER NOT NULL, tags TEXT NOT NULL)"
        )
        self._db.execute("CREATE INDEX docs_by_session ON docs (tenant, session, section)")
        self._tables: dict[str, str] = {}  # tenant -> its FTS5 table
        self._writes = 0
        self._db.execute("BEGIN")
        self.lock = threading.Lock()

    def __len__(self) -> int:
        with self.lock:
            return self._db.execute("SELECT count(*) FROM docs").fetchone()[0]

    # ---- keeping in step with the state (callers hold `lock`) ----------------------------------

    def _table(self, tenant: str) -> str:
        table = self._tables.get(tenant)
        if table is None:
            table = f"fts_{len(self._tables)}"
            self._db.execute(
                f"CREATE VIRTUAL TABLE {table} USING fts5(text, tokenize = '{TOKENIZER}')"
            )
            self._tables[tenant] = table
        return table

    def _put(self, session: SessionState, section: str, items: list[tuple[Item, object]]) -> None:
        """Index items (with their contents) that are not in the index."""
        table = self._table(session.tenant)
        rows = [(rowid(item.seq, item.k), text_of(item, content)) for item, content in items]
        self._db.executemany(f"INSERT INTO {table} (rowid, text) VALUES (?, ?)", rows)
        self._db.executemany(
            "INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?)",
            [
                (row, session.tenant, session.id, section, item.ts, _tags(item.tags))
                for (row, _), (item, _) in zip(rows, items, strict=True)
            ],
        )
        self._wrote(len(rows))

    def _wrote(self, count: int) -> None:
        before, self._writes = self._writes, self._writes + count
        if before // COMMIT_EVERY != self._writes // COMMIT_EVERY:
            self._db.execute("COMMIT")
            self._db.execute("BEGIN")

    def _remove(self, tenant: str, rows: Iterable[int]) -> None:
        table = self._tables.get(tenant)
        if table is None:
            return
        rows = [(row,) for row in rows]
        self._db.executemany(f"DELETE FROM {table} WHERE rowid = ?", rows)
        self._db.executemany("DELETE FROM docs WHERE id = ?", rows)
        self._wrote(len(rows))

    def _rows(self, tenant: str, session: str, section: str | None = None) -> list[int]:
        if section is None:
            sql, args = "tenant = ? AND session = ?", (tenant, session)
        else:
            sql, args = "tenant = ? AND session = ? AND section = ?", (tenant, session, section)
        return [r for (r,) in self._db.execute(f"SELECT id FROM docs WHERE {sql}", args)]

    def _index_section(self, session: SessionState, name: str, content_of: ContentOf) -> None:
        section = session.sections[name]
        if section.config.searchable and section.items:
            self._put(session, name, [(item, content_of(item)) for item in section.items.values()])

    def build(self, state: MemoryState, content_of: ContentOf) -> None:
        """Index every live item of every searchable section (at open)."""
        with self.lock:
            for _, session in sorted(state.sessions.items()):
                for name in session.sections:
                    self._index_section(session, name, content_of)
            # One merged b-tree per tenant: what queries read fastest after a bulk build.
            self._db.execute("COMMIT")
            for table in self._tables.values():
                self._db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            self._db.execute("BEGIN")

    def follow(self, state: MemoryState, record: Record, content_of: ContentOf) -> None:
        """Apply to the index what `record`, just applied to `state`, changed."""
        type_ = record.type
        if type_ not in _FOLLOWED or record.salt is None:  # control, reads, or an erased record
            return
        payload = record.payload
        tenant = record.tenant
        with self.lock:
            if type_ in ("session.deleted", "session.erased"):
                self._remove(tenant, self._rows(tenant, record.session))
                return
            session = state.sessions.get((tenant, record.session))
            if session is None:
                return
            if type_ == "section.configured":  # `searchable` may have changed: index anew
                self._remove(tenant, self._rows(tenant, session.id, record.section))
                if record.section in session.sections:
                    self._index_section(session, record.section, content_of)
                return
            gone = [v["id"] for v in payload.get("evicted", ())]
            by_section = payload.get("cleared" if type_ == "turn.ended" else "items")
            if isinstance(by_section, dict):
                gone.extend(i for ids in by_section.values() for i in ids)
            if type_ == "item.updated":  # the item's document is replaced
                gone.append(payload["id"])
            self._remove(tenant, [rowid(*parse_item_id(i)) for i in gone])
            for section, id_, content in _written(record, payload):
                found = session.sections.get(section)
                item = found.items.get(id_) if found is not None else None
                if item is not None and found.config.searchable:  # type: ignore[union-attr]
                    self._put(
                        session, section, [(item, content_of(item) if content is None else content)]
                    )

    # ---- queries -------------------------------------------------------------------------------

    def search(self, tenant: str, query: Query) -> list[Hit]:
        """The best `top_k` live documents of `tenant` for the query, best first."""
        expression = match_expression(query.text)
        if expression is None:
            return []
        where, args = [], [expression]
        if query.sessions is not None:
            where.append(f"d.session IN ({','.join('?' * len(query.sessions))})")
            args.extend(query.sessions)
        if query.sections is not None:
            where.append(f"d.section IN ({','.join('?' * len(query.sections))})")
            args.extend(query.sections)
        for tag in query.tags:
            where.append("instr(d.tags, ?) > 0")
            args.append(_TAG_SEP + tag + _TAG_SEP)
        if query.since is not None:
            where.append("d.ts >= ?")
            args.append(query.since)
        if query.until is not None:
            where.append("d.ts < ?")
            args.append(query.until)
        with self.lock:
            table = self._tables.get(tenant)
            if table is None:
                return []
            if where:  # the filters need the docs table; without them the join costs ~10%
                filters = "".join(" AND " + w for w in where)
                sql = (
                    f"SELECT {table}.rowid, bm25({table}) AS rank FROM {table}"
                    f" JOIN docs d ON d.id = {table}.rowid WHERE {table} MATCH ?{filters}"
                    f" ORDER BY rank, {table}.rowid LIMIT ?"
                )
            else:
                sql = (
                    f"SELECT rowid, bm25({table}) AS rank FROM {table} WHERE {table} MATCH ?"
                    " ORDER BY rank, rowid LIMIT ?"
                )
            ranked = self._db.execute(sql, (*args, query.top_k)).fetchall()
            hits = []
            start, end = query.markers
            for row, rank in ranked:  # where and snippets for the winners only
                session, section = self._db.execute(
                    "SELECT session, section FROM docs WHERE id = ?", (row,)
                ).fetchone()
                (snippet,) = self._db.execute(
                    f"SELECT snippet({table}, 0, ?, ?, '…', {SNIPPET_TOKENS}) FROM {table}"
                    f" WHERE {table} MATCH ? AND rowid = ?",
                    (start, end, expression, row),
                ).fetchone()
                id_ = item_id(row >> K_BITS, row & ((1 << K_BITS) - 1))
                hits.append(Hit(session, section, id_, -rank, snippet))
            return hits

    def close(self) -> None:
        with self.lock:
            self._db.close()

    def size_bytes(self) -> int:
        """The index's database size (its pages), for benchmarks and status."""
        with self.lock:
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            return pages * self._db.execute("PRAGMA page_size").fetchone()[0]


_FOLLOWED = frozenset(
    (
        "session.created", "session.deleted", "session.erased", "section.configured",
        "item.added", "item.updated", "item.removed", "items.erased", "turn.ended",
        "sections.cleared",
    )
)  # fmt: skip


def _tags(tags: tuple[str, ...]) -> str:
    """Tags as one string that `instr` can test for a whole tag: separators around each."""
    return _TAG_SEP + _TAG_SEP.join(tags) + _TAG_SEP if tags else ""


def _written(record: Record, payload: dict) -> list[tuple[str, str, object]]:
    """(section, item id, content or None) for each item whose indexed fields `record` set."""
    if record.type == "item.added":
        return [
            (record.section, item_id(record.seq, k), data.get("content"))
            for k, data in enumerate(payload["items"])
        ]
    if record.type == "item.updated":
        changes = payload["set"]
        return [(record.section, payload["id"], changes.get("content"))]
    if record.type == "session.created":
        order = payload.get("order") or sorted(payload.get("seed", {}))
        seed = payload.get("seed", {})
        written, k = [], 0
        for name in order:
            for data in seed.get(name, ()):
                written.append((name, item_id(record.seq, k), data.get("content")))
                k += 1
        return written
    return []
