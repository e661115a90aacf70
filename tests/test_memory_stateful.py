"""Random commands across every policy and lifetime, with restarts and snapshots.

At every step: live state == state rebuilt from the log == newest snapshot + tail, with equal
state hashes; no section is over its budget; a refused command appends nothing.
"""

from __future__ import annotations

import shutil
import tempfile

from helpers.searchindex import fresh_index_dump, index_dump
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sections.config import MemoryConfig, SectionConfig
from sections.errors import MemoryError_
from sections.memory import Memory

SECTIONS = (
    SectionConfig("fifo_turn", 40, "fifo", "turn", searchable=True),
    SectionConfig("lifo_durable", 40, "lifo", "durable"),
    SectionConfig("lru_process", 40, "lru", "process"),
    SectionConfig("lfu_commit", 40, "lfu", "commit"),
    SectionConfig("priority_durable", 40, "priority", "durable", searchable=True),
    SectionConfig("refuse_commit", 30, "refuse", "commit"),
    SectionConfig("unbounded", None, "none", "durable", searchable=True),
    SectionConfig("messages", 60, "fifo", "durable", searchable=True),
)
CONFIG = MemoryConfig(sections=SECTIONS, seed_items=None)
NAMES = [s.name for s in SECTIONS]
SESSIONS = ["s-1", "s/2:x@y"]

texts = st.text(alphabet="abcdefgh ", min_size=1, max_size=60)


class MemoryMachine(RuleBasedStateMachine):
    @initialize()
    def open_memory(self):
        self.dir = tempfile.mkdtemp(prefix="lm-stateful-")
        self.mem = Memory.open(self.dir, config=CONFIG, seg_bits=5, snapshot_every=10**9)
        self.calls = 0

    def teardown(self):
        self.mem.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _session(self, name: str):
        return self.mem.session(name)

    def _items(self, session: str, section: str) -> list[str]:
        state = self.mem._state.sessions.get(("default", session))
        return list(state.sections[section].items) if state else []

    def _refused_appends_nothing(self, fn) -> None:
        before = self.mem.writer.next_seq
        try:
            fn()
        except MemoryError_:
            assert self.mem.writer.next_seq == before, "a refused command appended a record"
        except ValueError:
            assert self.mem.writer.next_seq == before, "a refused command appended a record"

    @rule(session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), text=texts,
          priority=st.integers(0, 3), group=st.sampled_from([None, None, "g1", "g2"]))  # fmt: skip
    def add(self, session, section, text, priority, group):
        s = self._session(session)
        self._refused_appends_nothing(lambda: s.add(section, text, priority=priority, group=group))

    @rule(
        session=st.sampled_from(SESSIONS),
        section=st.sampled_from(NAMES),
        batch=st.lists(texts, min_size=1, max_size=4),
    )
    def add_many(self, session, section, batch):
        s = self._session(session)
        self._refused_appends_nothing(lambda: s.add_many(section, [{"content": t} for t in batch]))

    @rule(session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), data=st.data())
    def read(self, session, section, data):
        ids = self._items(session, section)
        if not ids:
            return
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
        reader = data.draw(st.sampled_from(["agent", "operator"]))
        got = self._session(session).get(section, chosen, reader=reader)
        assert [v.id for v in got] == chosen

    @rule(
        session=st.sampled_from(SESSIONS),
        section=st.sampled_from(NAMES),
        data=st.data(),
        text=texts,
    )
    def update(self, session, section, data, text):
        ids = self._items(session, section)
        if ids:
            target = data.draw(st.sampled_from(ids))
            s = self._session(session)
            self._refused_appends_nothing(lambda: s.update(section, target, content=text))

    @rule(session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), data=st.data())
    def remove(self, session, section, data):
        ids = self._items(session, section)
        if ids:
            self._session(session).remove(section, data.draw(st.sampled_from(ids)))

    @rule(session=st.sampled_from(SESSIONS), budget=st.integers(1, 200))
    def context(self, session, budget):
        s = self._session(session)
        messages = s.context(budget=budget)
        state = self.mem._state.sessions[("default", session)]
        record = self.mem.reader.get(state.last_seq)
        shown = {(e["section"], e["id"]) for e in record.payload["manifest"]}
        assert record.payload["tokens"] <= budget
        for name, section in state.sections.items():
            groups: dict[str, set[bool]] = {}
            for item in section.items.values():
                if item.group is not None:
                    groups.setdefault(item.group, set()).add((name, item.id) in shown)
            assert all(len(v) == 1 for v in groups.values()), "context assembly split a group"
        assert self.mem.context_at(record.seq) == messages

    @rule(
        session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), budget=st.integers(5, 80)
    )
    def configure(self, session, section, budget):
        if section == "unbounded":
            return
        s = self._session(session)
        self._refused_appends_nothing(lambda: s.configure(section, budget_tokens=budget))

    @rule(session=st.sampled_from(SESSIONS))
    def end_turn(self, session):
        self._session(session).end_turn()

    @rule(session=st.sampled_from(SESSIONS))
    def commit(self, session):
        self._session(session).commit()

    @precondition(lambda self: True)
    @rule()
    def snapshot(self):
        self.mem.snapshot()

    @rule()
    def restart(self):
        self.mem.close()
        self.mem = Memory.open(self.dir, config=CONFIG, seg_bits=5, snapshot_every=10**9)

    @rule(session=st.sampled_from(SESSIONS))
    def delete(self, session):
        if ("default", session) in self.mem._state.sessions:
            self._session(session).delete()

    @rule(session=st.sampled_from(SESSIONS), data=st.data())
    def erase(self, session, data):
        ids = [i for name in NAMES for i in self._items(session, name)]
        if ids:
            erased = self._session(session).erase([data.draw(st.sampled_from(ids))], reason="test")
            assert erased

    @invariant()
    def rebuilt_equals_live(self):
        live = self.mem.state_hash()
        assert self.mem.rebuild(use_snapshots=False).state_hash() == live
        assert self.mem.rebuild(use_snapshots=True).state_hash() == live

    @invariant()
    def search_index_is_the_state_indexed(self):
        assert index_dump(self.mem.search_index) == fresh_index_dump(self.mem)

    @invariant()
    def budgets_hold(self):
        for session in self.mem._state.sessions.values():
            for section in session.sections.values():
                budget = section.config.budget_tokens
                assert budget is None or section.tokens <= budget
                assert section.tokens == sum(i.tokens for i in section.items.values())


MemoryMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryStateful = MemoryMachine.TestCase
