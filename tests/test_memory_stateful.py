"""Random commands across every policy and lifetime, with restarts and snapshots, each through
a runner drawn at random: the sync API, the async API, or HTTP (a real uvicorn over the same
memory). Writes are sometimes retried with the same idempotency key.

At every step: live state == state rebuilt from the log == newest snapshot + tail, with equal
state hashes; no section is over its budget; a refused command appends nothing; a retry answers
exactly what the first call answered and appends nothing.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from urllib.parse import quote

import httpx
from helpers.live_api import LiveApi
from helpers.searchindex import fresh_index_dump, index_dump
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sections.errors import MemoryError_
from sections.model.config import MemoryConfig, SectionConfig
from sections.runtime.memory import ItemView, Memory

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
runners = st.sampled_from(["sync", "async", "http"])


class Refused(Exception):
    """An HTTP 4xx: the service refused the command."""


def _answer(result):
    """A runner's answer in one shape, whichever runner gave it: records as (seq, type, h),
    items as their JSON."""
    if isinstance(result, list):
        return [_answer(v) for v in result]
    if isinstance(result, ItemView):
        return result.to_json()
    if isinstance(result, dict):  # a record's JSON, or an item's
        return (result["seq"], result["type"], result["h"]) if "type" in result else result
    return (result.seq, result.type, result.h)


class MemoryMachine(RuleBasedStateMachine):
    @initialize()
    def open_memory(self):
        self.dir = tempfile.mkdtemp(prefix="lm-stateful-")
        self.mem = Memory.open(self.dir, config=CONFIG, seg_bits=5, snapshot_every=10**9)
        self.calls = 0
        self.api = LiveApi(self.mem).start()
        self.http = httpx.Client(base_url=self.api.url, timeout=30)

    def teardown(self):
        self.http.close()
        self.api.stop()
        self.mem.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the runners

    def _run(self, via: str, session: str, method: str, *args, **kwargs):
        """`Session.<method>` through the sync or the async API."""
        s = self._session(session)
        if via == "sync":
            return getattr(s, method)(*args, **kwargs)
        return asyncio.run(getattr(s, method + "_async")(*args, **kwargs))

    def _http(self, verb: str, session: str, path: str = "", key: str | None = None, **kw):
        self._session(session)
        headers = {"Idempotency-Key": key} if key is not None else {}
        url = f"/v1/sessions/{quote(session, safe='')}{path}"
        response = self.http.request(verb, url, headers=headers, **kw)
        if 400 <= response.status_code < 500:
            raise Refused(response.text)
        assert response.status_code in (200, 201), response.text
        return response.json()

    def _write(self, via: str, session: str, method: str, http, *args, retry=True, **kwargs):
        """A write through `via`, refused or not, sometimes retried with the same key."""
        self.calls += 1
        key = f"key-{self.calls}" if retry and self.calls % 3 == 0 else None

        def once():
            if via == "http":
                return _answer(http(key))
            return _answer(self._run(via, session, method, *args, idempotency_key=key, **kwargs))

        def once_or_twice():
            first = once()
            if key is not None:
                head = self.mem.writer.next_seq
                assert once() == first, "a retry answered something else than the first call"
                assert self.mem.writer.next_seq == head, "a retry appended a record"

        self._refused_appends_nothing(once_or_twice)

    def _session(self, name: str):
        return self.mem.session(name)

    def _items(self, session: str, section: str) -> list[str]:
        def items(state):
            found = state.sessions.get(("default", session))
            return list(found.sections[section].items) if found else []

        return self.mem.read(items)

    def _refused_appends_nothing(self, fn) -> None:
        before = self.mem.writer.next_seq
        try:
            fn()
        except MemoryError_:
            assert self.mem.writer.next_seq == before, "a refused command appended a record"
        except ValueError:
            assert self.mem.writer.next_seq == before, "a refused command appended a record"
        except Refused:
            assert self.mem.writer.next_seq == before, "a refused request appended a record"

    @rule(session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), text=texts,
          priority=st.integers(0, 3), group=st.sampled_from([None, None, "g1", "g2"]),
          via=runners)  # fmt: skip
    def add(self, session, section, text, priority, group, via):
        item = {"content": text, "priority": priority, "group": group}
        path = f"/sections/{section}/items"

        def http(key):
            return self._http("POST", session, path, key, json=item)["item"]

        self._write(via, session, "add", http, section, text, priority=priority, group=group)

    @rule(
        session=st.sampled_from(SESSIONS),
        section=st.sampled_from(NAMES),
        batch=st.lists(texts, min_size=1, max_size=4),
        via=runners,
    )
    def add_many(self, session, section, batch, via):
        items = [{"content": t} for t in batch]

        def http(key):
            path = f"/sections/{section}/items"
            return self._http("POST", session, path, key, json={"items": items})["items"]

        self._write(via, session, "add_many", http, section, items)

    @rule(session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), data=st.data(),
          via=runners)  # fmt: skip
    def read(self, session, section, data, via):
        ids = self._items(session, section)
        if not ids:
            return
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
        reader = data.draw(st.sampled_from(["agent", "operator"]))
        if via == "http":
            params = {"id": chosen, "reader": reader}
            got = self._http("GET", session, f"/sections/{section}/items", params=params)["items"]
        else:
            got = _answer(self._run(via, session, "get", section, chosen, reader=reader))
        assert [v["id"] for v in got] == chosen

    @rule(
        session=st.sampled_from(SESSIONS),
        section=st.sampled_from(NAMES),
        data=st.data(),
        text=texts,
        via=runners,
    )
    def update(self, session, section, data, text, via):
        ids = self._items(session, section)
        if ids:
            target = data.draw(st.sampled_from(ids))

            def http(key):
                path = f"/sections/{section}/items/{target}"
                return self._http("PATCH", session, path, key, json={"content": text})["record"]

            self._write(via, session, "update", http, section, target, content=text)

    @rule(session=st.sampled_from(SESSIONS), section=st.sampled_from(NAMES), data=st.data(),
          via=runners)  # fmt: skip
    def remove(self, session, section, data, via):
        ids = self._items(session, section)
        if ids:
            target = data.draw(st.sampled_from(ids))

            def http(key):
                path = f"/sections/{section}/items/{target}"
                return self._http("DELETE", session, path, key)["record"]

            self._write(via, session, "remove", http, section, target)

    @rule(session=st.sampled_from(SESSIONS), budget=st.integers(1, 200), via=runners)
    def context(self, session, budget, via):
        if via == "http":
            messages = self._http("POST", session, "/context", json={"budget": budget})["messages"]
        else:
            messages = self._run(via, session, "context", budget=budget)
        state = self.mem.read(lambda state: state.sessions[("default", session)])
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
        session=st.sampled_from(SESSIONS),
        section=st.sampled_from(NAMES),
        budget=st.integers(5, 80),
        via=runners,
    )
    def configure(self, session, section, budget, via):
        if section == "unbounded":
            return
        settings = {"budget_tokens": budget}

        def http(key):
            return self._http("PUT", session, f"/sections/{section}", key, json=settings)["record"]

        self._write(via, session, "configure", http, section, **settings)

    @rule(session=st.sampled_from(SESSIONS), via=runners)
    def end_turn(self, session, via):
        def http(key):
            return self._http("POST", session, "/turns/end", key)["record"]

        self._write(via, session, "end_turn", http)

    @rule(session=st.sampled_from(SESSIONS), via=runners)
    def commit(self, session, via):
        def http(key):
            return self._http("POST", session, "/commit", key)["record"]

        self._write(via, session, "commit", http)

    @precondition(lambda self: True)
    @rule()
    def snapshot(self):
        self.mem.snapshot()

    @rule()
    def restart(self):
        self.mem.close()
        self.mem = Memory.open(self.dir, config=CONFIG, seg_bits=5, snapshot_every=10**9)
        self.api.service.memory = self.mem

    @rule(session=st.sampled_from(SESSIONS), via=runners)
    def delete(self, session, via):
        if self.mem.read(lambda state: ("default", session) in state.sessions):

            def http(key):
                return self._http("DELETE", session, "", key)["record"]

            # Not retried: the session is gone, and with it the keys it saw.
            self._write(via, session, "delete", http, retry=False)

    @rule(session=st.sampled_from(SESSIONS), data=st.data(), via=runners)
    def erase(self, session, data, via):
        ids = [i for name in NAMES for i in self._items(session, name)]
        if ids:
            chosen = [data.draw(st.sampled_from(ids))]
            if via == "http":
                body = {"ids": chosen, "reason": "test"}
                erased = self._http("POST", session, "/erase", json=body)["erased"]
            else:
                erased = self._run(via, session, "erase", chosen, reason="test")
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
        def check(state):
            for session in state.sessions.values():
                for section in session.sections.values():
                    budget = section.config.budget_tokens
                    assert budget is None or section.tokens <= budget
                    assert section.tokens == sum(i.tokens for i in section.items.values())

        self.mem.read(check)


MemoryMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryStateful = MemoryMachine.TestCase
