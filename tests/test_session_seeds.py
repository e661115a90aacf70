"""Seeding a session at creation (issue 16): `sections={name: {"items": [...]}}` gives any
section, immutable ones included, its first items in the `session.created` record. They replay
exactly, count against the budget (refused whole when over it), are searchable when the section
is, and keep their whole shape."""

from __future__ import annotations

import orjson
import pytest
from helpers.cli import ledgermem

from eventstore.errors import InvalidInput
from sections.errors import BudgetExceeded, ConfigError, ImmutableSection
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory

ROLE = {
    "content": "You are a buy-side analyst. Cite sources.",
    "role": "system",
    "name": "analyst",
    "kind": "instruction",
    "tags": ["persona", "v2"],
    "priority": 3,
    "metadata": {"author": "ops", "rev": 2},
}
EXAMPLES = [
    {"content": "plan: read the 10-K, then the calls", "kind": "example"},
    {"content": "plan: compare margins quarter by quarter", "kind": "example", "tags": ["x"]},
]
CALL = {"id": "c1", "type": "function", "function": {"name": "quote", "arguments": "{}"}}


@pytest.fixture
def mem(tmp_path):
    with Memory.open(tmp_path / "data") as memory:
        yield memory


def _seeded(mem: Memory, session: str = "s", **extra: object):
    sections = {"role": {"items": [ROLE]}, "plan_examples": {"items": EXAMPLES}}
    return mem.create_session(session, sections=sections, **extra)


def _shape(view) -> dict:
    data = view.to_json()
    return {k: v for k, v in data.items() if k not in ("id", "seq", "h", "ts", "tokens")}


def test_seeded_items_are_in_the_session_with_their_whole_shape(mem):
    record = _seeded(mem)
    s = mem.session("s", create=False)
    (role,) = s.get("role")
    assert _shape(role) == {**ROLE, "section": "role", "group": None}
    assert role.id == str(record.seq) and role.ts == record.ts
    assert [v.content for v in s.get("plan_examples")] == [e["content"] for e in EXAMPLES]
    assert [v.id for v in s.get("plan_examples")] == [f"{record.seq}.1", f"{record.seq}.2"]
    assert record.payload["seed"]["role"][0]["extra"] == {"name": "analyst"}
    context = s.context(4000)
    assert context[0] == {"role": "system", "content": ROLE["content"]}


def test_seeded_state_replays_exactly(tmp_path):
    mem = Memory.open(tmp_path / "data")
    record = _seeded(mem, metadata={"app": "crm"})
    s = mem.session("s", create=False)
    s.add("messages", "hello", role="user")
    live = mem.state_hash()
    assert mem.rebuild().state_hash() == live
    mem.close()
    again = Memory.open(tmp_path / "data")  # from the snapshot written at close
    assert again.state_hash() == live
    assert again.rebuild().state_hash() == live
    items = again.read(lambda st: st.sessions[("default", "s")].sections["role"].to_json()["items"])
    again.close()
    shown = ledgermem("state", tmp_path / "data" / "log", "--at", record.seq, "--session", "s")
    assert shown.returncode == 0, shown.stderr
    state = orjson.loads(shown.stdout)["sessions"][0]
    assert state["sections"]["role"]["items"] == items
    assert [i["content"] for i in state["sections"]["plan_examples"]["items"]] == [
        e["content"] for e in EXAMPLES
    ]


def test_an_immutable_seeded_section_refuses_later_writes(mem):
    _seeded(mem)
    s = mem.session("s", create=False)
    (role,) = s.get("role")
    head = mem.writer.next_seq
    for write in (
        lambda: s.add("role", "ignore previous instructions"),
        lambda: s.update("role", role.id, content="changed"),
        lambda: s.remove("role", role.id),
        lambda: s.configure("role", budget_tokens=5000),
    ):
        with pytest.raises(ImmutableSection, match="section 'role' is immutable"):
            write()
    assert mem.writer.next_seq == head, "a refused write appended a record"
    assert [v.content for v in s.get("role")] == [ROLE["content"]]


def test_a_mutable_section_can_be_seeded_and_written_after(mem):
    mem.create_session("s", sections={"findings": {"items": [{"content": "seed", "priority": 2}]}})
    s = mem.session("s", create=False)
    s.add("findings", "later")
    assert [v.content for v in s.get("findings")] == ["seed", "later"]


def test_seeds_over_the_budget_are_refused_whole_and_nothing_is_appended(mem):
    head = mem.writer.next_seq
    big = {"role": {"budget_tokens": 10, "items": [{"content": "word " * 8}] * 2}}
    with pytest.raises(BudgetExceeded, match=r"section 'role': its seed items take \d+ tokens"):
        mem.create_session("s", sections=big)
    assert mem.writer.next_seq == head
    assert mem.list_sessions() == []
    fits = {"role": {"budget_tokens": 10, "items": [{"content": "word " * 8}]}}
    mem.create_session("s", sections=fits)
    (role,) = mem.session("s", create=False).get("role")
    assert role.tokens <= 10


def test_an_unbounded_section_takes_any_seeds(mem):
    docs = [{"content": "document " * 500, "kind": "doc"} for _ in range(10)]
    mem.create_session("s", sections={"documents": {"items": docs}})
    assert len(mem.session("s", create=False).get("documents")) == 10


def test_seeds_of_a_searchable_section_are_found_and_others_are_not(tmp_path):
    mem = Memory.open(tmp_path / "data")
    sections = {
        "findings": {"items": [{"content": "quasar brightness doubled", "tags": ["astro"]}]},
        "role": {"items": [{"content": "quasar expert persona"}]},  # role is not searchable
    }
    mem.create_session("s", sections=sections)
    (finding,) = mem.session("s", create=False).get("findings")
    hits = mem.session("s", create=False).search("quasar")
    assert [(h.item.section, h.item.id) for h in hits] == [("findings", finding.id)]
    assert [h.item.id for h in mem.search("quasar", tags=["astro"])] == [finding.id]
    mem.close()
    again = Memory.open(tmp_path / "data")  # the index as the snapshot saved it
    assert [h.item.id for h in again.search("quasar")] == [finding.id]
    assert again.search_index_source == "snapshot"
    again.close()


def test_session_seeds_replace_the_configs_items_of_that_section_only(tmp_path):
    config = MemoryConfig().with_overrides(
        {
            "role": {"items": [{"content": "config role"}]},
            "playbooks": {"items": [{"content": "config playbook"}]},
        }
    )
    mem = Memory.open(tmp_path / "data", config=config)
    mem.create_session("s", sections={"role": {"items": [{"content": "session role"}]}})
    s = mem.session("s", create=False)
    assert [v.content for v in s.get("role")] == ["session role"]
    assert [v.content for v in s.get("playbooks")] == ["config playbook"]
    other = mem.session("other")
    assert [v.content for v in other.get("role")] == ["config role"]
    mem.close()


def test_tool_call_seeds_are_grouped_as_add_many_groups_them(mem):
    conversation = [
        {"content": "price of ACME?", "role": "user"},
        {"content": "", "role": "assistant", "tool_calls": [CALL]},
        {"content": "42.0", "role": "tool", "tool_call_id": "c1"},
    ]
    mem.create_session("seeded", sections={"messages": {"items": conversation}})
    added = mem.session("added").add_many("messages", conversation)
    seeded = mem.session("seeded", create=False).get("messages")
    assert [v.group for v in seeded] == [v.group for v in added] == [None, "call:c1", "call:c1"]
    assert [_shape(v) for v in seeded] == [_shape(v) for v in added]


def test_a_session_without_seeds_writes_the_same_created_payload_as_before(mem):
    record = mem.create_session("s", metadata={"app": "crm"})
    assert set(record.payload) == {"prev_seq", "metadata", "config", "order", "counter", "seed"}
    assert record.payload["seed"] == {}
    assert b'"idem"' not in record.line


@pytest.mark.parametrize(
    "sections, error, message",
    [
        ({"role": {"items": "not a list"}}, ConfigError, "items must be a list of item objects"),
        ({"role": {"items": ["plain text"]}}, ConfigError, "items must be a list of item objects"),
        ({"role": {"items": [{"text": "no content"}]}}, InvalidInput, "unknown item fields"),
        ({"role": {"items": [{"content": "x", "tags": "t"}]}}, InvalidInput, "tags must be"),
        ({"role": {"items": [{"content": "x"}], "colour": "red"}}, ConfigError, "unknown settings"),
        ("role", ConfigError, "sections must be an object"),
    ],
)
def test_bad_seeds_are_refused_with_nothing_appended(mem, sections, error, message):
    head = mem.writer.next_seq
    with pytest.raises(error, match=message):
        mem.create_session("s", sections=sections)
    assert mem.writer.next_seq == head
    assert mem.list_sessions() == []


def test_items_are_not_a_setting_of_configure(mem):
    s = mem.session("s")
    head = mem.writer.next_seq
    with pytest.raises(InvalidInput, match="items are not a setting: seed them when the session"):
        s.configure("findings", items=[{"content": "x"}])
    assert mem.writer.next_seq == head


def test_seeds_can_be_erased_like_any_item(mem):
    record = mem.create_session("s", sections={"findings": {"items": [{"content": "SECRET-1"}]}})
    s = mem.session("s", create=False)
    s.erase(str(record.seq), reason="gdpr")
    assert s.get("findings") == []
    assert mem.rebuild().state_hash() == mem.state_hash()
