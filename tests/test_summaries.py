"""Session summaries on end, and context injection of observations and summaries."""

from __future__ import annotations

import pytest
from helpers.crashlog import files_containing
from test_search import Clock

from sections.retrieval.summaries import TEXT_CHARS
from sections.runtime.memory import Memory


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", seg_bits=6, clock=Clock())
    yield memory
    memory.close()


def _conversation(s, first: str = "How do I rotate the signing key?") -> None:
    s.add("messages", first, role="user")
    s.add("messages", "Use ledgermem vkey after the rotation.", role="assistant")
    s.add("findings", "key rotation is manual", tags=["ops"])
    s.add_many(
        "messages",
        [{"content": "Thanks, and the backups?", "role": "user"},
         {"content": "Run ledgermem backup.", "role": "assistant"}],
    )  # fmt: skip


def test_ending_a_session_appends_its_summary(mem):
    s = mem.session("s1")
    _conversation(s)
    ended = s.end()
    summary_record = mem.reader.get(ended.seq + 1)
    assert summary_record.type == "session.summarized" and summary_record.session == "s1"
    summary = summary_record.payload["summary"]
    assert summary == {
        "ended_seq": ended.seq,
        "messages": 4,
        "first_user": {"id": str(ended.seq - 4), "text": "How do I rotate the signing key?"},
        "last_user": {"id": str(ended.seq - 1), "text": "Thanks, and the backups?"},
        "sections": ["findings", "messages"],
    }
    assert s.summary() == {"session": "s1", "seq": summary_record.seq, **summary}
    assert mem.summaries() == [s.summary()]


def test_summaries_are_deterministic_and_truncate(tmp_path):
    long = "word " * 100
    payloads = []
    for name in ("a", "b"):
        mem = Memory.open(tmp_path / name, clock=Clock())
        s = mem.session("s")
        _conversation(s, first=long)
        seq = s.end().seq + 1
        payloads.append(mem.reader.get(seq).payload)
        mem.close()
    assert payloads[0] == payloads[1]
    text = payloads[0]["summary"]["first_user"]["text"]
    assert len(text) == TEXT_CHARS and text.endswith("…") and long.startswith(text[:-1])


def test_a_summary_lost_to_a_crash_is_appended_on_open(tmp_path):
    from sections.model import commands

    mem = Memory.open(tmp_path / "d")
    s = mem.session("s")
    _conversation(s)
    # The end record alone, as if the process died before the summary was appended.
    end = mem.append(
        lambda state: commands.Decision((commands.end_session(state.sessions[("default", "s")]),))
    )
    mem.close()
    mem = Memory.open(tmp_path / "d")
    assert mem.session("s", create=False).summary()["ended_seq"] == end.seq
    records = [r for r in mem.reader.records() if r.type == "session.summarized"]
    assert len(records) == 1
    mem.close()
    mem = Memory.open(tmp_path / "d")  # and not again on the next open
    assert len([r for r in mem.reader.records() if r.type == "session.summarized"]) == 1
    mem.close()


def test_erasing_a_quoted_message_erases_it_from_the_summary(tmp_path):
    mem = Memory.open(tmp_path / "d", seg_bits=6)
    s = mem.session("s")
    secret = s.add("messages", "my passport number is X123-SECRET", role="user")
    s.add("messages", "noted", role="assistant")
    s.end()
    assert s.summary()["first_user"]["text"].startswith("my passport")
    s.erase(secret.id, reason="gdpr")
    assert s.summary()["first_user"] == {"id": secret.id, "text": None}
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()
    assert files_containing(tmp_path / "d", b"X123-SECRET") == []


def test_context_injects_observations_by_query_with_backfill_and_truncation(mem):
    s = mem.session("s")
    s.add("messages", "What database should we use?", role="user")
    relevant = mem.observe("decision", "Database", "PostgreSQL for the ledger index, chosen in May")
    s.observe("discovery", "Latency", "fsync dominates write latency on this disk")
    newest = mem.observe("preference", "Tone", "answer briefly " + "x" * 400)
    messages = s.context(
        4000, query="which database for the ledger?", observations=2, observation_chars=30
    )
    injected = messages[0]["content"].splitlines()
    assert injected[0] == "## observations"
    # The search hit first, then the newest other observation as backfill, each truncated.
    assert injected[1] == "- [decision] Database: PostgreSQL for the ledger ind…"
    assert injected[2] == "- [preference] Tone: answer briefly xxxxxxxxxxxxxx…"
    assert messages[-1] == {"role": "user", "content": "What database should we use?"}
    record, again = s.assemble(4000, query="which database for the ledger?", observations=2,
                               observation_chars=30)  # fmt: skip
    assert again == messages
    assert [e["id"] for e in record.payload["manifest"] if e.get("inject")] == [
        relevant.id,
        newest.id,
    ]
    assert mem.context_at(record.seq) == again


def test_context_without_a_query_backfills_by_recency(mem):
    s = mem.session("s")
    for i in range(4):
        mem.observe("learning", f"t{i}", f"lesson {i}")
    messages = s.context(4000, observations=3)
    assert messages[0]["content"].splitlines()[1:] == [
        "- [learning] t3: lesson 3", "- [learning] t2: lesson 2", "- [learning] t1: lesson 1",
    ]  # fmt: skip


def test_context_includes_recent_summaries_on_request(mem):
    for name in ("old", "mid", "new"):
        s = mem.session(name)
        _conversation(s, first=f"question from {name}")
        s.end()
    current = mem.session("current")
    current.add("messages", "hello", role="user")
    record, messages = current.assemble(4000, summaries=2)
    block = messages[0]["content"].splitlines()
    assert block[0] == "## recent sessions"
    assert block[1].startswith(
        '- new: 4 messages; sections findings, messages; first user message: "question from new"'
    )
    assert block[2].startswith("- mid: ")
    assert len(block) == 3
    assert mem.context_at(record.seq) == messages
    assert current.context(4000) == [{"role": "user", "content": "hello"}]  # not by default


def test_injection_counts_against_the_budget(mem):
    s = mem.session("s")
    s.add("messages", "hi " * 50, role="user")
    mem.observe("learning", "t", "a long lesson " * 20)
    # Budget 100, not 80 (issue 13 item 15): the budget now bounds the rendered messages, and
    # the observation's block renders to 86 tokens, more than 80 holds.
    record, messages = s.assemble(100, observations=1)
    assert record.payload["tokens"] <= 100
    tokens = {e.get("inject", "item"): e["tokens"] for e in record.payload["manifest"]}
    assert "observation" in tokens and sum(tokens.values()) <= 100


def test_the_tenant_session_is_never_among_recent_summaries(mem):
    mem.observe("learning", "t", "lesson")
    mem.session("_tenant", create=False).end()
    other = mem.session("other")
    other.add("messages", "hi", role="user")
    other.end()
    messages = mem.session("s").context(4000, summaries=5)
    assert messages[0]["content"].splitlines()[1:] == [
        '- other: 1 messages; sections messages; first user message: "hi"; last: "hi"'
    ]
