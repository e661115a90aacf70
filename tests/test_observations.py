"""Observations: the three dedup tiers, the window to the microsecond, clocks that step back,
concurrent writers, and the projection rebuilt from the log."""

from __future__ import annotations

import pytest
from helpers.threads import run_threads
from test_search import Clock

from eventstore.errors import InvalidInput
from sections.errors import SessionNotFound
from sections.model.names import TENANT_SESSION
from sections.retrieval.observations import DEFAULT_WINDOW_US, TYPES
from sections.runtime.memory import Memory

WINDOW = DEFAULT_WINDOW_US


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def mem(tmp_path, clock):
    memory = Memory.open(tmp_path / "data", clock=clock)
    yield memory
    memory.close()


def observations(mem: Memory, session: str = TENANT_SESSION, tenant: str = "default"):
    return mem.read(
        lambda state: list(
            state.sessions[(tenant, session)].sections["observations"].items.values()
        )
    )


def test_a_new_observation_is_inserted_tenant_wide(mem):
    out = mem.observe("decision", "Search engine", "Use SQLite FTS5", tags=["search"])
    assert (out.tier, out.session, out.revision, out.duplicates) == (
        "inserted",
        TENANT_SESSION,
        1,
        0,
    )
    [item] = observations(mem)
    assert item.id == out.id and item.kind == "decision" and item.tags == ("search",)
    assert item.metadata == {"title": "Search engine", "revision": 1, "duplicates": 0}
    assert item.content == "Use SQLite FTS5"


def test_tier1_same_topic_key_updates_in_place_and_keeps_history(mem):
    first = mem.observe("config", "Pool size", "pool=10", topic_key="db.pool")
    second = mem.observe("config", "Pool size", "pool=50", topic_key="db.pool", tags=["db"])
    third = mem.observe("bugfix", "Pool size fix", "pool=80", topic_key="db.pool")
    assert first.id == second.id == third.id
    assert [o.tier for o in (first, second, third)] == ["inserted", "revised", "revised"]
    assert third.revision == 3
    [item] = observations(mem)
    assert item.content == "pool=80" and item.kind == "bugfix"
    assert item.metadata["title"] == "Pool size fix" and item.metadata["topic_key"] == "db.pool"
    # Every revision is in the log.
    mem.writer.wait_for(mem.writer.next_seq - 1)
    writes = [
        r
        for r in mem.reader.records()
        if r.session == TENANT_SESSION and r.type.startswith("item.")
    ]
    contents = [
        r.payload["items"][0]["content"] if r.type == "item.added" else r.payload["set"]["content"]
        for r in writes
    ]
    assert contents == ["pool=10", "pool=50", "pool=80"]


def test_topic_keys_are_per_scope(mem):
    s = mem.session("s")
    tenant = mem.observe("pattern", "t", "tenant-wide text", topic_key="k")
    session = s.observe("pattern", "t", "session text", topic_key="k", scope="session")
    assert tenant.id != session.id and session.session == "s"
    assert session.tier == "inserted"
    assert [i.content for i in observations(mem, "s")] == ["session text"]


def test_tier2_same_normalized_content_within_the_window(mem, clock):
    first = mem.observe("learning", "a", "Retry  the\tRequest\n with backoff")
    clock.us += 60_000_000
    again = mem.observe("learning", "another title", "retry the request with BACKOFF ")
    assert again.tier == "duplicate" and again.id == first.id and again.duplicates == 1
    assert len(observations(mem)) == 1
    different = mem.observe("learning", "a", "retry the request without backoff")
    assert different.tier == "inserted"


def test_tier2_window_boundary_to_the_microsecond(tmp_path):
    for offset, expected in (
        (WINDOW - 1, "duplicate"),
        (WINDOW, "duplicate"),
        (WINDOW + 1, "inserted"),
    ):
        clock = Clock()
        mem = Memory.open(tmp_path / f"d{offset}", clock=clock)
        first = mem.observe("discovery", "t", "same content")
        written = mem.reader.get(int(first.id)).ts
        assert written == clock.us
        clock.us = written + offset
        second = mem.observe("discovery", "t", "same content")
        assert second.tier == expected, offset
        ts = mem.reader.get(mem.writer.next_seq - 1).ts
        assert ts - written == offset  # the record carries the time the decision used
        mem.close()


def test_the_window_is_measured_from_the_last_content_write(mem, clock):
    first = mem.observe("discovery", "t", "same content")
    clock.us += WINDOW - 10
    assert mem.observe("discovery", "t", "same content").tier == "duplicate"
    clock.us += 20  # WINDOW + 10 after the content was written: duplicates do not extend it
    assert mem.observe("discovery", "t", "same content").tier == "inserted"
    assert first.id != observations(mem)[-1].id


def test_a_clock_stepping_back_counts_as_no_time(mem, clock):
    first = mem.observe("discovery", "t", "stepped")
    clock.us -= 3_600_000_000  # an hour back
    second = mem.observe("discovery", "t", "stepped")
    assert second.tier == "duplicate" and second.id == first.id


def test_custom_window(tmp_path):
    clock = Clock()
    mem = Memory.open(tmp_path / "d", clock=clock, dedup_window_us=0)
    mem.observe("discovery", "t", "same")
    assert mem.observe("discovery", "t", "same").tier == "duplicate"  # same microsecond
    clock.us += 1
    assert mem.observe("discovery", "t", "same").tier == "inserted"
    mem.close()
    with pytest.raises(InvalidInput):
        Memory.open(tmp_path / "e", dedup_window_us=-1)


@pytest.mark.parametrize("topic_key", [None, "shared.topic"])
def test_concurrent_identical_writes_make_one_item(mem, topic_key):
    threads, n = 16, 10
    outcomes = []

    def write(_: int) -> None:
        for _ in range(n):
            outcomes.append(mem.observe("decision", "t", "the same decision", topic_key=topic_key))

    assert run_threads(write, threads) == []
    [item] = observations(mem)
    assert {o.id for o in outcomes} == {item.id}
    if topic_key is None:
        assert sorted(o.duplicates for o in outcomes) == list(range(threads * n))
        assert item.metadata["duplicates"] == threads * n - 1
    else:
        assert sorted(o.revision for o in outcomes) == list(range(1, threads * n + 1))
        assert item.metadata["revision"] == threads * n
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_any_non_blank_type_is_taken_the_suggested_ones_too(mem):
    """Types are open, as AgentOps' service takes them (its CRD lets users name any)."""
    for kind in ("opinion", "Runbook step", "t" * 50, *TYPES):
        outcome = mem.observe(kind, "t", f"a {kind} of note")
        assert outcome.tier == "inserted"
    kinds = [item.kind for item in observations(mem)]
    assert kinds == ["opinion", "Runbook step", "t" * 50, *TYPES]


def test_bad_observations_are_refused_and_append_nothing(mem):
    mem.observe("decision", "t", "c")
    start = mem.writer.next_seq
    bad = [
        (" ", "t", "c", {}),  # any type is taken but a blank one,
        ("o" * 51, "t", "c", {}),  # or one over 50 characters (AgentOps' limit)
        (7, "t", "c", {}),
        ("decision", "", "c", {}),
        ("decision", "t", "  ", {}),
        ("decision", "t", 42, {}),
        ("decision", "t", "c", {"tags": "x"}),
        ("decision", "t", "c", {"topic_key": ""}),
    ]
    for type_, title, content, options in bad:
        with pytest.raises(InvalidInput):
            mem.observe(type_, title, content, **options)
    with pytest.raises(InvalidInput):
        mem.session("s").observe("decision", "t", "c", scope="galaxy")
    with pytest.raises(InvalidInput):
        mem.create_session(TENANT_SESSION)
    assert mem.writer.next_seq == start + 1  # only the session "s"


def test_observations_are_searchable_and_rebuilt_from_the_log(tmp_path, clock):
    mem = Memory.open(tmp_path / "d", clock=clock)
    s = mem.session("s")
    a = mem.observe("architecture", "Event log", "every change is one appended record")
    b = s.observe("preference", "Style", "plain modules, comments that say why", scope="session")
    c = mem.observe(
        "architecture", "Event log", "every change is one appended, hash-chained record"
    )
    assert c.tier == "inserted"  # different content: no dedup
    hits = mem.search("appended record", sections=["observations"])
    assert {h.item.id for h in hits} == {a.id, c.id}
    assert {h.session for h in mem.search("modules comments")} == {"s"}
    assert b.id in {h.item.id for h in s.search("comments")}
    live = mem.state_hash()
    mem.close()
    again = Memory.open(tmp_path / "d", clock=clock)
    assert again.state_hash() == live
    assert again.rebuild().state_hash() == live
    again.close()


def test_concurrent_large_observations_are_never_refused(mem):
    outcomes = []

    def write(n: int) -> None:
        for i in range(10):
            outcomes.append(mem.observe("discovery", "big", f"{n}-{i} " + "x " * 3000))

    assert run_threads(write, 8) == [] and len(outcomes) == 80
    assert len(observations(mem)) == 80


def test_another_topic_is_never_a_duplicate_and_a_keyless_duplicate_takes_the_key(mem):
    keyed = mem.observe("config", "t", "same text", topic_key="a")
    other = mem.observe("config", "t", "same text", topic_key="b")
    assert other.tier == "inserted" and other.id != keyed.id
    plain = mem.observe("config", "t", "other text")
    adopted = mem.observe("config", "t", "Other  text", topic_key="c")
    assert adopted.tier == "duplicate" and adopted.id == plain.id
    revised = mem.observe("config", "t", "new text", topic_key="c")
    assert revised.tier == "revised" and revised.id == plain.id


def test_a_sessions_observation_reaches_the_tenant_by_default(mem):
    a, b = mem.session("a"), mem.session("b")
    b.add("messages", "which queue do we use for the fan-out?", role="user")
    out = a.observe("decision", "Queue", "use NATS for the fan-out of records")
    assert out.session == TENANT_SESSION and out.tier == "inserted"
    (item,) = observations(mem)
    assert item.metadata["session"] == "a"  # where it came from
    # Session b sees it: injected into its context and found by its own search.
    record, messages = b.assemble(2000, query="queue fan-out", observations=3)
    assert messages[0]["content"].splitlines()[1] == (
        "- [decision] Queue: use NATS for the fan-out of records"
    )
    assert [(e["session"], e["id"]) for e in record.payload["manifest"] if e.get("inject")] == [
        (TENANT_SESSION, out.id)
    ]
    hits = b.search("NATS")
    assert [(h.session, h.item.id, h.item.metadata["session"]) for h in hits] == [
        (TENANT_SESSION, out.id, "a")
    ]
    assert b.search("NATS", tenant_observations=False) == []  # its own items only
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_a_session_scoped_observation_stays_in_its_session(mem):
    a, b = mem.session("a"), mem.session("b")
    out = a.observe("learning", "Private", "only session a knows zeppelin", scope="session")
    assert out.session == "a"
    assert b.search("zeppelin") == [] and [h.item.id for h in a.search("zeppelin")] == [out.id]
    assert "zeppelin" not in str(b.context(2000, query="zeppelin", observations=3))


def test_a_revision_names_the_session_that_wrote_it(mem):
    mem.session("a").observe("config", "Pool", "pool=10", topic_key="db.pool")
    mem.session("b").observe("config", "Pool", "pool=50", topic_key="db.pool")
    (item,) = observations(mem)
    assert (item.metadata["session"], item.metadata["revision"]) == ("b", 2)
    mem.observe("config", "Pool", "pool=80", topic_key="db.pool")  # from no session
    (item,) = observations(mem)
    assert "session" not in item.metadata


def test_an_observation_from_an_unknown_session_is_refused_with_nothing_appended(mem):
    head = mem.writer.next_seq
    with pytest.raises(SessionNotFound, match="session 'ghost' not found"):
        mem.observe("learning", "t", "lesson", from_session="ghost")
    with pytest.raises(InvalidInput, match="from_session names the session"):
        mem.observe("learning", "t", "lesson", session="a", from_session="b")
    assert mem.writer.next_seq == head


def test_a_source_cannot_overwrite_what_the_tiers_keep(tmp_path):
    with Memory.open(tmp_path / "d") as mem:
        size = mem.writer.size
        for key in ("session", "revision", "duplicates", "title", "topic_key"):
            with pytest.raises(InvalidInput, match="source cannot set"):
                mem.observe("learning", "t", "lesson", source={key: "forged"})
        assert mem.writer.size == size
