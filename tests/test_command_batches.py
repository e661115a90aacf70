"""Concurrent commands decided in batches (sections/runtime/engine.py, batching.py): one submit per group of
session-local commands on distinct sessions, and each command still exactly its own records,
its own error, its own version check and idempotency key."""

from __future__ import annotations

import asyncio
import threading

import pytest

from eventstore.errors import InvalidInput
from sections.errors import VersionConflict
from sections.runtime.memory import Memory
from sections.specs import command_specs as specs


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", seg_bits=6)
    yield memory
    memory.close()


def _items(mem: Memory, after: int) -> list:
    mem.writer.wait_for(mem.writer.next_seq - 1)
    return [r for r in mem.reader.records(after=after) if r.type == "item.added"]


def _counting_submits(mem: Memory) -> list[int]:
    """Record the number of entries of each writer.submit from here on."""
    sizes: list[int] = []
    submit = mem.writer.submit

    def counted(entries, **kw):
        entries = list(entries)
        sizes.append(len(entries))
        return submit(entries, **kw)

    mem.writer.submit = counted  # type: ignore[method-assign]
    return sizes


def test_concurrent_adds_on_distinct_sessions_share_one_submit(mem):
    sessions = [mem.session(f"s{i}") for i in range(10)]
    start = mem.writer.next_seq - 1
    sizes = _counting_submits(mem)

    async def main():
        calls = [s.add_async("findings", f"f{i}") for i, s in enumerate(sessions)]
        return await asyncio.gather(*calls)

    views = asyncio.run(main())
    assert sizes == [10]
    records = _items(mem, start)
    assert [r.session for r in records] == [f"s{i}" for i in range(10)]
    assert [v.id for v in views] == [str(r.seq) for r in records]  # each caller its own record
    assert [r.payload["items"][0]["content"] for r in records] == [f"f{i}" for i in range(10)]
    assert mem.rebuild(use_snapshots=False).state_hash() == mem.state_hash()


def test_a_command_that_fails_fails_alone_and_appends_nothing(mem):
    sessions = [mem.session(f"s{i}") for i in range(6)]
    start = mem.writer.next_seq - 1

    async def main():
        calls = [
            s.add_async("findings", f"f{i}", **({"colour": "red"} if i == 2 else {}))
            for i, s in enumerate(sessions)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(main())
    assert isinstance(outcomes[2], InvalidInput)
    assert all(not isinstance(o, BaseException) for n, o in enumerate(outcomes) if n != 2)
    assert [r.session for r in _items(mem, start)] == ["s0", "s1", "s3", "s4", "s5"]
    assert mem.rebuild(use_snapshots=False).state_hash() == mem.state_hash()


def test_commands_on_one_session_in_one_batch_see_each_other(mem):
    """A second command on a session waits for the first one's records to be applied: of
    several adds expecting the same version exactly one wins, and an idempotency key given
    twice in one batch makes one record."""
    s = mem.session("one")
    version = s.version
    start = mem.writer.next_seq - 1

    async def versions():
        calls = [s.add_async("findings", f"v{i}", expected_version=version) for i in range(5)]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(versions())
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert sum(isinstance(o, VersionConflict) for o in outcomes) == 4
    assert len(_items(mem, start)) == 1

    start = mem.writer.next_seq - 1

    async def retried():
        calls = [s.add_async("findings", "same", idempotency_key="k-1") for _ in range(4)]
        return await asyncio.gather(*calls)

    views = asyncio.run(retried())
    assert len({v.id for v in views}) == 1
    assert len(_items(mem, start)) == 1
    assert mem.rebuild(use_snapshots=False).state_hash() == mem.state_hash()


def test_threads_each_get_their_own_records(mem):
    sessions = [mem.session(f"t{i}") for i in range(4)]
    start = mem.writer.next_seq - 1
    got: dict[int, list] = {}

    def caller(k: int) -> None:
        s = sessions[k % 4]
        got[k] = [s.add("findings", f"c{k}-{n}") for n in range(15)]

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = {str(r.seq): r for r in _items(mem, start)}
    assert len(records) == 12 * 15
    for k, views in got.items():
        for n, view in enumerate(views):
            record = records[view.id]
            assert record.session == f"t{k % 4}"
            assert record.payload["items"][0]["content"] == f"c{k}-{n}"
    assert mem.rebuild(use_snapshots=False).state_hash() == mem.state_hash()


def test_a_batch_mixing_session_commands_with_others_keeps_log_order(mem):
    """Commands that are not session-local (creating a session) are decided alone, after the
    group before them is applied; the state still equals the log's."""
    start = mem.writer.next_seq - 1

    async def main():
        a = mem.session("a")
        calls = [
            a.add_async("findings", "a1"),
            mem.run_async(specs.GET_OR_CREATE_SESSION, mem.tenant, "b", (mem.config, None)),
            a.add_async("findings", "a2"),
        ]
        return await asyncio.gather(*calls)

    asyncio.run(main())
    types = [r.type for r in mem.reader.records(after=start) if not r.is_control]
    assert types.count("item.added") == 2 and "session.created" in types
    assert mem.rebuild(use_snapshots=False).state_hash() == mem.state_hash()
