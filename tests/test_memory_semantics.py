"""Issue 13, items 12, 13, 15 and 16: memory semantics that broke agents.

12: a batch groups tool results with their call exactly as single adds do, and context never
    holds a tool result without its call nor a call without all of its results.
13: under the priority policy the incoming item competes; ranked lowest, it is not admitted.
15: the context budget bounds the rendered messages; the conversation is paid for before the
    other sections, documents come in only when named, and an item too large is skipped.
16: an ended session refuses writes (`SessionEnded`); the reserved `_tenant` session is never
    listed.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.file_sink import Durability
from sections.errors import ItemTooLarge, NotAdmitted, SessionEnded
from sections.model import commands
from sections.model.config import MemoryConfig, SectionConfig
from sections.model.tokens import APPROX
from sections.runtime.memory import Memory


@pytest.fixture
def mem(tmp_path):
    # the budgets below are worked out at four characters a token
    memory = Memory.open(tmp_path / "d", seg_bits=8, counter="approx-chars-per-4")
    yield memory
    memory.close()


def rendered(messages: list[dict]) -> int:
    return sum(APPROX.count(m) for m in messages)  # the counter of `mem`


def pairing_holds(messages: list[dict]) -> bool:
    """OpenAI's rule: each tool result follows the assistant message that issued its call, and
    every call of an assistant message is answered before the next non-tool message."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_calls:
                return False
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            return False
        open_calls = {c["id"] for c in message.get("tool_calls", ())}
    return not open_calls


def _call(id_: str) -> list[dict]:
    return [{"id": id_, "type": "function", "function": {"name": "fin", "arguments": "{}"}}]


# ---- item 12 ----------------------------------------------------------------------------------


def test_a_batch_groups_tool_results_with_their_call_as_single_adds_do(mem):
    s = mem.session("s")
    s.add("messages", "what is the margin?", role="user")
    views = s.add_many(
        "messages",
        [
            {"content": "", "role": "assistant", "tool_calls": _call("call_1")},
            {"content": "40%" * 30, "role": "tool", "tool_call_id": "call_1"},
        ],
    )
    assert [v.group for v in views] == ["call:call_1", "call:call_1"]
    for budget in range(1, 80):
        messages = s.context(budget=budget, sections=["messages"])
        roles = [m["role"] for m in messages]
        assert ("assistant" in roles) == ("tool" in roles), (budget, roles)
    single = mem.session("single")
    asked = single.add("messages", "", role="assistant", tool_calls=_call("call_1"))
    answer = single.add("messages", "40%" * 30, role="tool", tool_call_id="call_1")
    assert [asked.group, answer.group] == [v.group for v in views]


def test_a_call_without_all_its_results_and_an_orphan_result_stay_out_of_context(mem):
    s = mem.session("s")
    s.add("messages", "hi", role="user")
    two = _call("a") + _call("b")
    s.add_many("messages", [{"content": "", "role": "assistant", "tool_calls": two},
                            {"content": "A", "role": "tool", "tool_call_id": "a"}])  # fmt: skip
    s.add("messages", "nobody asked", role="tool", tool_call_id="zzz")
    assert s.context(4000, sections=["messages"]) == [{"role": "user", "content": "hi"}]
    s.add("messages", "B", role="tool", tool_call_id="b")
    messages = s.context(4000, sections=["messages"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert pairing_holds(messages)


_turn = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 60)),
    st.tuples(st.just("call"), st.integers(1, 3), st.integers(1, 60)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    batches=st.lists(st.lists(_turn, min_size=1, max_size=4), min_size=1, max_size=6),
    split=st.lists(st.booleans(), min_size=6, max_size=6),
    budgets=st.lists(st.integers(1, 400), min_size=1, max_size=5),
)
def test_property_context_never_splits_a_call_from_its_results(batches, split, budgets):
    root = tempfile.mkdtemp()
    try:
        config = MemoryConfig(sections=(SectionConfig("messages", 300, "fifo", "durable"),))
        mem = Memory.open(
            root + "/d",
            config=config,
            durability=Durability.UNSAFE_NO_FSYNC,
            counter="approx-chars-per-4",
        )
        s = mem.session("s")
        n = 0
        for b, batch in enumerate(batches):
            items: list[dict] = []
            for turn in batch:
                if turn[0] == "user":
                    items.append({"content": "u" * turn[1], "role": "user"})
                    continue
                ids = [f"c{n}.{i}" for i in range(turn[1])]
                n += 1
                calls = [c for id_ in ids for c in _call(id_)]
                items.append({"content": "", "role": "assistant", "tool_calls": calls})
                items.extend(
                    {"content": "r" * turn[2], "role": "tool", "tool_call_id": id_} for id_ in ids
                )
            try:
                if split[b]:  # the same items one by one
                    for item in items:
                        s.add_many("messages", [item])
                else:
                    s.add_many("messages", items)
            except ItemTooLarge:  # a group larger than the section: refused, nothing appended
                continue
        for budget in budgets:
            record, messages = s.assemble(budget, sections=["messages"])
            assert pairing_holds(messages), messages
            assert rendered(messages) <= budget
            assert record.payload["tokens"] == rendered(messages)
            assert mem.context_at(record.seq) == messages
        mem.close()
    finally:
        shutil.rmtree(root)


# ---- item 13 ----------------------------------------------------------------------------------


def _full_findings(mem):
    s = mem.session("s", sections={"findings": {"budget_tokens": 3}})
    for priority in (5, 1, 3):
        s.add("findings", "f", priority=priority)
    return s


def test_an_incoming_item_that_ranks_lowest_is_not_admitted(mem):
    s = _full_findings(mem)
    head = mem.writer.next_seq
    with pytest.raises(NotAdmitted, match="not admitted"):
        s.add("findings", "g", priority=0)
    assert mem.writer.next_seq == head, "a refused write appended a record"
    assert sorted(v.priority for v in s.get("findings")) == [1, 3, 5]


def test_an_incoming_item_that_outranks_the_lowest_resident_evicts_it(mem):
    s = _full_findings(mem)
    s.add("findings", "g", priority=2)
    assert sorted(v.priority for v in s.get("findings")) == [2, 3, 5]


def test_a_tie_evicts_the_older_resident_and_admits_the_newcomer(mem):
    s = _full_findings(mem)
    record = s.add("findings", "g", priority=1)
    assert sorted(v.priority for v in s.get("findings")) == [1, 3, 5]
    assert record.id in {v.id for v in s.get("findings")}


def test_a_batch_is_refused_whole_when_any_of_its_items_ranks_lowest(mem):
    s = _full_findings(mem)
    head = mem.writer.next_seq
    with pytest.raises(NotAdmitted):
        s.add_many("findings", [{"content": "a", "priority": 9}, {"content": "b"}])
    assert mem.writer.next_seq == head
    assert sorted(v.priority for v in s.get("findings")) == [1, 3, 5]


# ---- item 15 ----------------------------------------------------------------------------------


def test_fifty_small_findings_render_within_budget_60(mem):
    s = mem.session("s")
    s.add_many("findings", [{"content": f"fact {i}"} for i in range(50)])
    record, messages = s.assemble(60, sections=["findings"])
    assert messages and rendered(messages) <= 60
    assert record.payload["tokens"] == rendered(messages)


def test_documents_come_only_when_named_and_never_crowd_out_the_conversation(mem):
    s = mem.session("s")
    turns = [("user", "q" * 440), ("assistant", "a" * 200), ("user", "second question")]
    for role, text in turns:
        s.add("messages", text, role=role)
    s.add("documents", "D" * 7360)  # 1,840 tokens
    messages = s.context(2000)
    assert [m["content"] for m in messages] == [text for _, text in turns]
    asked = s.context(2000, sections=["documents", "messages"])
    assert [m["content"] for m in asked] == [
        text for _, text in turns
    ]  # the document no longer fits
    assert rendered(asked) <= 2000
    assert s.context(2100, sections=["documents", "messages"])[0]["content"].startswith(
        "## documents\n- DDD"
    )


def test_an_item_too_large_to_fit_is_skipped_not_blocking(mem):
    s = mem.session("s")
    s.add("findings", "big " * 600, priority=9)
    s.add("findings", "small fact", priority=1)
    s.add("documents", "D" * 8000)
    s.add("documents", "a short document")
    messages = s.context(100, sections=["findings", "documents"])
    assert messages == [
        {"role": "system", "content": "## findings\n- small fact"},
        {"role": "system", "content": "## documents\n- a short document"},
    ]


_SECTIONS = (
    SectionConfig("role", None, "none", "durable", mutable=False),
    SectionConfig("findings", 200, "priority", "durable"),
    SectionConfig("working", 200, "lru", "turn"),
    SectionConfig("documents", None, "none", "durable"),
    SectionConfig("messages", 300, "fifo", "durable"),
)
_item = st.tuples(
    st.sampled_from(["findings", "working", "documents", "messages"]),
    st.text(alphabet='ab "\\\n\u00e9\u2028', min_size=1, max_size=120),
    st.integers(0, 5),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    items=st.lists(_item, max_size=30),
    budgets=st.lists(st.integers(1, 600), min_size=1, max_size=4),
    named=st.booleans(),
)
def test_property_rendered_tokens_never_exceed_the_budget(items, budgets, named):
    root = tempfile.mkdtemp()
    try:
        config = MemoryConfig(sections=_SECTIONS, seed_items={"role": [{"content": "Be brief."}]})
        mem = Memory.open(
            root + "/d",
            config=config,
            durability=Durability.UNSAFE_NO_FSYNC,
            counter="approx-chars-per-4",
        )
        s = mem.session("s")
        for section, text, priority in items:
            fields = {"role": "user"} if section == "messages" else {"priority": priority}
            with contextlib.suppress(NotAdmitted):
                s.add(section, text, **fields)
        for budget in budgets:
            names = ["role", "findings", "working", "documents", "messages"] if named else None
            record, messages = s.assemble(budget, names)
            assert rendered(messages) <= budget
            assert record.payload["tokens"] == rendered(messages)
            assert pairing_holds(messages)
            assert mem.context_at(record.seq) == messages
            if not named:
                assert not any(m["content"].startswith("## documents") for m in messages)
        mem.close()
    finally:
        shutil.rmtree(root)


# ---- item 16 ----------------------------------------------------------------------------------


def test_writes_after_end_are_refused_with_nothing_appended(mem):
    s = mem.session("s")
    item = s.add("findings", "fact")
    ended = s.end(idempotency_key="end-1")
    head = mem.writer.next_seq
    writes = [
        lambda: s.add("messages", "after end", role="user"),
        lambda: s.add_many("findings", [{"content": "x"}]),
        lambda: s.update("findings", item.id, content="changed"),
        lambda: s.remove("findings", item.id),
        lambda: s.configure("findings", budget_tokens=10),
        lambda: s.commit(),
        lambda: s.end_turn(),
        lambda: s.end(),
        lambda: s.observe("learning", "t", "lesson"),
    ]
    for write in writes:
        with pytest.raises(SessionEnded, match="ended at seq"):
            write()
    assert mem.writer.next_seq == head, "a refused write appended a record"
    again = s.end(idempotency_key="end-1")  # a retry of the first end is answered, not refused
    assert (again.seq, again.h) == (ended.seq, ended.h)
    assert [v.content for v in s.get("findings")] == ["fact"]  # reads still work
    s.context(100)
    s.erase(item.id, reason="gdpr")  # erasure still works
    s.delete()
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_a_log_with_writes_after_end_replays_as_before(tmp_path):
    # Logs written before the rule may hold writes after `session.ended`: they replay as written.
    mem = Memory.open(tmp_path / "d")
    s = mem.session("s")
    s.end()
    session = lambda state: state.sessions[("default", "s")]  # noqa: E731
    mem.append(
        lambda state: commands.Decision(
            (commands.Command("default", "s", "findings", "item.added",
                              {"prev_seq": session(state).last_seq,
                               "items": [{"content": "late", "tokens": 1}]}),)
        )
    )  # fmt: skip
    live = mem.state_hash()
    mem.close()
    mem = Memory.open(tmp_path / "d")
    assert mem.state_hash() == live
    assert [v.content for v in mem.session("s", create=False).get("findings")] == ["late"]
    mem.close()


def test_the_reserved_tenant_session_is_never_listed(mem):
    mem.session("s")
    mem.observe("learning", "t", "lesson")
    assert [s["session"] for s in mem.list_sessions()] == ["s"]
    assert mem.session("_tenant", create=False).info()["session"] == "_tenant"  # by name
