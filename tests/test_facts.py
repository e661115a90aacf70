"""Facts (sections/retrieval/facts.py): history that answers "as of" any time, closing, queries by each
field, replay, search, context injection, erasure of sources, refusals and tenant isolation."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from helpers.threads import run_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_search import Clock

from eventstore.errors import InvalidInput
from eventstore.file_sink import Durability
from sections.errors import IdempotencyConflict, ItemNotFound, SessionNotFound
from sections.model.config import MemoryConfig
from sections.model.names import TENANT_SESSION
from sections.model.render import tokens_of
from sections.model.tokens import DEFAULT_COUNTER
from sections.runtime.memory import Memory, Session

NOW = 1_790_000_000_000_000


@pytest.fixture
def clock():
    return Clock(NOW)


@pytest.fixture
def mem(tmp_path, clock):
    memory = Memory.open(tmp_path / "data", clock=clock, seg_bits=6)
    yield memory
    memory.close()


def objects(found) -> list[str]:
    return [f.object for f in found]


def records_of(mem: Memory, type_: str) -> list:
    return [r for r in mem.reader.records() if r.type == type_ and r.has_payload]


# ---- history and "as of" ---------------------------------------------------------------------

_subjects = itertools.count()
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("assert"), st.integers(0, 20), st.sampled_from("abc")),
        st.tuples(st.just("retract"), st.integers(0, 30), st.integers(0, 22)),
    ),
    min_size=1,
    max_size=12,
)


def _model_ends(asserted: list[tuple[int, str]], retracted: dict[int, int]) -> list[int | None]:
    """The reference: a fact ends at the first later start (a tie with a fact asserted after
    it ends it at once), or where it was retracted."""
    ends = []
    for i, (start, _) in enumerate(asserted):
        cut = [s for j, (s, _) in enumerate(asserted) if s > start or (s == start and j > i)]
        if i in retracted:
            cut.append(retracted[i])
        ends.append(min(cut) if cut else None)
    return ends


def _valid(start: int, end: int | None, t: int) -> bool:
    return start <= t and (end is None or t < end)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    memory = Memory.open(
        tmp_path_factory.mktemp("facts") / "data", durability=Durability.UNSAFE_NO_FSYNC
    )
    yield memory
    memory.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_steps)
def test_history_answers_as_of_every_time(shared, steps):
    """Single-valued: whatever the order facts come in (starts in any order, retractions
    between), the facts valid at t are exactly the reference's, for every t."""
    mem = shared
    subject = f"s{next(_subjects)}"
    asserted: list[tuple[int, str]] = []
    ids: list[str] = []
    retracted: dict[int, int] = {}
    for step in steps:
        if step[0] == "assert":
            _, start, obj = step
            ids.append(mem.assert_fact(subject, "p", obj, valid_from=start).id)
            asserted.append((start, obj))
        elif asserted:
            _, which, at = step
            i = which % len(asserted)
            end = _model_ends(asserted, retracted)[i]
            size = mem.writer.size
            if _valid(asserted[i][0], end, at):
                fact = mem.retract_fact(ids[i], at=at, reason="test")
                retracted[i] = at
                assert fact.invalid_at == at and fact.retracted == {"at": at, "reason": "test"}
            else:
                with pytest.raises(InvalidInput):
                    mem.retract_fact(ids[i], at=at)
                assert mem.writer.size == size
    ends = _model_ends(asserted, retracted)
    for t in range(-1, 32):
        expected = [ids[i] for i, (s, _) in enumerate(asserted) if _valid(s, ends[i], t)]
        assert len(expected) <= 1
        assert [f.id for f in mem.facts(subject, "p", as_of=t)] == expected, t
    history = mem.facts(subject, include_history=True)
    assert {f.id: f.invalid_at for f in history} == dict(zip(ids, ends, strict=True))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.tuples(st.integers(0, 20), st.sampled_from("abc")), min_size=1, max_size=10)
)
def test_a_multi_valued_history_is_one_timeline_per_object(shared, steps):
    """Multi-valued: each object has its own timeline, which the reference above answers."""
    mem = shared
    subject = f"m{next(_subjects)}"
    ids = [
        mem.assert_fact(subject, "p", obj, valid_from=start, multi=True).id for start, obj in steps
    ]
    expected: dict[int, set[str]] = {t: set() for t in range(-1, 23)}
    for obj in "abc":
        mine = [(k, (start, o)) for k, (start, o) in enumerate(steps) if o == obj]
        ends = _model_ends([pair for _, pair in mine], {})
        for (k, (start, _)), end in zip(mine, ends, strict=True):
            for t in expected:
                if _valid(start, end, t):
                    expected[t].add(ids[k])
    for t, wanted in expected.items():
        assert {f.id for f in mem.facts(subject, "p", as_of=t)} == wanted, t


def test_a_new_value_closes_the_old_one_which_history_keeps(mem, clock):
    old = mem.assert_fact("alice", "lives_in", "london")
    assert old.valid_at == NOW and old.invalid_at is None
    clock.us += 10
    new = mem.assert_fact("alice", "lives_in", "paris")
    assert objects(mem.facts("alice", "lives_in")) == ["paris"]
    assert objects(mem.facts("alice", "lives_in", as_of=NOW + 5)) == ["london"]
    assert objects(mem.facts("alice", "lives_in", as_of=NOW - 1)) == []
    [closed, current] = mem.facts("alice", include_history=True)
    assert (closed.id, closed.invalid_at) == (old.id, NOW + 10)
    assert (current.id, current.invalid_at) == (new.id, None)
    [record] = [r for r in records_of(mem, "item.added") if r.seq == new.seq]
    assert record.payload["items"][0]["metadata"]["closes"] == [old.id]  # decided in the record


def test_a_fact_learned_late_ends_where_a_newer_one_starts(mem):
    mem.assert_fact("acme", "ceo", "carol", valid_from=200)
    late = mem.assert_fact("acme", "ceo", "bob", valid_from=100)
    assert late.invalid_at == 200
    assert objects(mem.facts("acme", "ceo", as_of=150)) == ["bob"]
    assert objects(mem.facts("acme", "ceo", as_of=250)) == ["carol"]


def test_a_multi_valued_predicate_closes_only_the_same_object(mem):
    mem.assert_fact("alice", "speaks", "english", multi=True, valid_from=10)
    mem.assert_fact("alice", "speaks", "french", multi=True, valid_from=20)
    assert objects(mem.facts("alice", "speaks", as_of=30)) == ["english", "french"]
    mem.assert_fact("alice", "speaks", "french", multi=True, valid_from=40)  # the same again
    history = mem.facts("alice", "speaks", include_history=True)
    assert [(f.object, f.valid_at, f.invalid_at) for f in history] == [
        ("english", 10, None), ("french", 20, 40), ("french", 40, None),
    ]  # fmt: skip
    mem.assert_fact("alice", "speaks", "german", valid_from=50)  # single-valued: closes all
    assert objects(mem.facts("alice", "speaks", as_of=60)) == ["german"]


def test_one_record_may_close_its_own_earlier_fact(mem):
    made = mem.assert_facts([
        {"subject": "x", "predicate": "state", "object": "a", "valid_from": 1},
        {"subject": "x", "predicate": "state", "object": "b", "valid_from": 5},
    ])  # fmt: skip
    assert made[0].seq == made[1].seq
    history = mem.facts("x", include_history=True)
    assert [(f.object, f.invalid_at) for f in history] == [("a", 5), ("b", None)]


# ---- queries ---------------------------------------------------------------------------------


def test_query_by_each_field_and_their_combinations(mem):
    mem.assert_facts([
        {"subject": "alice", "predicate": "works_at", "object": "acme"},
        {"subject": "bob", "predicate": "works_at", "object": "acme"},
        {"subject": "alice", "predicate": "likes", "object": "tea"},
        {"subject": "acme", "predicate": "based_in", "object": "paris"},
    ])  # fmt: skip

    def triples(**q):
        return sorted((f.subject, f.predicate, f.object) for f in mem.facts(**q))

    assert triples(subject="alice") == [("alice", "likes", "tea"), ("alice", "works_at", "acme")]
    assert triples(predicate="works_at") == [("alice", "works_at", "acme"), ("bob", "works_at", "acme")]  # fmt: skip
    assert triples(object="acme") == triples(predicate="works_at")
    assert triples(subject="acme") == [("acme", "based_in", "paris")]
    assert triples(subject="alice", object="tea") == [("alice", "likes", "tea")]
    assert triples(predicate="works_at", object="acme", subject="bob") == [("bob", "works_at", "acme")]  # fmt: skip
    assert triples(subject="nobody") == []
    assert len(mem.facts()) == 4


def test_reads_are_traced_on_the_tenant_session(mem):
    fact = mem.assert_fact("alice", "likes", "tea")
    mem.facts(subject="alice", reader="operator")
    [read] = [r for r in records_of(mem, "items.read") if r.payload.get("purpose") == "facts"]
    assert (read.session, read.payload["items"], read.payload["reader"]) == (
        TENANT_SESSION, {"facts": [fact.id]}, "operator",
    )  # fmt: skip
    size = mem.writer.size
    assert mem.facts(subject="nobody") == []  # nothing read, nothing to trace
    assert mem.writer.size == size


def test_a_session_asserts_from_its_items_and_reads_what_it_taught(mem):
    s1, s2 = mem.session("s1"), mem.session("s2")
    item = s1.add("messages", "I moved to Paris last week", role="user")
    learned = s1.assert_fact("user", "lives_in", "paris", sources=[item.id])
    assert learned.sources == ({"session": "s1", "id": item.id},)
    mem.assert_fact("user", "likes", "tea")
    assert [f.id for f in s1.facts()] == [learned.id]
    assert s2.facts() == []
    here = s2.assert_fact("user", "mood", "happy")  # asserted in s2, no source
    cited = s2.assert_fact("user", "city", "paris", sources=[{"session": "s1", "id": item.id}])
    assert (here.session, cited.session) == ("s2", "s2")
    assert [f.id for f in s2.facts()] == [here.id, cited.id]
    assert [f.id for f in s1.facts()] == [learned.id, cited.id]
    assert mem.facts("user", "likes")[0].session is None
    assert len(mem.facts(subject="user")) == 4
    assert [f.id for f in asyncio.run(s1.facts_async("user"))] == [learned.id, cited.id]


def test_extraction_calls_the_runtime_once_and_replay_never(tmp_path, clock):
    calls = []

    def extract(text):
        calls.append(text)
        return [
            ("user", "lives_in", "paris"),
            {"subject": "user", "predicate": "moved", "object": "yes"},
        ]

    mem = Memory.open(tmp_path / "data", clock=clock)
    s = mem.session("s1")
    item = s.add("messages", "I moved to Paris", role="user")
    mem.fact_extractor = extract
    found = s.extract_facts([item.id])
    assert calls == ["I moved to Paris"]
    assert [(f.object, f.sources) for f in found] == [
        ("paris", ({"session": "s1", "id": item.id},)),
        ("yes", ({"session": "s1", "id": item.id},)),
    ]
    [added] = [r for r in records_of(mem, "item.added") if r.section == "facts"]
    assert added.payload["items"][0]["metadata"]["extractor"] == "extract"
    [read] = [r for r in records_of(mem, "items.read") if r.payload["purpose"] == "facts.extract"]
    assert read.session == "s1" and read.payload["items"] == {"messages": [item.id]}
    mem.fact_extractor = None
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()
    assert calls == ["I moved to Paris"]
    again = Memory.open(tmp_path / "data", clock=clock)
    assert objects(again.facts("user")) == ["yes", "paris"] or objects(again.facts("user")) == [
        "paris",
        "yes",
    ]
    again.close()


# ---- replay, search, context ----------------------------------------------------------------


def test_rebuild_equals_live_also_after_a_snapshot_and_reopen(tmp_path, clock):
    mem = Memory.open(tmp_path / "data", clock=clock)
    s = mem.session("s1")
    item = s.add("findings", "Acme's CEO is Carol")
    first = s.assert_fact("acme", "ceo", "bob", sources=[item.id], valid_from=1)
    s.assert_fact("acme", "ceo", "carol", sources=[item.id], valid_from=2)
    mem.retract_fact(mem.assert_fact("acme", "hq", "paris").id, reason="moved")
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.snapshot()
    mem.assert_fact("acme", "hq", "lyon")
    history = mem.facts("acme", include_history=True)
    live = mem.state_hash()
    mem.close()
    again = Memory.open(tmp_path / "data", clock=clock)
    assert again.state_hash() == live == again.rebuild().state_hash()
    assert again.facts("acme", include_history=True) == history
    assert history[0].id == first.id and history[0].invalid_at == 2
    again.close()


def test_search_finds_facts(mem):
    mem.session("s1").add("messages", "nothing about cities")
    fact = mem.assert_fact("alice", "lives_in", "paris")
    hits = mem.search("paris")
    assert [(h.session, h.item.section, h.item.id) for h in hits] == [
        (TENANT_SESSION, "facts", fact.id)
    ]
    assert hits[0].item.content == "alice lives_in paris"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(budget=st.integers(1, 120), n=st.integers(1, 6))
def test_context_injects_facts_within_the_budget_and_replays_them(shared, budget, n):
    mem = shared
    s = mem.session("ctx")
    if not s.facts():
        item = s.add("messages", "where do the team members live?", role="user")
        for k in range(5):
            s.assert_fact(f"member{k}", "lives_in", f"city{k}", sources=[item.id])
    record, messages = s.assemble(budget, query="where does member3 live", facts=n)
    assert tokens_of(messages, DEFAULT_COUNTER) <= budget
    assert record.payload["tokens"] <= budget
    injected = [e for e in record.payload["manifest"] if e.get("inject") == "fact"]
    assert len(injected) <= n
    if budget >= 60:
        assert injected and "member3 lives_in city3" in messages[0]["content"]
    assert mem.context_at(record.seq) == messages  # byte for byte, from the log


def test_context_injects_only_valid_facts(mem, clock):
    s = mem.session("s1")
    s.add("messages", "hello", role="user")
    mem.assert_fact("alice", "lives_in", "london")
    clock.us += 1
    mem.assert_fact("alice", "lives_in", "paris")
    messages = s.context(1000, query="alice london paris", facts=5)
    assert messages[0] == {"role": "system", "content": "## facts\n- alice lives_in paris"}


# ---- erasure ---------------------------------------------------------------------------------


def _log_bytes(mem: Memory) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(mem.data.log.glob("seg-*.jsonl")))


def test_erasing_a_source_item_leaves_no_erased_content(mem):
    s = mem.session("s1")
    item = s.add("messages", "my secret address is 12 Zebra Lane", role="user")
    fact = s.assert_fact("user", "has", "an address", sources=[item.id])
    mem.facts("user")
    s.erase([item.id], reason="gdpr")
    assert b"Zebra" not in _log_bytes(mem)
    [kept] = mem.facts("user")
    assert kept.id == fact.id and kept.sources == ({"session": "s1", "id": item.id},)
    assert mem.rebuild().state_hash() == mem.state_hash()
    with pytest.raises(InvalidInput):  # an erased item is no longer a source
        s.assert_fact("user", "has", "more", sources=[item.id])


def test_erasing_a_fact_and_a_session(mem):
    s = mem.session("s1")
    item = s.add("messages", "hi", role="user")
    fact = s.assert_fact("user", "codename", "Bluebird", sources=[item.id])
    mem.erase_facts([fact.id], reason="gdpr")
    assert mem.facts(include_history=True) == []
    assert b"Bluebird" not in _log_bytes(mem)
    kept = s.assert_fact("user", "likes", "tea", sources=[item.id])
    s.erase_all(reason="gdpr")  # the tenant's facts stay; their references hold only ids
    assert [f.id for f in mem.facts()] == [kept.id]
    assert mem.rebuild().state_hash() == mem.state_hash()


# ---- refusals and isolation -----------------------------------------------------------------

BAD = [
    ("empty subject", lambda m, s, k: m.assert_fact("", "p", "o")),
    ("blank object", lambda m, s, k: m.assert_fact("s", "p", "  ")),
    ("non-string predicate", lambda m, s, k: m.assert_fact("s", 3, "o")),
    ("long subject", lambda m, s, k: m.assert_fact("x" * 1001, "p", "o")),
    ("valid_from as text", lambda m, s, k: m.assert_fact("s", "p", "o", valid_from="yesterday")),
    ("metadata as list", lambda m, s, k: m.assert_fact("s", "p", "o", metadata=[1])),
    ("multi as text", lambda m, s, k: m.assert_fact("s", "p", "o", multi="yes")),
    ("unknown source", lambda m, s, k: m.assert_fact("s", "p", "o", sources=[{"session": "s1", "id": "999"}])),
    ("source as string", lambda m, s, k: m.assert_fact("s", "p", "o", sources="1")),
    ("unknown field", lambda m, s, k: m.assert_facts([{"subject": "s", "predicate": "p", "object": "o", "x": 1}])),
    ("no facts", lambda m, s, k: m.assert_facts([])),
    ("session source unknown", lambda m, s, k: s.assert_fact("s", "p", "o", sources=["404"])),
    ("as_of and history", lambda m, s, k: m.facts(as_of=1, include_history=True)),
    ("as_of as text", lambda m, s, k: m.facts(as_of="now")),
    ("bad reader", lambda m, s, k: m.facts(reader="robot")),
    ("retract before start", lambda m, s, k: m.retract_fact(k["fact"], at=0)),
    ("no extractor", lambda m, s, k: s.extract_facts([k["item"]])),
    ("extractor says nonsense", lambda m, s, k: s.extract_facts([k["item"]], extract=lambda t: ["one"])),
    ("extractor adds sources", lambda m, s, k: s.extract_facts([k["item"]], extract=lambda t: [{"subject": "a", "predicate": "b", "object": "c", "sources": []}])),
]  # fmt: skip


@pytest.mark.parametrize("name,call", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_appends_nothing(mem, name, call):
    s = mem.session("s1")
    item = s.add("messages", "hello", role="user")
    known = {"item": item.id, "fact": mem.assert_fact("known", "p", "o", valid_from=10).id}
    size = mem.writer.size
    with pytest.raises(InvalidInput):
        call(mem, s, known)
    assert mem.writer.size == size


def test_bad_input_on_a_fresh_tenant_appends_nothing(mem):
    size = mem.writer.size
    with pytest.raises(InvalidInput):
        mem.assert_fact("s", "p", "o", sources=[{"session": "nope", "id": "1"}], tenant="fresh")
    with pytest.raises(ItemNotFound):
        mem.retract_fact("1", tenant="fresh")
    with pytest.raises(SessionNotFound):
        Session(mem, "fresh", "nope").facts()
    assert mem.writer.size == size


def test_another_tenant_never_sees_facts(mem):
    mem.assert_fact("alice", "lives_in", "paris", tenant="a")
    other = mem.session("s", tenant="b")
    other.add("messages", "where is paris", role="user")
    assert mem.facts(tenant="b", include_history=True) == []
    assert mem.facts(subject="alice", tenant="b") == []
    assert mem.search("paris", tenant="b", sections=["facts"]) == []
    assert other.context(1000, query="alice paris", facts=5) == [
        {"role": "user", "content": "where is paris"}
    ]
    fact = mem.facts(tenant="a")[0]
    with pytest.raises(ItemNotFound):
        mem.retract_fact(fact.id, tenant="b")


def test_a_configured_facts_section_with_a_budget_evicts_no_fact(tmp_path, clock):
    """A memory config giving every session a budgeted `facts` section: in `_tenant` it is set
    to the facts' settings (unbounded, never evicting) before the first fact."""
    config = MemoryConfig().with_overrides({"facts": {"budget_tokens": 10, "policy": "fifo"}})
    with Memory.open(tmp_path / "data", clock=clock, config=config) as mem:
        for k in range(6):
            mem.assert_fact(f"item{k}", "colour", "a rather long colour name")
        assert len(mem.facts()) == 6
        mem.session("user")
        assert mem.session_sections("default", "user")["facts"]["budget_tokens"] == 10
        held = mem.session_sections("default", TENANT_SESSION)["facts"]
        assert (held["budget_tokens"], held["items"], held["evictions"]) == (None, 6, 0)
        assert mem.rebuild().state_hash() == mem.state_hash()


def test_async_twins(mem):
    async def main():
        fact = await mem.assert_fact_async("a", "b", "c")
        [same] = await mem.facts_async("a")
        ended = await mem.retract_fact_async(fact.id, reason="no")
        return fact, same, ended

    fact, same, ended = asyncio.run(main())
    assert same.id == fact.id and ended.retracted["reason"] == "no"


def test_erasing_a_fact_undoes_what_its_record_decided(mem, clock):
    old = mem.assert_fact("alice", "lives_in", "london")
    clock.us += 5
    wrong = mem.assert_fact("alice", "lives_in", "atlantis")
    mem.erase_facts([wrong.id], reason="never true")
    [back] = mem.facts("alice", include_history=True)
    assert (back.id, back.invalid_at) == (old.id, None)
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_an_idempotency_key_makes_a_retry_answer_the_first_call(mem):
    s = mem.session("s1")
    first = s.assert_fact("acme", "ceo", "carol", idempotency_key="k1")
    size = mem.writer.size
    again = s.assert_fact("acme", "ceo", "carol", idempotency_key="k1")
    assert again == first and mem.writer.size == size
    ended = mem.retract_fact(first.id, reason="left", idempotency_key="k2")
    assert mem.retract_fact(first.id, reason="left", idempotency_key="k2") == ended
    assert mem.writer.size == size + 1
    with pytest.raises(IdempotencyConflict):  # the key of an assertion, for a retraction
        mem.retract_fact(first.id, idempotency_key="k1")
    assert mem.writer.size == size + 1


def test_an_extractor_that_fails_appends_nothing_and_one_that_finds_nothing_traces_its_read(mem):
    s = mem.session("s1")
    item = s.add("messages", "small talk", role="user")
    size = mem.writer.size

    def broken(text):
        raise RuntimeError("model unavailable")

    with pytest.raises(RuntimeError):
        s.extract_facts([item.id], extract=broken)
    assert mem.writer.size == size
    assert s.extract_facts([item.id], extract=lambda text: []) == []
    [read] = [r for r in records_of(mem, "items.read") if r.payload["purpose"] == "facts.extract"]
    assert read.payload["items"] == {"messages": [item.id]}
    assert mem.facts(include_history=True) == []


def test_concurrent_assertions_of_one_subject_form_one_chain(tmp_path):
    """Threads asserting new values at once (real clock): each is decided under the lock
    against the others' records, so history is one chain with exactly one fact valid now."""
    with Memory.open(tmp_path / "data") as mem:
        assert run_threads(lambda n: mem.assert_fact("job", "state", f"step{n}"), 8) == []
        history = mem.facts("job", "state", include_history=True)
        assert len(history) == 8 and len(mem.facts("job", "state")) == 1
        chain = sorted(history, key=lambda f: (f.valid_at, f.seq))  # start, then log order
        for before, after in itertools.pairwise(chain):
            assert before.invalid_at == after.valid_at
        assert chain[-1].invalid_at is None
        assert mem.rebuild().state_hash() == mem.state_hash()
