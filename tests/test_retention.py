"""Retention (sections/model/retention.py, docs/sections.md "Retention"): a tenant's max_sessions, a
section's max_items, cleanup by age; removal from live state by records that replay exactly, and
erasure from the files only when configured."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.errors import InvalidInput
from sections.errors import BudgetExceeded, ConfigError, ItemTooLarge, NotAdmitted
from sections.model.config import MemoryConfig, load_config
from sections.model.retention import MAX_AGE_SECONDS
from sections.runtime.memory import Memory

S = 1_000_000_000  # a second of the fake clock, in nanoseconds
T0 = 1_700_000_000 * S


class Clock:
    """The writer's clock, moved by the test: record times (and so activity) are exact."""

    def __init__(self) -> None:
        self.ns = T0

    def __call__(self) -> int:
        return self.ns

    def tick(self, seconds: float = 1) -> None:
        self.ns += round(seconds * S)


def _open(path: Path, clock: Clock | None = None, **config) -> Memory:
    return Memory.open(
        path, config=MemoryConfig(**config), clock=clock or Clock(), snapshot_every=10**9,
        counter="approx-chars-per-4",  # the budgets below are worked out at 4 characters a token
    )  # fmt: skip


def _sessions(mem: Memory, tenant: str = "default") -> list[str]:
    return [s["session"] for s in mem.list_sessions(tenant)]


def _records(mem: Memory, type_: str) -> list:
    return [r for r in mem.reader.records() if r.type == type_]


def _log_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((path / "log").glob("seg-*.jsonl")))


def _same_as_replay(mem: Memory, path: Path, **config) -> None:
    """Live state == the log replayed from zero == snapshot + tail == a reopened memory."""
    live = mem.state_hash()
    pending = mem.read(lambda state: dict(state.pending_retention))
    assert mem.rebuild().state_hash() == live
    assert mem.rebuild().pending_retention == pending
    mem.snapshot()
    assert mem.rebuild(use_snapshots=True).state_hash() == live
    mem.close()
    again = Memory.open(path, config=MemoryConfig(**config), snapshot_every=10**9)
    assert again.search_index_source == "snapshot"
    assert again.state_hash() == live
    again.close()


# ---- max_sessions -----------------------------------------------------------------------------


def test_the_least_recently_active_session_goes_and_replay_agrees(tmp_path):
    clock = Clock()
    mem = _open(tmp_path / "d", clock, max_sessions=3)
    for name in ("a", "b", "c"):
        clock.tick()
        mem.session(name).add("messages", f"hello from {name}")
    clock.tick()
    mem.session("a").add("messages", "a is active again")  # b is now the least recently active
    clock.tick()
    mem.session("b").get("messages")  # a read is not activity
    clock.tick()
    mem.session("d")
    assert _sessions(mem) == ["a", "c", "d"]
    deleted = _records(mem, "session.deleted")
    assert [(r.session, r.payload["reason"]) for r in deleted] == [("b", "max_sessions")]
    created = _records(mem, "session.created")[-1]
    assert created.session == "d" and deleted[0].seq == created.seq + 1  # right after it
    assert "erase" not in deleted[0].payload
    # A creation past the bound by more than one (a lowered bound) removes as many as needed.
    mem.close()
    mem = _open(tmp_path / "d", clock, max_sessions=2)
    clock.tick()
    mem.session("e")
    assert _sessions(mem) == ["d", "e"]  # c, then a, were the least recently active
    assert [r.session for r in _records(mem, "session.deleted")] == ["b", "c", "a"]
    _same_as_replay(mem, tmp_path / "d", max_sessions=2)


def test_the_tenant_session_never_counts_and_never_goes(tmp_path):
    clock = Clock()
    mem = _open(tmp_path / "d", clock, max_sessions=2)
    mem.observe("learning", "tenant-wide", "kept whatever retention does")  # creates `_tenant`
    for name in ("a", "b", "c"):
        clock.tick()
        mem.session(name)
    assert _sessions(mem) == ["b", "c"]
    assert mem.session_info("default", "_tenant")["session"] == "_tenant"
    clock.tick(3600)
    assert mem.cleanup(0) == ["b", "c"]
    assert mem.session_info("default", "_tenant")["session"] == "_tenant"
    assert all(r.session != "_tenant" for r in _records(mem, "session.deleted"))
    mem.close()


def test_a_tenant_may_have_its_own_bound(tmp_path):
    clock = Clock()
    mem = _open(tmp_path / "d", clock, max_sessions=1, tenant_max_sessions={"big": 3})
    for name in ("a", "b", "c", "d"):
        clock.tick()
        mem.session(name, tenant="big")
        mem.session(name, tenant="small")
    assert _sessions(mem, "big") == ["b", "c", "d"]
    assert _sessions(mem, "small") == ["d"]
    mem.close()


def test_max_sessions_from_the_config_file_and_bad_bounds(tmp_path):
    path = tmp_path / "memory.toml"
    path.write_text(
        "[retention]\nmax_sessions = 10\nerase = true\nsession_ttl_seconds = 3600\n"
        "ttl_interval_seconds = 0.5\n[retention.tenants.acme]\nmax_sessions = 50\n"
    )
    config = load_config(path)
    assert (config.max_sessions, config.retention_erase) == (10, True)
    assert (config.session_ttl_seconds, config.ttl_interval_seconds) == (3600, 0.5)
    assert config.max_sessions_for("acme") == 50 and config.max_sessions_for("other") == 10
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="max_sessions"):
            MemoryConfig(max_sessions=bad)
        with pytest.raises(ConfigError, match="max_sessions"):
            MemoryConfig(tenant_max_sessions={"acme": bad})
    for bad_table in (
        "[retention]\nmax_sesions = 3\n",
        "[retention]\nerase = 1\n",
        "[retention]\nsession_ttl_seconds = -5\n",
        "[retention]\nsession_ttl_seconds = 0\n",
        "[retention]\nttl_interval_seconds = 'often'\n",
        "[retention.tenants.acme]\nmax_items = 3\n",
        "[retention.tenants.acme]\nmax_sessions = 0\n",
    ):
        path.write_text(bad_table)
        with pytest.raises(ConfigError):
            load_config(path)


# ---- max_items --------------------------------------------------------------------------------


def _section(mem: Memory, policy: str, max_items: int, budget: int | None = None):
    return mem.session(
        f"{policy}-{max_items}",
        sections={"notes": {"policy": policy, "max_items": max_items, "budget_tokens": budget}},
    )


def _contents(session, section: str = "notes") -> list:
    return [v.content for v in session.get(section)]


@pytest.mark.parametrize(
    ("policy", "kept"),
    [("fifo", ["n2", "n3", "n4"]), ("lifo", ["n0", "n1", "n4"]), ("priority", ["n1", "n3", "n4"]),
     ("lru", ["n0", "n3", "n4"])],
)  # fmt: skip
def test_max_items_evicts_by_the_policy(tmp_path, policy, kept):
    mem = _open(tmp_path / "d")
    s = _section(mem, policy, 3)
    priorities = {"n0": 1, "n1": 5, "n2": 0, "n3": 4, "n4": 9}
    ids = {}
    for name in ("n0", "n1", "n2"):
        ids[name] = s.add("notes", name, priority=priorities[name]).id
    if policy == "lru":
        s.get("notes", [ids["n0"]])  # an agent read: n0 is used, n1 is now the least recent
    for name in ("n3", "n4"):
        s.add("notes", name, priority=priorities[name])
    assert _contents(s) == kept
    evicted = [e for r in _records(mem, "item.added") for e in r.payload.get("evicted", ())]
    assert len(evicted) == 2 and {e["reason"] for e in evicted} == {"max_items"}
    info = mem.session_sections("default", s.id)["notes"]
    assert (info["max_items"], info["items"], info["evictions"]) == (3, 3, 2)
    _same_as_replay(mem, tmp_path / "d")


def test_max_items_never_splits_a_group_and_refuse_refuses(tmp_path):
    mem = _open(tmp_path / "d")
    s = _section(mem, "fifo", 3)
    s.add_many("notes", [{"content": "g1", "group": "g"}, {"content": "g2", "group": "g"}])
    s.add("notes", "x")
    s.add("notes", "y")  # the oldest unit is the group: both leave, though one would make room
    assert _contents(s) == ["x", "y"]
    assert [e["reason"] for e in _records(mem, "item.added")[-1].payload["evicted"]] == [
        "max_items", "max_items",
    ]  # fmt: skip
    s.add_many("notes", [{"content": f"h{n}", "group": "h"} for n in (1, 2, 3)])
    assert _contents(s) == ["h1", "h2", "h3"]
    head = mem.writer.size
    with pytest.raises(ItemTooLarge, match="groups are never split"):
        s.add("notes", "h4", group="h")  # the group alone would hold 4 items
    with pytest.raises(ItemTooLarge, match="max_items"):
        s.add_many("notes", [{"content": str(n)} for n in range(4)])
    assert mem.writer.size == head
    refusing = _section(mem, "refuse", 2)
    refusing.add("notes", "a")
    refusing.add("notes", "b")
    head = mem.writer.size
    with pytest.raises(BudgetExceeded, match="max_items"):
        refusing.add("notes", "c")
    assert mem.writer.size == head and _contents(refusing) == ["a", "b"]
    _same_as_replay(mem, tmp_path / "d")


def test_under_priority_the_incoming_items_compete_for_a_place(tmp_path):
    mem = _open(tmp_path / "d")
    s = _section(mem, "priority", 2)
    s.add("notes", "p5", priority=5)
    s.add("notes", "p3", priority=3)
    head = mem.writer.size
    with pytest.raises(NotAdmitted, match=r"2 of 2 items"):
        s.add("notes", "p1", priority=1)  # it would be the first to leave
    assert mem.writer.size == head
    s.add("notes", "new p3", priority=3)  # a tie: the resident leaves
    assert _contents(s) == ["p5", "new p3"]
    mem.close()


def test_the_token_budget_and_max_items_together(tmp_path):
    """A victim taken while the tokens did not fit has the policy as its reason; one taken only
    for the count, max_items."""
    mem = _open(tmp_path / "d")
    s = _section(mem, "fifo", 3, budget=10)
    s.add("notes", "a" * 16)  # 4 tokens (about 4 characters a token)
    s.add("notes", "e")
    s.add("notes", "f")
    s.add_many("notes", [{"content": "g" * 20}, {"content": "h"}])  # 6 tokens, 2 items
    assert _contents(s) == ["f", "g" * 20, "h"]  # "a…" for the budget, "e" for the count
    reasons = [e["reason"] for e in _records(mem, "item.added")[-1].payload["evicted"]]
    assert reasons == ["fifo", "max_items"]


def test_max_items_is_a_setting_like_the_others(tmp_path):
    path = tmp_path / "memory.toml"
    path.write_text("[sections.findings]\nmax_items = 2\n")
    mem = Memory.open(tmp_path / "d", config=path)
    s = mem.session("s")
    created = _records(mem, "session.created")[0].payload["config"]
    assert created["findings"]["max_items"] == 2
    assert all("max_items" not in c for n, c in created.items() if n != "findings")  # old bytes
    for n in range(3):
        s.add("findings", f"finding {n}")
    assert _contents(s, "findings") == ["finding 1", "finding 2"]  # priority: equal, oldest out
    # configure: a smaller bound evicts at once, by the policy, in the section.configured record
    s.configure("findings", max_items=1)
    record = _records(mem, "section.configured")[-1]
    assert record.payload["config"]["max_items"] == 1
    assert [e["reason"] for e in record.payload["evicted"]] == ["max_items"]
    assert len(_contents(s, "findings")) == 1
    s.configure("findings", max_items=None)  # unset: no bound, and no key in the record
    assert "max_items" not in _records(mem, "section.configured")[-1].payload["config"]
    other = mem.session("o", sections={"messages": {"max_items": 1}})
    other.add("messages", "one")
    other.add("messages", "two")
    assert _contents(other, "messages") == ["two"]
    _same_as_replay(mem, tmp_path / "d", sections=load_config(path).sections)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True, math.inf])
def test_bad_max_items_is_refused_with_nothing_appended(tmp_path, bad):
    mem = _open(tmp_path / "d")
    s = mem.session("s")
    head = mem.writer.size
    with pytest.raises(ConfigError, match="max_items"):
        s.configure("messages", max_items=bad)
    with pytest.raises(ConfigError, match="max_items"):
        mem.session("t", sections={"messages": {"max_items": bad}})
    assert mem.writer.size == head
    with pytest.raises(ConfigError, match="policy 'none'"):
        s.configure("documents", max_items=3)  # `none` never evicts
    mem.close()


# ---- cleanup by age ---------------------------------------------------------------------------


def test_cleanup_removes_exactly_the_sessions_older_than_the_age(tmp_path):
    clock = Clock()
    mem = _open(tmp_path / "d", clock)
    for name, quiet_for in (("s300", 300), ("s200", 200), ("s150", 150), ("s100", 100)):
        clock.ns = T0 + (1000 - quiet_for) * S  # last active `quiet_for` seconds before t=1000
        mem.session(name).add("messages", f"said in {name}")
    clock.ns = T0 + 500 * S
    mem.session("s300").get("messages")  # reads are not activity
    mem.session("s100", tenant="other")  # another tenant's: never in this tenant's cleanup
    clock.ns = T0 + 1000 * S
    head = mem.writer.size
    assert mem.cleanup(1000) == [] and mem.writer.size == head  # nothing old enough: no record
    assert mem.cleanup(150) == ["s300", "s200"]  # s150 is exactly 150 s old: not older
    assert _sessions(mem) == ["s150", "s100"] and _sessions(mem, "other") == ["s100"]
    deleted = _records(mem, "session.deleted")
    assert [(r.session, r.payload["reason"]) for r in deleted] == [
        ("s300", "max_age"), ("s200", "max_age"),
    ]  # fmt: skip
    assert all(r.ts == clock.ns // 1000 for r in deleted)
    assert asyncio.run(mem.cleanup_async(149.5)) == ["s150"]
    assert mem.expire_sessions(50) == [("other", "s100"), ("default", "s100")]  # oldest first
    assert _records(mem, "session.deleted")[-1].payload["reason"] == "ttl"
    assert mem.search("said") == []  # gone from search too
    _same_as_replay(mem, tmp_path / "d")


def test_the_oldest_age_allowed_removes_nothing_younger(tmp_path):
    mem = _open(tmp_path / "d")
    mem.session("s")
    mem.cleanup(MAX_AGE_SECONDS)
    assert _sessions(mem) == ["s"]
    mem.close()


@pytest.mark.parametrize(
    "bad", [-1, math.nan, math.inf, "60", None, True, [60], 1.4e308, 2**63, MAX_AGE_SECONDS + 1]
)
def test_a_bad_age_is_refused_with_nothing_appended(tmp_path, bad):
    mem = _open(tmp_path / "d")
    mem.session("s")
    head = mem.writer.size
    with pytest.raises(InvalidInput, match="max_age_seconds"):
        mem.cleanup(bad)
    with pytest.raises(InvalidInput, match="max_age_seconds"):
        asyncio.run(mem.cleanup_async(bad))
    assert mem.writer.size == head and _sessions(mem) == ["s"]
    mem.close()


def test_sessions_show_their_times(tmp_path):
    clock = Clock()
    mem = _open(tmp_path / "d", clock)
    s = mem.session("s")
    clock.tick(5)
    s.add("messages", "later")
    info = s.info()
    assert info["created_ts"] == T0 // 1000
    assert info["active_ts"] == (T0 + 5 * S) // 1000
    listed = mem.list_sessions()[0]
    assert (listed["created_ts"], listed["active_ts"]) == (info["created_ts"], info["active_ts"])
    mem.close()


# ---- erasure, only where configured -----------------------------------------------------------


def test_without_erase_the_content_stays_in_the_files_but_not_in_state(tmp_path):
    clock = Clock()
    mem = _open(tmp_path / "d", clock, max_sessions=1)
    mem.session("old").add("messages", "kept-in-the-files-7731")
    clock.tick()
    mem.session("new")
    clock.tick(100)
    mem.cleanup(10)
    assert _sessions(mem) == []
    assert mem.search("kept-in-the-files-7731") == []
    assert _records(mem, "session.erased") == [] and _records(mem, "redaction") == []
    mem.close()
    assert b"kept-in-the-files-7731" in _log_bytes(tmp_path / "d")


def test_with_erase_the_content_is_gone_from_the_files(tmp_path):
    clock = Clock()
    path = tmp_path / "d"
    mem = _open(path, clock, max_sessions=2, retention_erase=True)
    mem.session("keep").add("messages", "still-here-4410")
    clock.tick()
    mem.session("first").add("messages", "secret-by-max-sessions-1187", role="user")
    mem.snapshot()  # holds the secret: the erase must purge it
    clock.tick()
    mem.session("keep").add("messages", "keep is active")
    clock.tick()
    mem.session("second").add("messages", "secret-by-age-2209")
    clock.tick(1000)
    mem.session("keep").add("messages", "keep is active again")
    assert mem.cleanup(500) == ["second"]
    assert _sessions(mem) == ["keep"]
    erased = _records(mem, "session.erased")
    deleted = _records(mem, "session.deleted")
    assert [(r.session, r.payload["reason"]) for r in deleted] == [
        ("first", "max_sessions"), ("second", "max_age"),
    ]  # fmt: skip
    assert all(d.payload["erase"] is True for d in deleted)
    assert [(r.session, r.payload["deleted_seq"]) for r in erased] == [
        (d.session, d.seq) for d in deleted
    ]
    assert mem.read(lambda state: state.pending_retention) == {}
    _same_as_replay(mem, path, max_sessions=2, retention_erase=True)
    data = _log_bytes(path)
    assert b"secret-by-max-sessions-1187" not in data and b"secret-by-age-2209" not in data
    assert b"still-here-4410" in data
    snapshots = b"".join(p.read_bytes() for p in (path / "snapshots").glob("*"))
    assert b"secret-by-max-sessions-1187" not in snapshots


def test_the_sessions_a_cleanup_erases_are_redacted_together(tmp_path):
    """One redaction for all of them (one rewrite of the segments, not one per session), named
    `session.erased@<first>..<last>`; every erase is then complete, live and in replay."""
    clock = Clock()
    path = tmp_path / "d"
    mem = _open(path, clock, retention_erase=True)
    for n in range(3):
        mem.session(f"s{n}").add("messages", f"together-{n}-3307")
    mem.session("young")
    clock.tick(100)
    mem.session("young").add("messages", "young-and-kept-5150")
    assert mem.cleanup(50) == ["s0", "s1", "s2"]
    erased = _records(mem, "session.erased")
    (redaction,) = _records(mem, "redaction")
    assert redaction.payload["request"] == f"session.erased@{erased[0].seq}..{erased[-1].seq}"
    assert redaction.payload["reason"] == "max_age"
    assert mem.read(lambda state: (state.pending_erasures, state.pending_retention)) == ({}, {})
    assert mem.rebuild().pending_erasures == {}
    _same_as_replay(mem, path, retention_erase=True)
    data = _log_bytes(path)
    assert b"-3307" not in data and b"young-and-kept-5150" in data


def test_an_erase_a_crash_interrupted_is_finished_at_open_and_spares_a_new_incarnation(tmp_path):
    """The deletion is durable, its erase is not (a crash between them): the next open erases
    the deleted incarnation, and only it: the session created again under the same id stays."""
    from sections.model import retention
    from sections.model.commands import Decision

    path = tmp_path / "d"
    mem = _open(path, retention_erase=True)
    mem.session("s").add("messages", "old-incarnation-5521")

    def delete(state):
        session = state.sessions[("default", "s")]
        return Decision((retention.deletion(session, retention.MAX_AGE, erase=True),))

    mem.append(delete)  # what the cleanup decided; its erase never ran
    assert len(mem.read(lambda state: state.pending_retention)) == 1
    mem.session("s").add("messages", "new-incarnation-6632")
    mem.close()
    assert b"old-incarnation-5521" in _log_bytes(path)
    again = _open(path, retention_erase=True)
    assert again.read(lambda state: state.pending_retention) == {}
    assert [v.content for v in again.session("s").get("messages")] == ["new-incarnation-6632"]
    assert [h.session for h in again.search("incarnation")] == ["s"]
    again.close()
    data = _log_bytes(path)
    assert b"old-incarnation-5521" not in data and b"new-incarnation-6632" in data
    again = _open(path, retention_erase=True)  # nothing left to finish: no second erase
    assert len(_records(again, "session.erased")) == 1
    again.close()


# ---- properties against a reference model -----------------------------------------------------

_session_steps = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(0, 7)),
        st.tuples(st.just("touch"), st.integers(0, 7)),
        st.tuples(st.just("read"), st.integers(0, 7)),
        st.tuples(st.just("cleanup"), st.integers(0, 40)),
        st.tuples(st.just("wait"), st.integers(1, 20)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(steps=_session_steps, limit=st.integers(1, 4))
def test_sessions_left_are_the_models(tmp_path_factory, steps, limit):
    """After any mix of creations, activity, reads, waits and cleanups, the live sessions are
    exactly the reference model's: a creation past `limit` removes the least recently active
    (a read is not activity), a cleanup those idle longer than its age; replay agrees."""
    clock = Clock()
    path = tmp_path_factory.mktemp("model") / "d"
    mem = _open(path, clock, max_sessions=limit)
    model: dict[str, tuple[int, int]] = {}  # session -> (last activity ns, order of activity)
    for n, (op, arg) in enumerate(steps):
        clock.tick(0.001)
        name = f"s{arg}"
        if op == "create" and name not in model:
            mem.session(name)
            if len(model) + 1 > limit:
                for victim in sorted(model, key=model.get)[: len(model) + 1 - limit]:
                    del model[victim]
            model[name] = (clock.ns, n)
        elif op == "touch" and name in model:
            mem.session(name, create=False).add("messages", "x")
            model[name] = (clock.ns, n)
        elif op == "read" and name in model:
            mem.session(name, create=False).get("messages")
        elif op == "cleanup":
            expected = sorted((s for s in model if model[s][0] // 1000 < clock.ns // 1000 - arg
                               * 1_000_000), key=model.get)  # fmt: skip
            assert mem.cleanup(arg) == expected
            for victim in expected:
                del model[victim]
        elif op == "wait":
            clock.tick(arg)
        assert sorted(_sessions(mem)) == sorted(model)
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


_adds = st.lists(
    st.tuples(
        st.integers(1, 3),  # items in the add
        st.sampled_from([None, "g0", "g1", "g2"]),  # the group they join
        st.integers(1, 12),  # characters of each (tokens: about 4 characters)
        st.integers(0, 3),  # priority
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(adds=_adds, policy=st.sampled_from(["fifo", "lifo", "lru", "lfu", "priority", "refuse"]),
       max_items=st.integers(1, 6), budget=st.sampled_from([None, 6, 12]))  # fmt: skip
def test_max_items_holds_and_groups_stay_whole(tmp_path_factory, adds, policy, max_items, budget):
    """After any adds: the section holds at most max_items items and budget tokens, every
    refused add appended nothing, an add was refused only by a typed error, every group is
    whole (all the items ever added to it, or none), and replay agrees."""
    mem = _open(tmp_path_factory.mktemp("items") / "d")
    s = mem.session("s", sections={"notes": {"policy": policy, "max_items": max_items,
                                             "budget_tokens": budget}})  # fmt: skip
    members: dict[str, set[str]] = {}
    for count, group, chars, priority in adds:
        batch = [{"content": "c" * chars, "priority": priority} for _ in range(count)]
        if group is not None:
            for item in batch:
                item["group"] = group
        head = mem.writer.size
        try:
            added = s.add_many("notes", batch)
        except (BudgetExceeded, ItemTooLarge):
            assert mem.writer.size == head
            continue
        if group is not None:
            live = {v.id for v in s.get("notes", reader="operator")}
            members[group] = (members.get(group, set()) & live) | {a.id for a in added}
        info = mem.session_sections("default", "s")["notes"]
        assert info["items"] <= max_items
        assert budget is None or info["tokens"] <= budget
        live = {v.id for v in s.get("notes", reader="operator")}
        for group_members in members.values():
            assert group_members <= live or not (group_members & live)
    assert mem.rebuild().state_hash() == mem.state_hash()
    mem.close()


def test_max_sessions_never_removes_the_memory_s_own_holders(tmp_path):
    """`_tenant` and AgentOps' project holders hold what outlives any one session."""
    from sections.adapters.agentops_specs import ensure_holder

    mem = _open(tmp_path / "d", max_sessions=2)
    mem.session("a")
    holder = asyncio.run(ensure_holder(mem, "default", "proj", "project"))
    mem.observe("decision", "t", "kept", session=holder)
    mem.session("b").observe("decision", "t2", "tenant-wide")  # makes `_tenant`
    mem.session("c")
    live = mem.read(lambda state: sorted(sid for (_, sid) in state.sessions))
    assert holder in live and "_tenant" in live
    assert [s for s in live if not s.startswith("_")] == ["b", "c"]
