"""Compaction instead of silent loss (docs/compaction.md), on a real memory over real files.

Properties, over random agent conversations (user messages, assistant replies, tool calls with
their results, added one by one or in batches): compaction never separates a tool call from its
results; the original instruction and the protected tail survive; every compaction shrinks the
section and says so in its record; context renders the summary; live state == state rebuilt from
the log, also after reopening; `compact_for_payload_error` either makes the context fit or
refuses, appending nothing. Bad input and failing summarizers: typed errors, nothing appended.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.errors import InvalidInput
from eventstore.file_sink import Durability
from sections.errors import CannotCompact, ConfigError, Refused, SummarizerFailed
from sections.model import compaction
from sections.model.config import MemoryConfig, SectionConfig
from sections.runtime.memory import Memory

INSTRUCTION = "Analyze the quarterly sales data and report the growth."


def _config(at: int, keep: int = 1, tool_chars: int = 200, budget: int | None = None):
    settings_ = {"compact_at_tokens": at, "compact_keep_turns": keep, "compact_tool_chars": tool_chars,
                 "budget_tokens": budget}  # fmt: skip
    return MemoryConfig().with_overrides({"messages": settings_})


def _open(path: Path, config: MemoryConfig, **kw) -> Memory:
    # The thresholds and sizes below are worked out at four characters a token.
    kw.setdefault("counter", "approx-chars-per-4")
    return Memory.open(path, config=config, durability=Durability.UNSAFE_NO_FSYNC, **kw)


def _section(mem: Memory, session: str = "s"):
    return mem.read(lambda state: state.sessions[("default", session)].sections["messages"])


def _call(n: int, calls: int) -> dict:
    return {
        "content": f"step {n}: calling {calls} tools",
        "role": "assistant",
        "tool_calls": [
            {
                "id": f"c{n}.{j}",
                "type": "function",
                "function": {"name": f"tool{j}", "arguments": "{}"},
            }
            for j in range(calls)
        ],
    }


def _result(n: int, j: int, size: int) -> dict:
    text = f"result of tool{j} at step {n}\n" + "r" * size
    return {"content": text, "role": "tool", "tool_call_id": f"c{n}.{j}", "name": f"tool{j}"}


# A step: ("user", size) | ("reply", size) | ("tools", calls, result size, batched)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(1, 300)),
        st.tuples(st.just("reply"), st.integers(1, 300)),
        st.tuples(st.just("tools"), st.integers(1, 3), st.integers(0, 900), st.booleans()),
    ),
    min_size=1,
    max_size=25,
)


def _batches(plan: list[tuple]) -> list[list[dict]]:
    """The adds a conversation makes: each a list of items appended in one record."""
    adds: list[list[dict]] = [[{"content": INSTRUCTION, "role": "user"}]]
    for n, step in enumerate(plan):
        if step[0] == "user":
            adds.append([{"content": "u" * step[1], "role": "user"}])
        elif step[0] == "reply":
            adds.append([{"content": "a" * step[1], "role": "assistant"}])
        else:
            _, calls, size, batched = step
            unit = [_call(n, calls)] + [_result(n, j, size) for j in range(calls)]
            adds.extend([unit] if batched else [[item] for item in unit])
    return adds


def _calls_whole(section) -> None:
    """No tool result without its call, and no call that lost a result it had."""
    items = list(section.items.values())
    calls = {c["id"]: i for i in items for c in i.extra.get("tool_calls", ())}
    for item in items:
        answered = item.extra.get("tool_call_id")
        if answered is not None:
            assert answered in calls, f"result {item.id} lost its call {answered}"
            assert calls[answered].group == item.group


def _protected_ids(section, keep: int, incoming: list[dict]) -> set[str]:
    """The instruction, system messages and the last `keep` rounds, the incoming items counting
    as the newest, and the groups the incoming results join."""
    answered = {i.get("tool_call_id") for i in incoming}
    joined = frozenset(
        m.group for m in section.items.values()
        if any(c["id"] in answered for c in m.extra.get("tool_calls", ()))
    )  # fmt: skip
    rounds = sum(1 for i in incoming if i["role"] == "assistant")
    items = list(section.items.values())
    _, protected = compaction.partition(items, max(0, keep - rounds), joined)
    return {m.id for members in protected for m in members}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps,
    at=st.integers(150, 1500),
    keep=st.integers(1, 3),
    tool_chars=st.integers(50, 400),
    room=st.one_of(st.none(), st.integers(0, 1500)),
)
def test_compaction_keeps_calls_whole_and_the_protected_tail_and_replays(
    plan, at, keep, tool_chars, room
):
    """`room`: None for an unbounded section, else the budget is `at + room` and the policy
    (fifo) evicts what still does not fit after compaction, in the same record."""
    budget = None if room is None else at + room
    config = _config(at, keep, tool_chars, budget)
    with tempfile.TemporaryDirectory() as tmp:
        # Snapshots every few records: reopening loads summaries and cut items from one.
        mem = _open(Path(tmp) / "data", config, snapshot_every=5)
        s = mem.session("s")
        for items in _batches(plan):
            before = _section(mem)
            kept = _protected_ids(before, keep, items)
            protected = {i: before.items[i].content for i in kept}
            seq, size = mem.writer.next_seq, mem.writer.size
            try:
                s.add_many("messages", items)
            except Refused:  # larger than the whole budget, or than the groups it joins
                assert budget is not None and mem.writer.size == size
                continue
            record = mem.record_at(seq)
            after = _section(mem)
            _calls_whole(after)
            evicted = {v["id"] for v in record.payload.get("evicted", ())}
            assert not evicted or budget is not None
            for id_, content in protected.items():  # the tail and the instruction survive
                if id_ not in evicted:  # only the budget, never compaction, can take them
                    assert after.items[id_].content == content
            compacted = record.payload.get("compacted")
            if compacted is not None:
                assert compacted["tokens_after"] < compacted["tokens_before"]
                assert set(compacted.get("replaced", ())).isdisjoint(protected)
                if not evicted:
                    incoming = sum(i["tokens"] for i in record.payload["items"])
                    assert after.tokens == compacted["tokens_after"] + incoming
        if budget is None:
            first = next(iter(_section(mem).items.values()))
            assert (first.role, first.content) == ("user", INSTRUCTION)
        summaries = [i for i in _section(mem).items.values() if i.kind == compaction.SUMMARY_KIND]
        if summaries:
            rendered = [m["content"] for m in s.context(1_000_000, ["messages"])]
            assert mem.content_of(summaries[0]) in rendered
        assert mem.rebuild().state_hash() == mem.state_hash()
        live = mem.state_hash()
        mem.close()
        mem = _open(Path(tmp) / "data", config)
        assert any((Path(tmp) / "data").rglob("snap-*.json")), "no snapshot was taken"
        assert mem.state_hash() == live == mem.rebuild().state_hash()
        mem.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps, keep=st.integers(1, 3), share=st.floats(0.05, 1.2))
def test_compact_for_payload_error_fits_or_refuses_with_nothing_appended(plan, keep, share):
    with tempfile.TemporaryDirectory() as tmp:
        mem = _open(Path(tmp) / "data", _config(10**6, keep, 4000))  # never at a threshold
        s = mem.session("s")
        for items in _batches(plan):
            s.add_many("messages", items)
        before = len(orjson.dumps(s.context(100_000)))
        target = max(1, int(before * share))
        size = mem.writer.size
        try:
            outcome = s.compact_for_payload_error(target, budget=100_000)
        except CannotCompact:
            assert mem.writer.size == size
        else:
            after = len(orjson.dumps(s.context(100_000)))
            assert after <= target
            assert outcome["bytes_before"] == before and outcome["bytes_after"] == after
            assert outcome["compacted"] == (before > target)
            _calls_whole(_section(mem))
            first = next(iter(_section(mem).items.values()))
            assert (first.role, first.content) == ("user", INSTRUCTION)
        assert mem.rebuild().state_hash() == mem.state_hash()
        mem.close()


def _conversation(s, rounds: int = 8, size: int = 600) -> None:
    s.add("messages", INSTRUCTION, role="user")
    for n in range(rounds):
        s.add_many("messages", [_call(n, 1), _result(n, 0, size)])


def test_truncation_comes_first_and_alone_when_it_is_enough(tmp_path):
    mem = _open(tmp_path / "data", _config(at=400, keep=1, tool_chars=100))
    s = mem.session("s")
    s.add("messages", INSTRUCTION, role="user")
    s.add_many("messages", [_call(0, 1), _result(0, 0, 1200)])
    seq = mem.writer.next_seq
    s.add_many("messages", [_call(1, 1), _result(1, 0, 200)])
    compacted = mem.record_at(seq).payload["compacted"]
    assert "replaced" not in compacted
    (cut,) = compacted["truncated"]
    assert cut["content"].startswith("result of tool0 at step 0\n")
    assert "[truncated: " in cut["content"] and cut["cut"] > 1000
    assert _section(mem).items[cut["id"]].content == cut["content"]
    mem.close()


def test_a_runtime_summarizer_is_stored_and_never_called_again(tmp_path):
    calls = []

    def summarizer(messages, max_tokens):
        calls.append([m["role"] for m in messages])
        return "S" * 5000  # larger than what is kept in memory: read back from the log

    summarizer.name = "test-llm/1"
    config = _config(at=3000, keep=1, tool_chars=10_000)
    mem = _open(tmp_path / "data", config, summarizer=summarizer)
    s = mem.session("s")
    _conversation(s, rounds=16, size=1000)
    assert calls and all("tool" in roles for roles in calls)
    summary = next(i for i in _section(mem).items.values() if i.kind == "summary")
    assert summary.content is None  # kept in the log
    assert "S" * 5000 in [m["content"] for m in s.context(100_000, ["messages"])]
    records = [r for r in mem.reader.records() if r.has_payload and "compacted" in r.payload]
    assert records[-1].payload["compacted"]["summarizer"] == "test-llm/1"
    live = mem.state_hash()
    mem.close()

    def never(messages, max_tokens):
        raise AssertionError("replay called the summarizer")

    mem = _open(tmp_path / "data", config, summarizer=never)
    assert mem.state_hash() == live == mem.rebuild().state_hash()
    assert "S" * 5000 in [view.content for view in mem.session("s").get("messages")]
    hits = mem.search("step", sessions=["s"])  # the section was indexed anew
    assert all(h.item.id in _section(mem).items for h in hits)
    mem.close()


@pytest.mark.parametrize(
    "summarizer",
    [
        lambda messages, max_tokens: (_ for _ in ()).throw(RuntimeError("model down")),
        lambda messages, max_tokens: None,
        lambda messages, max_tokens: "   ",
        lambda messages, max_tokens: "x" * (max_tokens * 8),
    ],
    ids=["raises", "none", "blank", "too-long"],
)
def test_a_failing_summarizer_refuses_the_write_and_appends_nothing(tmp_path, summarizer):
    mem = _open(
        tmp_path / "data", _config(at=1000, keep=1, tool_chars=10_000), summarizer=summarizer
    )
    s = mem.session("s")
    s.add("messages", INSTRUCTION, role="user")
    with pytest.raises(SummarizerFailed):
        for n in range(10):
            size = mem.writer.size
            s.add_many("messages", [_call(n, 1), _result(n, 0, 1000)])
    assert mem.writer.size == size
    with pytest.raises(SummarizerFailed):
        s.compact_for_payload_error(100, budget=100_000, summarizer=summarizer)
    assert mem.writer.size == size
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_bad_input_is_refused_with_nothing_appended(tmp_path):
    mem = _open(tmp_path / "data", _config(at=10_000))
    s = mem.session("s")
    _conversation(s, rounds=2)
    size = mem.writer.size
    for target in (0, -5, "100", 1.5, None, True):
        with pytest.raises(InvalidInput):
            s.compact_for_payload_error(target)
    for bad in ({"budget": 0}, {"sections": ["nope"]}, {"section": "nope"}):
        with pytest.raises((InvalidInput, LookupError)):
            s.compact_for_payload_error(100, **bad)
    with pytest.raises(CannotCompact):  # nothing but the instruction and one round is left
        s.compact_for_payload_error(1)
    assert mem.writer.size == size
    with pytest.raises(InvalidInput):
        s.configure("messages", compact_at_tokens=0)
    with pytest.raises(InvalidInput):
        s.configure("messages", budget_tokens=20_000, compact_at_tokens=50_000)  # above it
    with pytest.raises(InvalidInput):
        s.configure("messages", compact_keep_turns="2")
    assert mem.writer.size == size
    mem.close()
    with pytest.raises(InvalidInput):
        _open(tmp_path / "data", _config(at=10_000), summarizer="digest")
    with pytest.raises(ConfigError):
        SectionConfig("messages", 100, compact_at_tokens=200)


def test_compaction_is_off_by_default_and_configurable_per_session(tmp_path):
    mem = _open(tmp_path / "data", MemoryConfig())
    s = mem.session("s")
    created = mem.record_at(1).payload["config"]["messages"]
    assert "compact_at_tokens" not in created  # records of configs without it are unchanged
    s.configure("messages", compact_at_tokens=300, compact_keep_turns=2)
    _conversation(s, rounds=6, size=400)
    assert any(i.kind == "summary" for i in _section(mem).items.values())
    assert _section(mem).evictions == 0
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_the_digest_is_deterministic_and_within_its_bound():
    messages = [{"role": "user", "content": "hello\nworld"}, _call(0, 2), _result(0, 1, 50)]
    text = compaction.digest(messages, 40)
    assert text == compaction.digest(messages, 40)
    assert text.startswith("[Summary of 3 earlier messages]")
    assert "called tool0, tool1" in text and "- tool (tool1): result of tool1" in text
    again = compaction.digest(
        [{"role": "user", "content": text}, {"role": "user", "content": "x"}], 40
    )
    assert again.startswith("[Summary of 4 earlier messages]")
    assert len(compaction.digest(messages * 50, 30)) <= 30 * 4


def test_erasing_a_summarized_message_erases_the_summary_made_from_it(tmp_path):
    config = _config(at=10**6, keep=1, tool_chars=100)
    mem = _open(tmp_path / "data", config)
    s = mem.session("s")
    _conversation(s, rounds=6, size=600)
    # A secret no hash, salt or timestamp can hold by chance (a bare "4111" once sat in a hash).
    card = "card-4111-zulu"
    secret = s.add("messages", f"my card number is {card}", role="user").id
    _conversation_round = [_call(9, 1), _result(9, 0, 600)]
    s.add_many("messages", _conversation_round)
    outcome = s.compact_for_payload_error(1500, budget=100_000)
    assert outcome["replaced"] > 0 and secret not in _section(mem).items
    summary = next(i for i in _section(mem).items.values() if i.kind == "summary")
    assert card in mem.content_of(summary)
    erased = s.erase([secret], reason="gdpr")
    assert secret in erased and summary.id in erased
    assert summary.id not in _section(mem).items
    compacted = mem.record_at(outcome["seq"])
    assert not compacted.has_payload  # the summary's text is gone from the files
    segments = (tmp_path / "data/log").glob("seg-*")
    assert all(card.encode() not in path.read_bytes() for path in segments)
    assert mem.rebuild().state_hash() == mem.state_hash()
    live = mem.state_hash()
    mem.close()
    mem = _open(tmp_path / "data", config)
    assert mem.state_hash() == live == mem.rebuild().state_hash()
    mem.close()


def test_over_http_compact_answers_the_outcome_and_refuses_bad_input_with_4xx(tmp_path):
    import httpx
    from helpers.live_api import LiveApi

    mem = _open(tmp_path / "data", _config(at=10**6, keep=1, tool_chars=100))
    s = mem.session("h")
    _conversation(s, rounds=6, size=600)
    api = LiveApi(mem).start()
    try:
        with httpx.Client(base_url=api.url + "/v1/sessions/h", timeout=30) as client:
            size = mem.writer.size
            for body in ({}, {"target_bytes": "1"}, {"target_bytes": 0}, {"target_bytes": 10, "x": 1},
                         {"target_bytes": 10, "sections": "messages"}):  # fmt: skip
                answer = client.post("/compact", json=body)
                assert answer.status_code == 400, (body, answer.text)
                assert answer.json()["error"]["code"] == "invalid_input"
            answer = client.post("/compact", json={"target_bytes": 1})
            assert (answer.status_code, answer.json()["error"]["code"]) == (422, "cannot_compact")
            assert (
                client.post("/compact", json={"target_bytes": 1, "section": "nope"}).status_code
                == 404
            )
            assert mem.writer.size == size
            answer = client.post("/compact", json={"target_bytes": 1500, "budget": 100_000})
            assert answer.status_code == 200, answer.text
            outcome = answer.json()["compaction"]
            assert outcome["compacted"] and outcome["bytes_after"] <= 1500
            assert mem.record_at(outcome["seq"]).type == "section.compacted"
    finally:
        api.stop()
        mem.close()


def test_diff_names_the_items_a_compaction_replaced(tmp_path):
    import json

    from helpers.cli import ledgermem

    with _open(tmp_path / "data", _config(at=10**6, keep=1, tool_chars=100)) as mem:
        s = mem.session("d")
        _conversation(s, rounds=4, size=600)
        before = mem.writer.size - 1
        outcome = s.compact_for_payload_error(1000, budget=100_000)
        replaced = mem.record_at(outcome["seq"]).payload["compacted"]["replaced"]
    result = ledgermem("diff", tmp_path / "data/log", "--from", before, "--to", outcome["seq"])
    report = json.loads(result.stdout)["sessions"]["default/d"]
    assert {e["id"] for e in report["removed"]} == set(replaced[1:])
    assert {e["how"] for e in report["removed"]} == {"compacted"}
    assert [u["id"] for u in report["updated"] if u["id"] == replaced[0]] == [replaced[0]]


def test_contents_over_4_kib_that_a_compaction_writes_are_measured_and_read_back(tmp_path):
    """Cut outputs and summaries larger than what is kept in memory live in the record: the
    payload-error path measures them before the record exists, and reads find them after."""

    def summarizer(messages, max_tokens):
        return "long summary " * 400  # 5200 characters

    config = _config(at=10**6, keep=1, tool_chars=6000)
    mem = _open(tmp_path / "data", config, summarizer=summarizer)
    s = mem.session("s")
    s.add("messages", INSTRUCTION, role="user")
    for n in range(8):
        s.add_many("messages", [_call(n, 1), _result(n, 0, 9000)])
    before = len(orjson.dumps(s.context(100_000)))
    outcome = s.compact_for_payload_error(before - 2000, budget=100_000)
    after = len(orjson.dumps(s.context(100_000)))
    assert outcome["bytes_after"] == after <= before - 2000
    record = mem.record_at(outcome["seq"]).payload["compacted"]
    cut = record["truncated"][0] if record["truncated"] else None
    texts = {view.id: view.content for view in s.get("messages")}
    assert texts[record["summary"]["id"]] == "long summary " * 400
    if cut is not None:
        assert texts[cut["id"]] == cut["content"] and len(cut["content"]) > 4096
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_over_http_sessions_take_compaction_settings_and_refuse_bad_ones(tmp_path):
    import httpx
    from helpers.live_api import LiveApi

    mem = _open(tmp_path / "data", MemoryConfig())
    api = LiveApi(mem).start()
    try:
        with httpx.Client(base_url=api.url + "/v1/sessions", timeout=30) as client:
            size = mem.writer.size
            for bad, status in (({"compact_at_tokens": 0}, 400), ({"compact_keep_turns": "1"}, 400),
                                ({"compact_at_tokens": 40_000}, 422),  # over the budget: conflicting
                                ({"compact_tool_chars": -1}, 400)):  # fmt: skip
                answer = client.put("/h", json={"sections": {"messages": bad}})
                assert answer.status_code == status, (bad, answer.text)
            assert mem.writer.size == size
            settings_ = {"compact_at_tokens": 300, "compact_tool_chars": 100}
            assert client.put("/h", json={"sections": {"messages": settings_}}).status_code == 201
            client.post("/h/sections/messages/items", json={"content": INSTRUCTION, "role": "user"})
            for n in range(6):
                answer = client.post("/h/sections/messages/items",
                                     json={"items": [_call(n, 1), _result(n, 0, 400)]})  # fmt: skip
                assert answer.status_code == 201, answer.text
            answer = client.put("/h/sections/messages", json={"compact_keep_turns": 0})
            assert answer.status_code == 400
        kinds = [i.kind for i in _section(mem, "h").items.values()]
        assert "summary" in kinds and _section(mem, "h").evictions == 0
    finally:
        api.stop()
        mem.close()


def test_a_session_summary_quotes_the_user_message_a_compaction_summary_replaced(tmp_path):
    mem = _open(tmp_path / "data", _config(at=600, keep=1, tool_chars=4000))
    s = mem.session("q")
    s.add("messages", INSTRUCTION, role="user")
    last = s.add("messages", "and compare it with last year", role="user").id
    for n in range(6):
        s.add_many("messages", [_call(n, 1), _result(n, 0, 400)])
    assert _section(mem, "q").items[last].kind == "summary"  # the summary took its id
    s.end()
    summary = s.summary()
    assert summary["last_user"] == {"id": last, "text": "and compare it with last year"}
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_a_runtime_summarizer_runs_outside_the_lock_so_other_sessions_write_meanwhile(tmp_path):
    """An LLM summarizer takes seconds: while it runs for one session's compaction, another
    session's writes and reads go through, and the compaction lands once it returns."""
    started, release = threading.Event(), threading.Event()
    held: list[bool] = []

    def slow(messages, max_tokens):
        held.append(mem._lock.locked())
        started.set()
        assert release.wait(30), "never released"
        return "the earlier rounds, summarized"

    mem = _open(tmp_path / "data", _config(at=3000, keep=1, tool_chars=10_000), summarizer=slow)
    s, other = mem.session("s"), mem.session("other")
    errors: list[BaseException] = []

    def talk() -> None:
        try:
            _conversation(s, rounds=16, size=1000)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    talking = threading.Thread(target=talk)
    talking.start()
    assert started.wait(30)
    before = mem.writer.size
    meanwhile = threading.Thread(
        target=other.add, args=("messages", "written while the summarizer runs"), daemon=True
    )
    meanwhile.start()
    meanwhile.join(20)
    done = not meanwhile.is_alive()
    release.set()  # whatever happened, let the summarizer return
    assert done, "another session's write waited for the summarizer"
    assert [v.content for v in other.get("messages")] == ["written while the summarizer runs"]
    assert mem.writer.size > before
    talking.join(60)
    assert not talking.is_alive() and errors == []
    assert held and not any(held)  # never called under the memory's lock
    summaries = [i for i in _section(mem).items.values() if i.kind == "summary"]
    assert [i.content for i in summaries] == ["the earlier rounds, summarized"]
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_a_runtime_summarizer_runs_outside_the_lock_in_the_async_runner(tmp_path):
    held: list[bool] = []

    def summarizer(messages, max_tokens):
        held.append(mem._lock.locked())
        return "summarized"

    mem = _open(
        tmp_path / "data", _config(at=3000, keep=1, tool_chars=10_000), summarizer=summarizer
    )
    s = mem.session("s")

    async def talk() -> None:
        await s.add_async("messages", INSTRUCTION, role="user")
        for n in range(16):
            await s.add_many_async("messages", [_call(n, 1), _result(n, 0, 1000)])

    asyncio.run(talk())
    assert held and not any(held)
    assert any(i.kind == "summary" for i in _section(mem).items.values())
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_payload_error_compaction_of_cjk_text_fits_the_session_s_own_counter(tmp_path):
    """The default digest counts with the session's counter (o200k_base here), which counts
    CJK text far above four characters a token."""
    with Memory.open(tmp_path / "d", durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("s")
        for i in range(61):
            s.add("messages", f"第{i}回の会議では、東京の天気と予算について長く話し合いました。",
                  role="user" if i % 2 == 0 else "assistant")  # fmt: skip
        before = len(orjson.dumps(s.context(100_000, ["messages"])))
        outcome = s.compact_for_payload_error(before // 2)
        assert outcome["bytes_after"] <= before // 2


def test_the_tail_starts_at_the_last_assistant_message_as_in_marsys(tmp_path):
    """The protected tail is MARSYS's assistant-round rule (docs/compaction.md, "Decisions"):
    it starts at the `keep`-th last assistant message, so the user turn just before it is
    summarized, while the original instruction and system messages stay whatever their place."""
    mem = _open(tmp_path / "data", _config(100_000))
    s = mem.session("s")
    said = [("user", INSTRUCTION), ("system", "be brief"), ("user", "old question"),
            ("assistant", "old answer"), ("user", "RECENT_MESSAGE_ONE"),
            ("assistant", "RECENT_MESSAGE_TWO"), ("tool", "late output")]  # fmt: skip
    for role, content in said:
        s.add("messages", content, role=role)
    items = list(_section(mem).items.values())
    for keep, kept in ((1, {INSTRUCTION, "be brief", "RECENT_MESSAGE_TWO", "late output"}),
                       (2, {INSTRUCTION, "be brief", "old answer", "RECENT_MESSAGE_ONE",
                            "RECENT_MESSAGE_TWO", "late output"})):  # fmt: skip
        free, protected = compaction.partition(items, keep)
        assert {m.content for u in protected for m in u} == kept
        assert {m.content for u in free for m in u} == {c for _, c in said} - kept
    mem.close()
