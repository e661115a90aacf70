"""Google ADK's session and memory services over ledgermem (sections/adapters/adk.py,
adk_memory.py, docs/adapters/adk.md): events and their scoped state deltas are records and the
state is their projection (app state shared by the app's sessions, user state by the user's,
temp never stored); get_session's filters; stale writers refused; everything replays; a
deleted session leaves no content in the files; concurrent appends lose nothing; memory search
ranks with ledgermem's search."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eventstore.file_sink import Durability
from sections.runtime.memory import Memory

pytest.importorskip("google.adk")
from google.adk.errors import StaleSessionError  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.errors.session_not_found_error import SessionNotFoundError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.memory.memory_entry import MemoryEntry  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from sections.adapters.adk import LedgerSessionService  # noqa: E402
from sections.adapters.adk_memory import LedgerMemoryService, memory_log_id  # noqa: E402


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


def _event(text: str | None = None, delta: dict | None = None, ts: float | None = None) -> Event:
    content = types.Content(role="user", parts=[types.Part(text=text)]) if text else None
    event = Event(invocation_id="inv", author="user", content=content,
                  actions=EventActions(state_delta=delta or {}))  # fmt: skip
    if ts is not None:
        event.timestamp = ts
    return event


def _files_hold(data_dir: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in data_dir.rglob("*") if p.is_file())


def test_state_is_the_projection_of_the_scoped_deltas(mem):
    service = LedgerSessionService(memory=mem)

    async def walk():
        s1 = await service.create_session(app_name="app", user_id="u1", session_id="s1",
                                          state={"k": 1, "app:a": "A", "user:u": "U", "temp:t": 0})  # fmt: skip
        assert s1.state == {"k": 1, "app:a": "A", "user:u": "U"}
        await service.append_event(
            s1, _event("hi", {"k": 2, "app:b": "B", "user:v": 3.0, "temp:x": 1})
        )
        assert s1.state["temp:x"] == 1  # temp lives in the running session object only
        other_user = await service.create_session(app_name="app", user_id="u2", session_id="s2")
        same_user = await service.create_session(app_name="app", user_id="u1", session_id="s3")
        other_app = await service.create_session(app_name="app2", user_id="u1", session_id="s4")
        stored = await service.get_session(app_name="app", user_id="u1", session_id="s1")
        return stored, other_user, same_user, other_app

    stored, other_user, same_user, other_app = run(walk())
    assert stored.state == {"k": 2, "app:a": "A", "app:b": "B", "user:u": "U", "user:v": 3.0}
    assert type(stored.state["user:v"]) is float  # a value canonical JSON would make 3
    assert other_user.state == {"app:a": "A", "app:b": "B"}
    assert same_user.state == {"app:a": "A", "app:b": "B", "user:u": "U", "user:v": 3.0}
    assert other_app.state == {}
    assert "temp:x" not in stored.events[0].actions.state_delta
    assert run(service.get_user_state(app_name="app", user_id="u1")) == {"u": "U", "v": 3.0}
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_one_append_is_one_decision_and_a_stale_session_appends_nothing(mem):
    service = LedgerSessionService(memory=mem)

    async def walk():
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        copy = await service.get_session(app_name="app", user_id="u", session_id="s")
        await service.append_event(session, _event("one", {"app:n": 1, "user:n": 1, "n": 1}))
        count = sum(1 for _ in mem.reader.records())
        with pytest.raises(StaleSessionError, match="modified in storage"):  # ADK's words
            await service.append_event(copy, _event("two", {"app:n": 2}))
        assert sum(1 for _ in mem.reader.records()) == count
        fresh = await service.get_session(app_name="app", user_id="u", session_id="s")
        await service.append_event(fresh, _event("two", {"app:n": 2}))
        return fresh

    fresh = run(walk())
    assert fresh.state["app:n"] == 2 and [e.content.parts[0].text for e in fresh.events] == [
        "one",
        "two",
    ]
    added = [r for r in mem.reader.records() if r.type == "item.added"]
    assert [r.seq for r in added[:3]] == list(range(added[0].seq, added[0].seq + 3))  # together


def test_get_sessions_config_filters_as_adks_in_memory_service(mem):
    service = LedgerSessionService(memory=mem)

    async def walk():
        session = await service.create_session(app_name="app", user_id="u", session_id=" s ")
        assert session.id == "s"  # ADK strips ids
        for n in range(5):
            await service.append_event(session, _event(f"e{n}", ts=1000.0 + n))
        get = service.get_session
        return (
            await get(app_name="app", user_id="u", session_id="s", config=GetSessionConfig(num_recent_events=2)),
            await get(app_name="app", user_id="u", session_id="s", config=GetSessionConfig(num_recent_events=0)),
            await get(app_name="app", user_id="u", session_id="s", config=GetSessionConfig(after_timestamp=1003.0)),
            await get(app_name="app", user_id="u", session_id="s"),
        )  # fmt: skip

    recent, none, after, whole = run(walk())
    assert [e.timestamp for e in recent.events] == [1003.0, 1004.0]
    assert none.events == [] and [e.timestamp for e in after.events] == [1003.0, 1004.0]
    assert len(whole.events) == 5 and whole.last_update_time == 1004.0


def test_sessions_are_listed_oldest_update_first_and_errors_are_adks(mem):
    service = LedgerSessionService(memory=mem)

    async def walk():
        a = await service.create_session(app_name="app", user_id="u1", session_id="a")
        b = await service.create_session(app_name="app", user_id="u2", session_id="b")
        await service.append_event(a, _event("later", ts=a.last_update_time + 100))
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="app", user_id="u1", session_id="a")
        listed = await service.list_sessions(app_name="app")
        mine = await service.list_sessions(app_name="app", user_id="u2")
        await service.delete_session(app_name="app", user_id="u2", session_id="b")
        with pytest.raises(SessionNotFoundError):
            await service.append_event(b, _event("gone"))
        await service.delete_session(app_name="app", user_id="u2", session_id="b")  # nothing
        return listed, mine

    listed, mine = run(walk())
    assert [s.id for s in listed.sessions] == ["b", "a"] and all(
        not s.events for s in listed.sessions
    )
    assert [s.id for s in mine.sessions] == ["b"]


def test_an_equal_event_delivered_again_is_kept_once(mem):
    service = LedgerSessionService(memory=mem)

    async def walk():
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        event = _event("once", {"app:n": 1})
        await service.append_event(session, event)
        await service.append_event(session, event)
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    assert len(run(walk()).events) == 1


def test_the_state_rebuilt_from_the_log_equals_live_after_a_reopen(tmp_path):
    data = tmp_path / "durable"
    service = LedgerSessionService(data_dir=data)

    async def write():
        s = await service.create_session(
            app_name="app", user_id="u", session_id="s", state={"k": 0}
        )
        for n in range(3):
            await service.append_event(s, _event(f"turn {n}", {"k": n, "app:n": n, "user:m": [n]}))
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    live = run(write())
    assert service.memory.rebuild().state_hash() == service.memory.state_hash()
    service.close()
    again = LedgerSessionService(data_dir=data)
    reopened = run(again.get_session(app_name="app", user_id="u", session_id="s"))
    assert reopened.state == live.state == {"k": 2, "app:n": 2, "user:m": [2]}
    assert reopened.events == live.events
    again.close()


def test_a_deleted_session_leaves_no_content_in_the_files(tmp_path):
    data = tmp_path / "durable"
    service = LedgerSessionService(data_dir=data)

    async def walk():
        gone = await service.create_session(app_name="app", user_id="u", session_id="gone",
                                            state={"secret": "SEED-7731"})  # fmt: skip
        await service.append_event(gone, _event("my card is CARD-5512", {"note": "NOTE-0042"}))
        kept = await service.create_session(app_name="app", user_id="u", session_id="kept")
        await service.append_event(kept, _event("KEPT-1188"))
        assert _files_hold(data, b"CARD-5512") and _files_hold(data, b"SEED-7731")
        await service.delete_session(app_name="app", user_id="u", session_id="gone")
        return await service.get_session(app_name="app", user_id="u", session_id="gone")

    assert run(walk()) is None
    for needle in (b"CARD-5512", b"SEED-7731", b"NOTE-0042"):
        assert not _files_hold(data, needle)
    assert _files_hold(data, b"KEPT-1188")
    assert service.memory.rebuild().state_hash() == service.memory.state_hash()
    service.close()


def test_concurrent_appends_never_lose_an_event(mem):
    service = LedgerSessionService(memory=mem)
    run(service.create_session(app_name="app", user_id="u", session_id="s"))

    def writer(w: int) -> None:
        async def append_all():
            for n in range(8):
                while True:  # ADK's rule: a stale session is read again, then retried
                    session = await service.get_session(app_name="app", user_id="u", session_id="s")
                    try:
                        await service.append_event(session, _event(f"w{w} n{n}", {"app:last": w}))
                        break
                    except StaleSessionError:
                        continue

        asyncio.run(append_all())

    async def all_writers():
        await asyncio.gather(*(asyncio.to_thread(writer, w) for w in range(4)))

    run(all_writers())
    stored = run(service.get_session(app_name="app", user_id="u", session_id="s"))
    texts = {e.content.parts[0].text for e in stored.events}
    assert len(stored.events) == 32 and texts == {f"w{w} n{n}" for w in range(4) for n in range(8)}
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_memory_search_ranks_the_users_memories_and_forgets_for_good(tmp_path):
    data = tmp_path / "memory"  # a memory service of its own: the sessions keep their events
    sessions = LedgerSessionService()
    memory = LedgerMemoryService(data_dir=data)

    async def walk():
        session = await sessions.create_session(app_name="app", user_id="u", session_id="s")
        for text in ("I moved to Lisbon in May", "my favourite food is grilled sardines",
                     "Lisbon trams are yellow; sardines in Lisbon are grilled", "no content"):  # fmt: skip
            await sessions.append_event(session, _event(text))
        await sessions.append_event(session, _event(None, {"x": 1}))  # no content: not a memory
        await memory.add_session_to_memory(session)
        await memory.add_session_to_memory(session)  # again: nothing twice
        other = await sessions.create_session(app_name="app", user_id="v", session_id="o")
        await sessions.append_event(other, _event("v lives in Lisbon too"))
        await memory.add_session_to_memory(other)
        found = await memory.search_memory(
            app_name="app", user_id="u", query="grilled sardines Lisbon"
        )
        ranked = memory.memory.search(
            "grilled sardines Lisbon", sessions=[memory_log_id("app", "u")]
        )
        trams = [m.id for m in found.memories if "trams" in m.content.parts[0].text]
        await memory.delete_memory(app_name="app", user_id="u", memory_id=trams[0])
        await memory.add_session_to_memory(session)  # a deleted memory does not come back
        after = await memory.search_memory(app_name="app", user_id="u", query="sardines")
        await memory.add_memory(app_name="app", user_id="u", memories=[MemoryEntry(
            content=types.Content(parts=[types.Part(text="allergic to peanuts")]), id="m1")])  # fmt: skip
        direct = await memory.search_memory(app_name="app", user_id="u", query="peanuts")
        nothing = await memory.search_memory(app_name="app", user_id="nobody", query="Lisbon")
        return found, ranked, after, direct, nothing

    found, ranked, after, direct, nothing = run(walk())
    texts = {m.content.parts[0].text for m in found.memories}
    assert texts == {"Lisbon trams are yellow; sardines in Lisbon are grilled",
                     "I moved to Lisbon in May", "my favourite food is grilled sardines"}  # fmt: skip
    assert [m.id for m in found.memories] == [h.item.metadata["memory_id"] for h in ranked]
    assert all(m.author == "user" and m.timestamp for m in found.memories)
    assert [m.content.parts[0].text for m in after.memories] == [
        "my favourite food is grilled sardines"
    ]
    assert not _files_hold(data, b"trams are yellow")
    assert [m.id for m in direct.memories] == ["m1"] and nothing.memories == []
    assert memory.memory.rebuild().state_hash() == memory.memory.state_hash()
    sessions.close()
    memory.close()


def test_the_default_services_are_in_process():
    service = LedgerSessionService()
    session = run(service.create_session(app_name="app", user_id="u"))
    directory = service.memory.snapshot_dir.parent
    assert directory.name.startswith("ledgermem-adk-") and session.id
    service.close()
    assert not directory.exists()


def test_the_documented_example_runs(capsys):
    text = (Path(__file__).parent.parent / "docs" / "adapters" / "adk.md").read_text()
    exec(text.split("```python\n", 1)[1].split("```", 1)[0], {"__name__": "example"})
    state, memory = capsys.readouterr().out.splitlines()
    assert state == "{'topic': 'tours', 'app:currency': 'EUR', 'user:home': 'Lisbon'}"
    assert memory == "Book me a tram tour of Lisbon"


def test_what_adks_own_session_tests_check(mem):
    # ADK's tests/unittests/sessions/test_session_service.py (newer than bench/peer_adk.sh's
    # snapshot, read for what it asks of every service): bytes and every event field come back
    # equal; a partial event is not stored; a session object without a marker appends.
    service = LedgerSessionService(memory=mem)

    async def walk():
        session = await service.create_session(app_name="app", user_id="u")
        blob = types.Content(
            role="user", parts=[types.Part.from_bytes(data=b"\x00png", mime_type="image/png")]
        )
        grounding = types.GroundingMetadata(
            search_entry_point=types.SearchEntryPoint(sdk_blob=b"sdk")
        )
        await service.append_event(session, Event(invocation_id="i", author="user", content=blob,
                                                  grounding_metadata=grounding))  # fmt: skip
        full = Event(
            invocation_id="i2", author="user", turn_complete=True, partial=False,
            content=types.Content(role="user", parts=[types.Part(text="t")]),
            actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
            long_running_tool_ids={"tool1"}, error_code="e", error_message="m", interrupted=True,
            custom_metadata={"k": "v"}, timestamp=1700000000.123,
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1, candidates_token_count=1, total_token_count=2),
            citation_metadata=types.CitationMetadata(),
        )  # fmt: skip
        await service.append_event(session, full)
        await service.append_event(session, Event(author="user", partial=True))
        assert len(session.events) == 2
        stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
        assert stored == session and stored.events[0].content == blob
        stored._storage_update_marker = None  # a session object ADK built by hand
        await service.append_event(stored, Event(invocation_id="i3", author="user"))
        return await service.get_session(app_name="app", user_id="u", session_id=session.id)

    assert [e.invocation_id for e in run(walk()).events] == ["i", "i2", "i3"]


def test_an_adk_runner_sees_the_first_turn_in_the_second():
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner

    class CountingLlm(BaseLlm):  # a local model: answers how many contents it was given
        seen: list = []

        async def generate_content_async(self, llm_request, stream=False):
            self.seen.append([p.text for c in llm_request.contents for p in c.parts])
            text = f"seen {len(llm_request.contents)}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))

    llm = CountingLlm(model="counting")
    agent = LlmAgent(name="assistant", model=llm, instruction="Reply briefly.", output_key="reply")
    service = LedgerSessionService()
    runner = Runner(app_name="app", agent=agent, session_service=service)

    async def two_turns():
        session = await service.create_session(app_name="app", user_id="u")
        for text in ("first question", "second question"):
            said = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=said):
                pass
        return await service.get_session(app_name="app", user_id="u", session_id=session.id)

    stored = run(two_turns())
    assert llm.seen == [["first question"], ["first question", "seen 1", "second question"]]
    assert len(stored.events) == 4 and stored.state == {"reply": "seen 3"}
    service.close()


def test_any_ids_are_taken_and_never_meet(mem):
    service = LedgerSessionService(memory=mem)
    from sections.adapters.adk import _log_id

    hashed = _log_id("adk-user", "my app", "Zoë")
    assert hashed.startswith("adk-user:+h:")
    assert _log_id("adk-user", "h", hashed.split(":")[-1]) != hashed  # a plain id cannot take it

    async def walk():
        await service.create_session(app_name="my app", user_id="Zoë", session_id="chat 1",
                                     state={"user:lang": "pt"})  # fmt: skip
        await service.create_session(app_name="my app", user_id="Zoë:x", session_id="chat:1")
        return await service.list_sessions(app_name="my app")

    listed = run(walk())
    assert sorted((s.user_id, s.id, s.state.get("user:lang")) for s in listed.sessions) == [
        ("Zoë", "chat 1", "pt"), ("Zoë:x", "chat:1", None)]  # fmt: skip
