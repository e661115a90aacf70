"""Recall: `context(budget, query=...)` brings the user's relevant past into the context
(sections/retrieval/recall.py, docs/recall.md). Each test states one property on a real memory
in a temporary data directory."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.errors import InvalidInput
from sections.model.config import MemoryConfig
from sections.model.render import tokens_of
from sections.model.tokens import counter_named
from sections.retrieval import semantic
from sections.runtime.memory import Memory

PAST = [
    ("Caroline", "I went to a support group yesterday and it was so powerful."),
    ("Melanie", "That's great! What happened there?"),
    ("Caroline", "People shared their stories about adoption agencies they researched."),
    ("Melanie", "I painted a lake sunrise last year, it's special to me."),
    ("Caroline", "My grandmother gave me a necklace from Sweden when I was ten."),
    ("Melanie", "We took the kids camping at the beach in July."),
]


def remember(mem: Memory, session: str, user: str | None, turns=PAST, date: str | None = None):
    metadata: dict = {} if user is None else {"user_id": user}
    if date is not None:
        metadata["date"] = date
    s = mem.session(session, metadata=metadata)
    return [s.add("messages", text, role="user", name=who).id for who, text in turns]


def recalled(record) -> list[dict]:
    return [e for e in record.payload["manifest"] if e.get("inject") == "recall"]


def exact(mem: Memory, record, messages) -> None:
    """The record's tokens are what the messages cost, and within the budget."""
    counted = tokens_of(messages, counter_named("o200k_base"))
    assert record.payload["tokens"] == counted <= record.payload["budget"]


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data")
    yield memory
    memory.close()


def test_an_earlier_session_of_the_same_user_is_recalled_with_who_and_when(mem):
    ids = remember(mem, "past", "u1", date="1:56 pm on 8 May, 2023")
    now = mem.session("now", metadata={"user_id": "u1"})
    record, messages = now.assemble(2000, query="Where is Caroline's necklace from?")
    entries = recalled(record)
    assert ids[4] in [e["id"] for e in entries]
    top = next(e for e in entries if e["id"] == ids[4])
    assert top["session"] == "past" and top["rank"] >= 1 and top["signals"]["bm25"] > 0
    text = messages[0]["content"]
    assert "### past · 1:56 pm on 8 May, 2023" in text
    assert "Caroline: My grandmother gave me a necklace from Sweden when I was ten." in text
    assert record.payload["recall"]["query"] == "Where is Caroline's necklace from?"
    exact(mem, record, messages)


def test_recall_never_crosses_users_unless_the_tenant_says_so(tmp_path):
    secret = [("Ann", "my locker code is zebra-4471 and nobody else knows it")]
    for config, crosses in (
        (MemoryConfig(), False),
        (MemoryConfig(recall_across_users=True), True),
    ):
        mem = Memory.open(tmp_path / str(crosses), config=config)
        try:
            remember(mem, "ann-1", "ann", secret)
            remember(mem, "bob-1", "bob")
            remember(mem, "nobody-1", None, [("X", "the zebra locker is by the door")])
            for asker, user in (("bob-2", "bob"), ("anon-2", None)):
                s = mem.session(asker, metadata={"user_id": user} if user else {})
                record, messages = s.assemble(4000, query="what is the zebra locker code")
                sessions = {e["session"] for e in recalled(record)}
                leaked = "zebra-4471" in orjson.dumps(messages).decode()
                assert leaked == crosses and ("ann-1" in sessions) == crosses
                hits = mem.search("zebra locker code", scope="user", session=asker)
                assert "ann-1" not in {h.session for h in hits}  # the user scope never crosses
            own = mem.session("ann-2", metadata={"user_id": "ann"})
            record, messages = own.assemble(4000, query="what is the zebra locker code")
            assert "zebra-4471" in orjson.dumps(messages).decode()
            assert ("nobody-1" in {e["session"] for e in recalled(record)}) == crosses
        finally:
            mem.close()


def test_recall_never_crosses_tenants(mem):
    remember(mem, "t1-past", "u1", [("Ann", "the vault combination is walrus-9")])
    other = mem.session("t2-now", tenant="other", metadata={"user_id": "u1"})
    record, messages = other.assemble(4000, query="vault combination")
    assert recalled(record) == [] and "walrus" not in orjson.dumps(messages).decode()
    assert mem.search("vault combination", tenant="other", scope="tenant") == []


def test_an_erased_item_or_session_is_never_recalled(mem):
    ids = remember(mem, "past", "u1")
    remember(mem, "older", "u1", [("Ann", "a second necklace story from Sweden")])
    mem.session("past", create=False).erase([ids[4]], reason="asked to forget")
    now = mem.session("now", metadata={"user_id": "u1"})
    record, messages = now.assemble(4000, query="necklace from Sweden")
    assert ids[4] not in [e["id"] for e in recalled(record)]
    assert "grandmother" not in orjson.dumps(messages).decode()
    mem.session("older", create=False).erase_all(reason="asked to forget")
    record, messages = now.assemble(4000, query="necklace from Sweden")
    assert "older" not in {e["session"] for e in recalled(record)}
    assert "second necklace" not in orjson.dumps(messages).decode()
    hits = mem.search("necklace Sweden", scope="user", session="now")
    assert ids[4] not in [h.item.id for h in hits] and "older" not in {h.session for h in hits}


def test_nothing_is_recalled_twice(mem):
    s = mem.session("long", metadata={"user_id": "u1"})
    ids = [s.add("messages", f"turn {i} about the garden and roses", role="user").id
           for i in range(40)]  # fmt: skip
    record, messages = s.assemble(300, query="garden roses")
    conversation = [e["id"] for e in record.payload["manifest"] if "inject" not in e]
    again = [e["id"] for e in recalled(record)]
    assert conversation and again  # the session's own older turns are its past too
    assert not set(conversation) & set(again)
    assert set(again) <= set(ids[: min(map(ids.index, conversation))])
    exact(mem, record, messages)


def test_a_tool_call_is_recalled_with_its_results(mem):
    s = mem.session("past", metadata={"user_id": "u1"})
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    s.add_many("messages", [
        {"content": "", "role": "assistant", "tool_calls": [call], "group": "g1"},
        {"content": "sunny over the fjords of Bergen", "role": "tool", "tool_call_id": "c1",
         "group": "g1"},
    ])  # fmt: skip
    record, messages = mem.session("now", metadata={"user_id": "u1"}).assemble(
        2000, query="weather in Bergen fjords"
    )
    entries = recalled(record)
    assert len(entries) == 2 and {e["rank"] for e in entries} == {1}
    assert "(calls weather)" in messages[0]["content"]


def test_recall_is_off_or_sized_by_its_parameter(mem):
    remember(mem, "past", "u1")
    now = mem.session("now", metadata={"user_id": "u1"})
    for _ in range(30):
        now.add("messages", "more chatter about the weather and the trains today", role="user")
    record, _ = now.assemble(2000, query="necklace Sweden", recall=False)
    assert recalled(record) == [] and "recall" not in record.payload
    record, _ = now.assemble(2000)  # no query, no recall
    assert recalled(record) == []
    small, _ = now.assemble(400, query="necklace Sweden", recall=0.1)
    large, _ = now.assemble(400, query="necklace Sweden", recall=0.9)
    assert sum(e["tokens"] for e in recalled(small)) <= 40
    assert len(recalled(large)) > len(recalled(small))
    assert large.payload["recall"]["share"] == 0.9
    for bad in (1.5, -0.1, "half", [0.2]):
        with pytest.raises(InvalidInput, match="recall share"):
            now.assemble(400, query="necklace", recall=bad)


def test_context_at_renders_the_recalled_context_byte_for_byte(tmp_path):
    mem = Memory.open(tmp_path / "data")
    try:
        remember(mem, "past", "u1")
        now = mem.session("now", metadata={"user_id": "u1"})
        now.add("messages", "hello again", role="user")
        record, messages = now.assemble(2000, query="adoption agencies research")
        assert recalled(record)
        assert orjson.dumps(mem.context_at(record.seq)) == orjson.dumps(messages)
    finally:
        mem.close()
    reopened = Memory.open(tmp_path / "data")
    try:
        assert orjson.dumps(reopened.context_at(record.seq)) == orjson.dumps(messages)
    finally:
        reopened.close()


def test_rebuilt_retrieval_state_recalls_as_the_live_one(tmp_path):
    """The same queries recall the same items, ranks and scores after a reopen (index from the
    snapshot) and after one without snapshots (index built from the state)."""
    queries = ["necklace Sweden", "support group", "camping beach kids", "painting sunrise"]

    def recall_of(mem: Memory) -> list:
        s = mem.session("ask", metadata={"user_id": "u1"})
        return [[(e["session"], e["id"], e.get("score")) for e in recalled(s.assemble(3000, query=q)[0])]
                for q in queries]  # fmt: skip

    mem = Memory.open(tmp_path / "data")
    try:
        for n in range(4):
            remember(mem, f"past-{n}", "u1", PAST[n:] + PAST[:n])
        mem.session("past-1", create=False).erase([mem.session("past-1", create=False)
                                                   .get("messages")[0].id], reason="x")  # fmt: skip
        live = recall_of(mem)
    finally:
        mem.close()
    reopened = Memory.open(tmp_path / "data")
    try:
        assert recall_of(reopened) == live
    finally:
        reopened.close()
    for snapshot in (tmp_path / "data").rglob("snap-*"):
        snapshot.unlink()
    rebuilt = Memory.open(tmp_path / "data")
    try:
        assert recall_of(rebuilt) == live
    finally:
        rebuilt.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(budget=st.integers(min_value=1, max_value=1500), share=st.floats(0, 1))
def test_the_budget_is_exact_with_recall(mem, budget, share):
    if not mem.list_sessions(mem.tenant):
        remember(mem, "past", "u1")
        now = mem.session("now", metadata={"user_id": "u1"})
        for i in range(12):
            now.add("messages", f"question {i} about Sweden and necklaces?", role="user")
            now.add("messages", f"answer {i}: the necklace story again", role="assistant")
    now = mem.session("now", create=False)
    record, messages = now.assemble(budget, query="necklace from Sweden", recall=share)
    exact(mem, record, messages)


def test_scoped_search_ranks_as_recall_and_says_why(mem):
    remember(mem, "past", "u1", date="8 May 2023")
    remember(mem, "bob", "u2", [("Bob", "my necklace came from Sweden too")])
    hits = mem.search("necklace from Sweden", scope="user", session="past", top_k=3)
    assert hits and {h.session for h in hits} == {"past"}
    best = hits[0]
    assert "necklace" in best.item.content and best.time == "8 May 2023"
    assert best.signals is not None and best.signals["bm25"] > 0 and "[necklace]" in best.snippet
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert best.to_json()["signals"] == best.signals
    tenant = mem.search("necklace from Sweden", scope="tenant", top_k=10)
    assert {"past", "bob"} <= {h.session for h in tenant}
    only = mem.session("bob", create=False).search("necklace", scope="session")
    assert {h.session for h in only} == {"bob"}
    with pytest.raises(InvalidInput, match="scope"):
        mem.search("necklace", scope="planet", session="past")
    with pytest.raises(InvalidInput, match="needs session"):
        mem.search("necklace", scope="user")
    with pytest.raises(InvalidInput, match="not both"):
        mem.search("necklace", scope="user", session="past", sessions=["past"])


@pytest.mark.skipif(not semantic.available(), reason="the semantic extra is not installed")
def test_the_semantic_extra_recalls_what_shares_no_word_and_never_what_was_erased(tmp_path):
    mem = Memory.open(tmp_path / "data", config=MemoryConfig(recall_semantic=True))
    try:
        ids = remember(mem, "past", "u1", [("Ann", "we adopted a little beagle puppy on Sunday"),
                                          ("Ann", "the quarterly budget review is on Friday")])  # fmt: skip
        assert mem.settle(60)
        now = mem.session("now", metadata={"user_id": "u1"})
        record, _ = now.assemble(2000, query="new dog in the family")
        entry = next(e for e in recalled(record) if e["id"] == ids[0])
        assert "semantic" in entry["signals"] and "bm25" not in entry["signals"]
        mem.session("past", create=False).erase([ids[0]], reason="forget the puppy")
        record, messages = now.assemble(2000, query="new dog in the family")
        assert ids[0] not in [e["id"] for e in recalled(record)]
        assert "beagle" not in orjson.dumps(messages).decode()
        hits = mem.search("new dog in the family", scope="user", session="now")
        assert ids[0] not in [h.item.id for h in hits]
    finally:
        mem.close()


def test_recent_session_summaries_stay_within_the_user(mem):
    for session, user, said in (("ann-old", "ann", "ann's secret plan: tulips"),
                                ("bob-old", "bob", "bob's secret plan: cacti")):  # fmt: skip
        s = mem.session(session, metadata={"user_id": user})
        s.add("messages", said, role="user")
        s.end()
    record, messages = mem.session("ann-new", metadata={"user_id": "ann"}).assemble(
        4000, summaries=5
    )
    text = orjson.dumps(messages).decode()
    assert "tulips" in text and "cacti" not in text
    assert {e["session"] for e in record.payload["manifest"] if e.get("inject") == "summary"} == {
        "ann-old"
    }


def test_scoped_search_filters_keep_the_hits_that_pass_them_whatever_their_signal(mem):
    """Section, tag and time filters apply to every ranked hit: a neighbour turn found through
    the turn beside it stays when it passes them, and goes when it does not."""
    remember(mem, "past", "u1")
    everything = mem.search("necklace Sweden", scope="user", session="past", top_k=10)
    beside = [h for h in everything if h.signals is not None and "bm25" not in h.signals]
    assert beside, "the turns beside the match are found through it"
    kept = mem.search("necklace Sweden", scope="user", session="past", top_k=10,
                      sections=["messages"])  # fmt: skip
    assert [(h.item.id, h.score) for h in kept] == [(h.item.id, h.score) for h in everything]
    assert mem.search("necklace Sweden", scope="user", session="past", sections=["notes"]) == []
    match = next(h for h in everything if h.signals and "bm25" in h.signals)
    until = match.item.to_json()["ts"] + 1
    before = mem.search("necklace Sweden", scope="user", session="past", top_k=10, until=until)
    assert {h.item.id for h in before} == {
        h.item.id for h in everything if h.item.to_json()["ts"] < until
    }
    assert any(h.signals and "bm25" not in h.signals for h in before)
