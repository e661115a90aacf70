"""Issue 28, item 6: the conversation part of a context has no holes.

The conversation is trimmed from its oldest end: units are taken newest first up to the first
that does not fit; when older ones were left out, the kept part does not open with a reply whose
user turn is gone; a tool call is never split from its results; the record's `tokens` is what
the rendered messages count, within the budget (sections/model/render.py `_conversation`).
"""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.file_sink import Durability
from sections.model import render, tool_calls
from sections.model.config import MemoryConfig, SectionConfig
from sections.model.item import Item, units_of
from sections.model.tokens import APPROX
from sections.runtime.memory import Memory
from tests.test_memory_semantics import pairing_holds, rendered


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "d", seg_bits=8, counter="approx-chars-per-4")
    yield memory
    memory.close()


def _call(id_: str) -> list[dict]:
    return [{"id": id_, "type": "function", "function": {"name": "fin", "arguments": "{}"}}]


def test_paris_is_not_kept_without_its_question(mem):
    s = mem.session("s")
    question = "What is the capital of France? It is for the pub quiz tonight: one word, thanks!"
    question += " (Spelled the way the French spell it.)"
    s.add("messages", question, role="user")
    s.add("messages", "Paris.", role="assistant")
    s.add("messages", "And of Spain?", role="user")
    s.add("messages", "Madrid.", role="assistant")
    everything = s.context(4000, sections=["messages"])
    newest_three = rendered(everything[1:])
    assert rendered(everything) > 60 >= newest_three  # the question does not fit, "Paris." does
    record, messages = s.assemble(60, sections=["messages"])
    assert [m["content"] for m in messages] == ["And of Spain?", "Madrid."]
    assert record.payload["renderer"] == render.RENDERER == "ledgermem.render/3"
    assert record.payload["tokens"] == rendered(messages)
    assert mem.context_at(record.seq) == messages
    assert s.context(newest_three - 1, sections=["messages"]) == everything[2:]


def test_a_unit_that_does_not_fit_ends_the_conversation_part_no_older_one_after_it(mem):
    s = mem.session("s")
    s.add("messages", "hi", role="user")
    s.add_many("messages", [{"content": "", "role": "assistant", "tool_calls": _call("c1")},
                            {"content": "r" * 400, "role": "tool", "tool_call_id": "c1"}])  # fmt: skip
    s.add("messages", "thanks", role="user")
    s.add("messages", "you are welcome", role="assistant")
    messages = s.context(60, sections=["messages"])
    # Before: "hi" went in too, skipping the call and its result in the middle.
    assert [m["content"] for m in messages] == ["thanks", "you are welcome"]
    assert pairing_holds(messages)


def test_a_whole_conversation_that_fits_may_open_with_a_reply(mem):
    s = mem.session("s")
    s.add("messages", "Hello, how can I help?", role="assistant")
    s.add("messages", "hi", role="user")
    assert [m["role"] for m in s.context(4000, sections=["messages"])] == ["assistant", "user"]


def test_system_messages_in_the_conversation_are_trimmed_like_the_others(mem):
    s = mem.session("s")
    s.add("messages", "S" * 200, role="system")
    s.add("messages", "q", role="user")
    s.add("messages", "note: be brief", role="system")
    s.add("messages", "a", role="assistant")
    everything = s.context(4000, sections=["messages"])
    assert s.context(rendered(everything[1:]), sections=["messages"]) == everything[1:]
    # a system message is no reply: the kept part may open with one
    assert s.context(rendered(everything[2:]), sections=["messages"]) == everything[2:]


# ---- the property -----------------------------------------------------------------------------

_unit = st.one_of(
    st.tuples(st.just("user"), st.integers(0, 60)),
    st.tuples(st.just("assistant"), st.integers(0, 60)),
    st.tuples(st.just("system"), st.integers(0, 30)),
    st.tuples(st.just("call"), st.integers(1, 3), st.integers(0, 60)),
    st.tuples(st.just("pending"), st.integers(1, 2), st.integers(0, 20)),  # a result missing
    st.tuples(st.just("orphan"), st.integers(0, 20)),  # a result nobody asked for
)


def _items(unit: tuple, n: int) -> list[dict]:
    kind = unit[0]
    if kind in ("user", "assistant", "system"):
        return [{"content": kind[0] * unit[1], "role": kind}]
    if kind == "orphan":
        return [{"content": "o" * unit[1], "role": "tool", "tool_call_id": f"nobody{n}"}]
    ids = [f"c{n}.{i}" for i in range(unit[1])]
    calls = [c for id_ in ids for c in _call(id_)]
    answered = ids if kind == "call" else ids[1:]
    return [{"content": "", "role": "assistant", "tool_calls": calls}] + [
        {"content": "r" * unit[2], "role": "tool", "tool_call_id": id_} for id_ in answered
    ]


def _expected(eligible: list[list[Item]], budget: int, cost) -> list[list[Item]]:
    """The rule, stated plainly: the longest newest run that fits, then no opening reply when
    anything older was left out."""
    kept, spent = [], 0
    for unit in eligible:
        spent += cost(unit)
        if spent > budget:
            break
        kept.append(unit)
    if len(kept) < len(eligible):
        while kept and kept[-1][0].role in ("assistant", "tool"):
            kept.pop()
    return kept


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(units=st.lists(_unit, min_size=1, max_size=12), assembled=st.integers(1, 5))
def test_property_the_conversation_part_is_a_newest_run_without_holes(units, assembled):
    root = tempfile.mkdtemp()
    try:
        config = MemoryConfig(sections=(SectionConfig("messages", None, "fifo", "durable"),))
        mem = Memory.open(root + "/d", config=config, durability=Durability.UNSAFE_NO_FSYNC,
                          counter="approx-chars-per-4")  # fmt: skip
        s = mem.session("s")
        for n, unit in enumerate(units):
            s.add_many("messages", _items(unit, n))
        session = mem.read(lambda state: state.sessions[("default", "s")])
        section = session.sections["messages"]
        content_of = lambda item: item.content  # noqa: E731  (small contents: all in state)
        message_of = lambda item: render.chat_message(item, item.content)  # noqa: E731

        def cost(unit: list[Item]) -> int:
            return sum(APPROX.count(message_of(m)) for m in unit)

        eligible = [u for u in units_of(section.items.values()).values() if tool_calls.whole(u)]
        eligible.sort(key=lambda u: u[0].order, reverse=True)
        everything = sum(cost(u) for u in eligible)
        for budget in range(1, everything + 3):
            chosen, spent = render.choose(session, ["messages"], budget, content_of, APPROX)
            kept = chosen[0][1] if chosen else []
            want = _expected(eligible, budget, cost)
            assert [i.id for i in kept] == sorted(
                (m.id for u in want for m in u), key=lambda id_: tuple(map(int, id_.split(".")))
            )
            messages = render.render(chosen, content_of)
            assert pairing_holds(messages)
            if len(want) < len(eligible) and messages:
                assert messages[0]["role"] not in ("assistant", "tool")
            assert render.tokens_of(messages, APPROX) == spent <= budget
        for budget in range(1, everything + 3, max(1, everything // assembled)):
            record, messages = s.assemble(budget, sections=["messages"])
            assert record.payload["tokens"] == rendered(messages) <= budget
            assert mem.context_at(record.seq) == messages
        mem.close()
    finally:
        shutil.rmtree(root)
