"""The OpenAI Agents SDK's `Session` over ledgermem (sections/adapters/openai_agents.py,
docs/adapters/openai-agents.md): a real `Runner` with a small local model (no network) keeps
its conversation in our session; items come back exactly as given; everything is a record that
replays; a cleared session leaves no content in the files; concurrent adds lose nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.errors import InvalidInput
from eventstore.file_sink import Durability
from sections.adapters.openai_agents import LedgerSession
from sections.runtime.memory import Memory

agents = pytest.importorskip("agents")
from agents import Agent, RunConfig, Runner, SessionSettings  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

agents.set_tracing_disabled(True)  # no trace goes to OpenAI from these tests (no network)


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


def _files_hold(data_dir: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in data_dir.rglob("*") if p.is_file())


def _json(value) -> str:
    return json.dumps(value, sort_keys=True)


class CountingModel(Model):
    """A model that answers how many input items it was given, and keeps each input."""

    def __init__(self) -> None:
        self.inputs: list[list] = []

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **_kw) -> ModelResponse:  # fmt: skip
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        text = ResponseOutputText(type="output_text", text=f"seen {len(items)}", annotations=[])
        message = ResponseOutputMessage(id=f"msg_{len(self.inputs)}", type="message",
                                        role="assistant", status="completed", content=[text])  # fmt: skip
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def test_a_runner_sees_the_first_turn_in_the_second(mem):
    model = CountingModel()
    agent = Agent(name="assistant", instructions="Reply briefly.", model=model)
    session = LedgerSession("conversation 1", memory=mem)

    async def two_turns():
        config = RunConfig(tracing_disabled=True)
        first = await Runner.run(agent, "What city is the Golden Gate Bridge in?", session=session,
                                 run_config=config)  # fmt: skip
        second = await Runner.run(agent, "What state is it in?", session=session, run_config=config)
        return first, second

    first, second = run(two_turns())
    assert first.final_output == "seen 1"
    seen = model.inputs[1]
    assert [i.get("content") for i in seen[:1]] == ["What city is the Golden Gate Bridge in?"]
    assert seen[1]["type"] == "message" and seen[1]["content"][0]["text"] == "seen 1"
    assert seen[2]["content"] == "What state is it in?" and second.final_output == "seen 3"
    stored = run(session.get_items())
    assert stored[:3] == seen and stored[3]["content"][0]["text"] == "seen 3"
    log_id = session.log_id
    types = [r.type for r in mem.reader.records() if r.session == log_id]
    assert types.count("item.added") == 4 and "items.read" in types  # two turns: in, out each
    assert mem.rebuild().state_hash() == mem.state_hash()


_ids = itertools.count()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=5), max_size=4))
def test_items_come_back_exactly_as_added(mem, items):
    session = LedgerSession(f"round trip {next(_ids)}", memory=mem)
    run(session.add_items(items))
    assert _json(run(session.get_items())) == _json(items)  # types too: 1.0 stays a float


def test_items_of_every_shape_the_sdk_makes_round_trip(mem):
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:,", "detail": "auto"},
            ],
        },  # fmt: skip
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "hm"}],
            "encrypted_content": "gAAA",
        },  # fmt: skip
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city": "Paris"}',
            "id": "fc_1",
            "status": "completed",
        },  # fmt: skip
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "18C in Paris", "annotations": []}],
        },  # fmt: skip
        {"type": "x", "score": 1.0, "zero": -0.0, "big": 2**64},  # what canonical JSON would change
    ]
    session = LedgerSession("shapes", memory=mem)
    run(session.add_items(items))
    assert _json(run(session.get_items())) == _json(items)  # key order aside: canonical JSON's
    assert _json(run(session.pop_item())) == _json(items[-1])
    assert _json(run(session.get_items(2))) == _json(items[3:5])
    assert [h.item.content["output"] for h in mem.search("18C", sections=["items"])
            if isinstance(h.item.content, dict) and "output" in h.item.content] == ["18C"]  # fmt: skip


def test_limits_are_the_sqlite_sessions(mem):
    session = LedgerSession("limits", memory=mem, session_settings={"limit": 2})
    items = [{"role": "user", "content": str(n)} for n in range(5)]
    run(session.add_items(items))
    assert run(session.get_items()) == items[-2:]  # the settings' limit
    assert run(session.get_items(3)) == items[-3:]  # an explicit limit wins
    assert run(session.get_items(0)) == []
    assert run(session.get_items(-1)) == items  # SQLite's negative LIMIT: no limit
    other = LedgerSession("limits", memory=mem, session_settings=SessionSettings(limit=1))
    assert run(other.get_items()) == items[-1:]


def test_pop_and_clear_on_an_empty_conversation_do_nothing(mem):
    session = LedgerSession("nothing yet", memory=mem)
    assert run(session.get_items()) == [] and run(session.pop_item()) is None
    run(session.clear_session())
    assert mem.list_sessions() == []


def test_a_bad_item_is_refused_and_nothing_appended(mem):
    session = LedgerSession("bad", memory=mem)
    run(session.add_items([{"role": "user", "content": "ok"}]))
    count = sum(1 for _ in mem.reader.records())
    for bad in (["text"], [{"a": object()}], [{"a": float("nan")}, 3]):
        with pytest.raises(InvalidInput):
            run(session.add_items(bad))
    assert sum(1 for _ in mem.reader.records()) == count


def test_the_conversation_rebuilt_from_the_log_equals_live(tmp_path):
    data = tmp_path / "durable"
    session = LedgerSession("user-123", data_dir=data)
    items = [{"role": "user", "content": f"turn {n}"} for n in range(6)]
    run(session.add_items(items))
    run(session.pop_item())
    live = run(session.get_items())
    state_hash = session.memory.state_hash()
    assert session.memory.rebuild().state_hash() == state_hash
    session.close()
    again = LedgerSession("user-123", data_dir=data)
    assert run(again.get_items()) == live == items[:5]
    again.close()


def test_a_cleared_conversation_leaves_no_content_in_the_files(tmp_path):
    data = tmp_path / "durable"
    session = LedgerSession("to forget", data_dir=data)
    keep = LedgerSession("to keep", memory=session.memory)
    run(session.add_items([{"role": "user", "content": "my passport is XK-ERASE-4471"}]))
    run(keep.add_items([{"role": "user", "content": "kept KEEP-9931"}]))
    assert _files_hold(data, b"XK-ERASE-4471")
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert not _files_hold(data, b"XK-ERASE-4471") and _files_hold(data, b"KEEP-9931")
    assert session.memory.rebuild().state_hash() == session.memory.state_hash()
    session.close()


def test_concurrent_adds_never_lose_an_item(mem):
    async def many():
        sessions = [LedgerSession("shared", memory=mem) for _ in range(4)]
        await asyncio.gather(*(
            asyncio.to_thread(asyncio.run, s.add_items([{"w": w, "n": n}]))
            for w, s in enumerate(sessions) for n in range(10)
        ))  # fmt: skip
        await asyncio.gather(*(s.pop_item() for s in sessions))
        return await sessions[0].get_items()

    got = run(many())
    assert len(got) == 36 and len({(i["w"], i["n"]) for i in got}) == 36
    assert mem.rebuild().state_hash() == mem.state_hash()


def test_the_default_session_is_in_process_and_removed_on_close():
    session = LedgerSession("scratch")
    run(session.add_items([{"role": "user", "content": "hi"}]))
    directory = session.memory.snapshot_dir.parent
    assert directory.name.startswith("ledgermem-agents-")
    assert run(session.get_items()) == [{"role": "user", "content": "hi"}]
    session.close()
    with pytest.raises(RuntimeError):
        run(session.get_items())
    assert not directory.exists()


def test_what_the_sdks_own_session_tests_found(tmp_path):
    # bench/peer_openai_agents.sh: their SQLiteSession tests against ours
    session = LedgerSession("defaults")
    assert isinstance(session.session_settings, SessionSettings)  # the SDK's default, not None
    assert session.session_settings.limit is None
    session.close()
    with pytest.raises(RuntimeError, match="LedgerSession is closed"):
        run(session.add_items([]))  # the empty add does not skip the closed check
    first = LedgerSession("a", data_dir=tmp_path / "one.db")
    second = LedgerSession("b", data_dir=tmp_path / "one.db")  # one directory: one memory
    assert first.memory is second.memory
    run(first.add_items([{"role": "user", "content": "a"}]))
    assert run(second.get_items()) == [] and run(first.get_items()) == [
        {"role": "user", "content": "a"}
    ]
    first.close()
    run(second.add_items([{"role": "user", "content": "b"}]))  # still open for the other
    second.close()


def _example(page: str) -> str:
    text = (Path(__file__).parent.parent / "docs" / "adapters" / page).read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_example_runs(capsys):
    source = _example("openai-agents.md")
    made = 'Agent(name="Assistant", instructions="Reply very concisely.")'
    assert made in source
    model = CountingModel()  # the page's agent, with a local model instead of OpenAI's
    namespace = {"__name__": "example", "local_model": model}
    exec(source.replace(made, made[:-1] + ", model=local_model)"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "seen 3"  # the second turn's model saw the first turn's two items
    assert model.inputs[1][0]["content"] == "What city is the Golden Gate Bridge in?"
    namespace["session"].close()


def test_a_collected_session_gives_its_share_of_a_directory_back(tmp_path):
    import gc

    from sections.adapters import own_memory

    first = LedgerSession("a", data_dir=tmp_path / "d")
    second = LedgerSession("b", data_dir=tmp_path / "d")
    memory = first.memory
    del first
    gc.collect()  # its finalizer only hands the share back: it takes no lock inside the collector
    run(second.add_items([{"role": "user", "content": "still open"}]))
    third = LedgerSession("a", data_dir=tmp_path / "d")  # the share is applied here
    assert third.memory is memory and own_memory._SHARED[(tmp_path / "d").resolve()][1] == 2
    second.close()
    third.close()
    assert (tmp_path / "d").resolve() not in own_memory._SHARED
    again = LedgerSession("b", data_dir=tmp_path / "d")  # closed, so it opens anew
    assert run(again.get_items()) == [{"role": "user", "content": "still open"}]
    again.close()
