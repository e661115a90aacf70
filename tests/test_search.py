"""Search: BM25 relevance, deterministic order, filters, isolation, reads as records, and an
index that follows every change and is rebuilt identically from the log."""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import threading

import pytest
from helpers.crashlog import files_containing
from helpers.searchindex import fresh_index_dump, index_dump
from helpers.threads import run_threads

from eventstore.errors import InvalidInput
from sections.errors import ItemNotFound
from sections.model.config import SectionConfig
from sections.runtime.memory import Memory


class Clock:
    """A settable clock in nanoseconds, as `time.time_ns`."""

    def __init__(self, us: int = 1_790_000_000_000_000) -> None:
        self.us = us

    def __call__(self) -> int:
        return self.us * 1000


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", seg_bits=6)
    yield memory
    memory.close()


def ids(hits) -> list[str]:
    return [h.item.id for h in hits]


def results(memory: Memory, query: str, **options) -> list[tuple]:
    return [
        (h.session, h.item.section, h.item.id, h.score, h.snippet)
        for h in memory.search(query, reader="operator", **options)
    ]


# A small corpus checked by hand. "database" is in 4 of 12 documents, "timeout" (stemmed from
# "Timeouts") in 1, so both have a positive IDF. Expected for "database timeout":
#   d3 holds both words; d7 holds "database" three times; d1 and d0 hold it once, and d1 is
#   the shorter document, so BM25's length normalisation puts it before d0.
CORPUS = [
    "The database connection timed out after thirty seconds",  # d0
    "Connection pooling reduces database load",  # d1
    "The cat sat on the mat",  # d2
    "Timeouts in the payment service were caused by a slow database query",  # d3
    "We deployed the new frontend build",  # d4
    "Kubernetes pods restarted during the night",  # d5
    "Lunch menu: pasta and salad",  # d6
    "database database database migrations are running",  # d7
    "The marketing team met on Tuesday",  # d8
    "Café prices went up again",  # d9
    "Runners were running in the park",  # d10
    "A quarterly report was filed",  # d11
]


@pytest.fixture
def corpus(mem):
    s = mem.session("corpus")
    views = [s.add("documents", text) for text in CORPUS]
    return s, [v.id for v in views]


def test_relevance_on_a_hand_checked_corpus(corpus):
    s, doc = corpus
    hits = s.search("database timeout")
    assert ids(hits) == [doc[3], doc[7], doc[1], doc[0]]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert hits[0].snippet.count("[") == 2  # both matched words are marked
    assert "[Timeouts]" in hits[0].snippet and "[database]" in hits[0].snippet


def test_stemming_and_unicode_folding(corpus):
    s, doc = corpus
    # Porter: "running" and "runs" stem to "run"; "Runners" to "runner", another word.
    assert set(ids(s.search("run"))) == {doc[10], doc[7]}
    assert set(ids(s.search("runs"))) == {doc[10], doc[7]}
    assert ids(s.search("runner")) == [doc[10]]
    assert ids(s.search("cafe")) == [doc[9]]  # diacritics folded
    assert ids(s.search("CAFÉ")) == [doc[9]]
    assert s.search("zeppelin") == []
    assert s.search("!!! ???") == []  # no word at all


def test_query_words_are_never_operators(corpus):
    s, doc = corpus
    # FTS5 syntax in a query is taken as words: no error, no NEAR/AND/column filter.
    assert ids(s.search('database AND "cat" NEAR(mat) text:foo *')) != []
    assert doc[2] in ids(s.search("cat OR"))


def test_order_is_deterministic_and_ties_break_by_seq(mem):
    s = mem.session("ties")
    same = [s.add("findings", "identical words here").id for _ in range(5)]
    s.add("findings", "other text entirely")
    s.add("findings", "yet another unrelated line")
    first = results(mem, "identical words")
    assert [r[2] for r in first] == same  # equal scores: oldest first
    assert len({r[3] for r in first}) == 1
    for _ in range(10):
        assert results(mem, "identical words") == first


def test_top_k_and_filters(tmp_path):
    clock = Clock()
    mem = Memory.open(tmp_path / "d", clock=clock)
    a, b = mem.session("a"), mem.session("b")
    early = a.add("messages", "deploy the billing service", role="user")
    clock.us += 1_000_000
    tagged = a.add("findings", "billing deploy failed", tags=["ops", "billing"])
    clock.us += 1_000_000
    other = b.add("actions", "billing deploy rolled back", tags=["ops"])
    b.add("working", "billing deploy scratch")  # not a searchable section
    everyone = ids(mem.search("billing deploy", reader="operator"))
    assert set(everyone) == {early.id, tagged.id, other.id}
    assert len(ids(mem.search("billing deploy", top_k=2))) == 2
    assert ids(mem.search("billing", sessions=["b"])) == [other.id]
    assert ids(a.search("billing")) and set(ids(a.search("billing"))) == {early.id, tagged.id}
    assert ids(mem.search("billing", sections=["findings", "actions"], tags=["ops"])) in (
        [tagged.id, other.id],
        [other.id, tagged.id],
    )
    assert ids(mem.search("billing", tags=["ops", "billing"])) == [tagged.id]
    t0 = mem.reader.get(early.seq).ts
    assert set(ids(mem.search("billing", since=t0 + 1))) == {tagged.id, other.id}
    assert ids(mem.search("billing", until=t0 + 1)) == [early.id]
    assert ids(mem.search("billing", since=t0, until=t0 + 1)) == [early.id]
    mem.close()


def test_hits_are_reads_recorded_before_they_are_returned(mem):
    a, b = mem.session("a"), mem.session("b")
    x = a.add("findings", "shared keyword alpha")
    y = b.add("documents", "shared keyword beta")
    start = mem.writer.next_seq
    hits = mem.search("shared keyword")
    records = [r for r in mem.reader.records(after=start - 1) if r.type == "items.read"]
    assert {(r.session, r.payload["purpose"]) for r in records} == {
        ("a", "search"),
        ("b", "search"),
    }
    assert {r.session: r.payload["items"] for r in records} == {
        "a": {"findings": [x.id]},
        "b": {"documents": [y.id]},
    }
    assert all(r.payload["reader"] == "agent" for r in records)
    assert mem.writer.size > max(r.seq for r in records)  # durable when returned
    assert len(hits) == 2
    # An agent's read moves the lru/lfu clocks exactly as a get does; an operator's does not.
    state = mem.state_at(mem.writer.next_seq - 1)
    assert state.sessions[("default", "a")].sections["findings"].items[x.id].reads == 1


def test_a_search_without_hits_appends_nothing(mem):
    mem.session("a").add("findings", "something")
    start = mem.writer.next_seq
    assert mem.search("nothing matches this") == []
    assert mem.writer.next_seq == start


def test_bad_queries_are_refused_and_append_nothing(mem):
    s = mem.session("a")
    s.add("findings", "x")
    start = mem.writer.next_seq
    for kwargs in (
        {"query": ""},
        {"query": "   "},
        {"query": "x", "top_k": 0},
        {"query": "x", "top_k": 5000},
        {"query": "x", "top_k": "3"},
        {"query": "x", "since": "yesterday"},
        {"query": "x", "tags": "ops"},
        {"query": "x", "reader": "robot"},
    ):
        query = kwargs.pop("query")
        with pytest.raises(InvalidInput):
            mem.search(query, **kwargs)
    assert mem.writer.next_seq == start


def test_changes_leave_the_index_at_once(tmp_path):
    config_sections = {"messages": {"budget_tokens": 30}}
    mem = Memory.open(tmp_path / "d")
    s = mem.session("s", sections=config_sections)
    first = s.add("messages", "aardvark one two three four", role="user")
    assert ids(s.search("aardvark")) == [first.id]
    for i in range(8):  # the fifo section overflows and evicts the first message
        s.add("messages", f"filler message number {i} with several words", role="user")
    assert ids(s.search("aardvark")) == []
    gone = s.add("findings", "bandicoot sighting")
    s.remove("findings", gone.id)
    assert s.search("bandicoot") == []
    changed = s.add("findings", "capybara notes")
    s.update("findings", changed.id, content="dugong notes")
    assert s.search("capybara") == [] and ids(s.search("dugong")) == [changed.id]
    erased = s.add("documents", "echidna secret")
    s.erase(erased.id, reason="test")
    assert s.search("echidna") == []
    s.configure("findings", searchable=False)
    assert s.search("dugong") == []
    s.configure("findings", searchable=True)
    assert ids(s.search("dugong")) == [changed.id]
    other = mem.session("t")
    other.add("documents", "flamingo facts")
    other.delete()
    assert mem.search("flamingo") == []
    mem.close()


def test_tenants_are_isolated_in_results_and_scores(tmp_path):
    mem = Memory.open(tmp_path / "d")
    a = mem.session("s", tenant="acme")
    for text in ["gamma ray burst", "gamma radiation", "alpha beta", "delta wing"]:
        a.add("documents", text)
    before = results(mem, "gamma ray", tenant="acme")
    b = mem.session("s", tenant="globex")  # same session id, other tenant
    for i in range(50):
        b.add("documents", f"gamma gamma ray {i}")
    after = results(mem, "gamma ray", tenant="acme")
    assert after == before  # exactly the same scores: globex's documents changed nothing
    assert all(r[0] == "s" for r in after) and len(after) == 2
    assert {h.item.id for h in mem.search("gamma", tenant="acme", top_k=100)} <= {
        v.id for v in a.get("documents")
    }
    assert len(mem.search("gamma", tenant="globex", top_k=100)) == 50
    assert mem.search("gamma", tenant="initech") == []
    mem.close()


QUERIES = ["alpha", "beta gamma", "delta", "epsilon zeta", "word", "number 3", "eta theta iota"]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "word",
    "number",
]


def _workload(mem: Memory, rng: random.Random, steps: int) -> None:
    sessions = [
        mem.session(f"s{i}", sections={"messages": {"budget_tokens": 200}}) for i in range(3)
    ]
    live: list[tuple] = []
    for _ in range(steps):
        s = rng.choice(sessions)
        roll = rng.random()
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))
        if roll < 0.45:
            section = rng.choice(["messages", "findings", "documents", "working"])
            item = s.add(section, text, tags=[rng.choice(["x", "y"])], role="user")
            if section != "working":
                live.append((s, section, item.id))
        elif roll < 0.6 and live:
            owner, section, id_ = rng.choice(live)
            with contextlib.suppress(ItemNotFound):  # evicted meanwhile
                owner.update(section, id_, content=text)
        elif roll < 0.7 and live:
            owner, section, id_ = live.pop(rng.randrange(len(live)))
            with contextlib.suppress(ItemNotFound):
                owner.remove(section, id_)
        elif roll < 0.75 and live:
            owner, section, id_ = live.pop(rng.randrange(len(live)))
            owner.erase(id_, reason="test")
        elif roll < 0.85:
            s.end_turn()
        else:
            mem.observe("learning", "note", text, topic_key=rng.choice([None, "k1", "k2"]))


def _all_results(mem: Memory) -> list:
    out = []
    for tenant in ("default",):
        for q in QUERIES:
            out.append(results(mem, q, tenant=tenant, top_k=50))
            out.append(results(mem, q, tenant=tenant, tags=["x"], top_k=50))
    return out


def test_rebuild_from_the_log_gives_identical_results(tmp_path):
    rng = random.Random(7)
    mem = Memory.open(tmp_path / "d", seg_bits=6, snapshot_every=150)
    _workload(mem, rng, 400)
    live = _all_results(mem)
    assert index_dump(mem.search_index) == fresh_index_dump(mem)  # incremental == built anew
    mem.close()
    for use_snapshots in (True, False):
        if not use_snapshots:
            for path in (tmp_path / "d" / "snapshots").glob("*.json"):
                path.unlink()
        again = Memory.open(tmp_path / "d", seg_bits=6)
        assert _all_results(again) == live
        again.close()


def test_large_contents_are_indexed_and_found_after_a_restart(tmp_path):
    mem = Memory.open(tmp_path / "d")
    s = mem.session("s")
    big = s.add("documents", "needle " + "hay " * 3000)  # kept in the log, not in memory
    mem.close()
    mem = Memory.open(tmp_path / "d")
    hits = mem.search("needle")
    assert ids(hits) == [big.id] and hits[0].item.content.startswith("needle hay")
    mem.close()


def test_a_section_added_as_searchable_is_searched(mem):
    s = mem.session("s", sections={"notes": SectionConfig("notes", searchable=True).to_json()})
    note = s.add("notes", "hippopotamus")
    assert ids(s.search("hippopotamus")) == [note.id]


def test_null_and_large_contents_and_tag_updates_keep_the_index_exact(tmp_path):
    mem = Memory.open(tmp_path / "d")
    s = mem.session("s")

    def work(n: int) -> None:
        for i in range(15):
            s.add("documents", None)
            big = s.add("documents", f"needle{n} " + "hay " * 2000)  # kept in the log
            s.update("documents", big.id, tags=[f"t{i}"])  # no content: text is kept

    assert run_threads(work, 6) == []
    assert index_dump(mem.search_index) == fresh_index_dump(mem)
    assert len(mem.search("needle3", tags=["t14"])) == 1
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_writers_never_wait_for_a_running_query(mem):
    s = mem.session("s")
    s.add("findings", "before the query")
    done = threading.Event()
    written = []

    def write() -> None:
        written.append(s.add("findings", "written while the index was busy").id)
        done.set()

    with mem.search_index.lock:  # what a long query holds
        writer = threading.Thread(target=write)
        writer.start()
        assert done.wait(30), "a write waited for the index"
    writer.join()
    assert ids(s.search("written while busy")) == written  # applied before the query ran


def test_tag_filters_match_whole_tags_only(mem):
    s = mem.session("s")
    split = s.add("findings", "tagged text", tags=["a", "b"])
    joined = s.add("findings", "tagged text", tags=["a\x1fb"])
    assert ids(s.search("tagged", tags=["a\x1fb"])) == [joined.id]
    assert ids(s.search("tagged", tags=["a", "b"])) == [split.id]
    assert ids(s.search("tagged", tags=["a"])) == [split.id]


def test_times_out_of_range_are_refused(mem):
    mem.session("s").add("findings", "x")
    for value in (10**30, -(10**30), 2**62 + 1):
        with pytest.raises(InvalidInput):
            mem.search("x", since=value)


def _index_bytes(mem: Memory) -> bytes:
    """Every byte the index database holds for tenant `default`: its FTS5 segments and rows."""
    with mem.search_index.lock:
        mem.search_index._apply_queued()
        db = mem.search_index._db
        table = mem.search_index._tables["default"]
        blocks = [b for (b,) in db.execute(f"SELECT block FROM {table}_data") if b]
        texts = [t.encode() for (t,) in db.execute(f"SELECT c1 FROM {table}_content") if t]
    return b"".join(blocks + texts)


def test_an_erased_item_leaves_no_term_in_the_index(mem):
    s = mem.session("s")
    for i in range(40):
        s.add("documents", f"ordinary words {i}")
    removed = s.add("documents", "zyzzogeton removed")
    s.remove("documents", removed.id)
    assert b"zyzzogeton" in _index_bytes(mem)  # a plain removal leaves a delete marker only
    erased = s.add("documents", "quixotically private")
    s.erase(erased.id, reason="gdpr")
    held = _index_bytes(mem)
    assert b"quixot" not in held and b"zyzzogeton" not in held
    assert ids(s.search("ordinary")) != []


def _open_copy(src, dst, *, without_snapshots: bool = False) -> Memory:
    """Open a copy of a live data directory, as a crash would leave it."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("LOCK"))
    if without_snapshots:
        shutil.rmtree(dst / "snapshots", ignore_errors=True)
    return Memory.open(dst, seg_bits=6)


def test_the_index_comes_from_the_snapshot_and_the_tail_is_redone(tmp_path):
    mem = Memory.open(tmp_path / "d", seg_bits=6)
    _workload(mem, random.Random(11), 250)
    mem.snapshot()
    a, b = mem.session("s0", create=False), mem.session("s1", create=False)
    a.add("documents", "tail alpha document")  # the tail after the snapshot
    live_ids = [v.id for v in b.get("findings", reader="operator")]
    if live_ids:
        b.update("findings", live_ids[0], content="tail beta rewrite")
    mem.session("s2", create=False).delete()
    mem.observe("learning", "tail", "tail gamma observation")
    expected = _all_results(mem)
    loaded = _open_copy(tmp_path / "d", tmp_path / "copy")
    built = _open_copy(tmp_path / "d", tmp_path / "plain", without_snapshots=True)
    assert (loaded.search_index_source, built.search_index_source) == ("snapshot", "built")
    assert index_dump(loaded.search_index) == index_dump(built.search_index)
    assert _all_results(loaded) == _all_results(built) == expected
    for m in (mem, loaded, built):
        m.close()


def test_a_damaged_index_attachment_is_ignored(tmp_path, caplog):
    mem = Memory.open(tmp_path / "d")
    mem.session("s").add("documents", "kept words")
    mem.close()
    (attachment,) = (tmp_path / "d" / "snapshots").glob("snap-*.search.db")
    attachment.write_bytes(attachment.read_bytes()[:-10] + b"0123456789")
    with caplog.at_level(logging.WARNING):
        again = Memory.open(tmp_path / "d")
    assert again.search_index_source == "built" and "checksum" in caplog.text
    assert ids(again.search("kept")) != []
    again.close()


def test_an_erase_removes_every_snapshot_attachment(tmp_path):
    mem = Memory.open(tmp_path / "d")
    s = mem.session("s")
    secret = s.add("documents", "snapshotted secret words")
    mem.snapshot()
    assert list((tmp_path / "d" / "snapshots").glob("snap-*.search.db"))
    s.erase(secret.id, reason="gdpr")
    assert list((tmp_path / "d" / "snapshots").iterdir()) == []
    mem.close()
    assert files_containing(tmp_path / "d", b"snapshotted secret") == []
