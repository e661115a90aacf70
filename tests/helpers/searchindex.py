"""What a search index holds, comparable between two indexes (tests only)."""

from __future__ import annotations

from sections.retrieval.search import SearchIndex
from sections.runtime.memory import Memory


def index_dump(index: SearchIndex) -> dict:
    """Every document (where, tags, version) and every indexed text, by tenant."""
    with index.lock:
        index._apply_queued()
        db = index._db
        out: dict = {"docs": sorted(db.execute("SELECT * FROM docs").fetchall())}
        out["tags"] = sorted(db.execute("SELECT * FROM tags").fetchall())
        for tenant, table in sorted(index._tables.items()):
            rows = sorted(db.execute(f"SELECT rowid, title, text FROM {table}").fetchall())
            if rows:  # a tenant whose documents all left keeps an empty table
                out[tenant] = rows
        return out


def fresh_index_dump(mem: Memory) -> dict:
    """The dump of an index built anew from the memory's live state."""
    fresh = SearchIndex()
    mem.read(lambda state: fresh.build(state, mem.history.content_of))
    try:
        return index_dump(fresh)
    finally:
        fresh.close()
