"""LangGraph's checkpointer on ledgermem (sections/adapters/langgraph.py): a real compiled graph
runs on `LedgerSaver` (invoke, interrupt and resume, history, update_state and fork), the state
rebuilt from the log equals the live one, a deleted thread leaves no content in the files, and
concurrent runs on one thread never lose a checkpoint.
"""

from __future__ import annotations

import asyncio
import operator
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from eventstore.file_sink import Durability  # noqa: E402
from sections.adapters.langgraph import LedgerSaver  # noqa: E402
from sections.adapters.langgraph_records import session_of  # noqa: E402
from sections.errors import ConfigError  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class State(TypedDict):
    steps: Annotated[list[str], operator.add]
    n: int


def graph_on(saver: LedgerSaver):
    """Two nodes, no model: `a` adds one, `b` doubles; the run stops before `b`."""
    builder = StateGraph(State)
    builder.add_node("a", lambda s: {"steps": ["a"], "n": s["n"] + 1})
    builder.add_node("b", lambda s: {"steps": ["b"], "n": s["n"] * 2})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver, interrupt_before=["b"])


def segment_bytes(memory: Memory) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(Path(memory.log_dir).iterdir()) if p.is_file())


def snapshot(saver: LedgerSaver) -> list:
    """Everything list() gives, as comparable values."""
    return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
            for t in saver.list(None)]  # fmt: skip


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


def test_a_compiled_graph_runs_interrupts_resumes_and_forks(mem):
    graph = graph_on(LedgerSaver(mem))
    config = {"configurable": {"thread_id": "chat 1"}}  # not a log identifier: encoded
    assert graph.invoke({"steps": [], "n": 1}, config) == {"steps": ["a"], "n": 2}
    paused = graph.get_state(config)
    assert paused.next == ("b",) and paused.values == {"steps": ["a"], "n": 2}

    assert graph.invoke(None, config) == {"steps": ["a", "b"], "n": 4}  # resume
    history = list(graph.get_state_history(config))
    assert [s.values.get("n") for s in history] == [4, 2, 1, None]
    assert history[0].next == () and history[1].next == ("b",)

    # Time travel: fork from the pause, with n changed, and run the rest from there.
    forked = graph.update_state(history[1].config, {"n": 10})
    assert graph.invoke(None, forked) == {"steps": ["a", "b"], "n": 20}
    assert graph.get_state(config).values["n"] == 20  # the thread's newest is the fork's end
    # The first run's end is still there, by its checkpoint id.
    assert graph.get_state(history[0].config).values == {"steps": ["a", "b"], "n": 4}
    assert len(list(graph.get_state_history(config))) == 6
    # Every checkpoint is a record of the thread's session, in the log.
    session = session_of("chat 1")
    puts = [r for r in mem.reader.records() if r.session == session and r.type == "item.added"]
    assert len(puts) >= 6


def test_reads_that_return_content_are_traced_and_others_append_nothing(mem):
    saver = LedgerSaver(mem)
    graph_on(saver).invoke({"steps": [], "n": 1}, {"configurable": {"thread_id": "t"}})
    head = mem.reader.head()
    assert saver.get_tuple({"configurable": {"thread_id": "unknown"}}) is None
    assert saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_id": "none"}}) is None
    assert mem.reader.head() == head
    found = saver.get_tuple({"configurable": {"thread_id": "t"}})
    read = mem.reader.get(mem.reader.head())
    assert read.type == "items.read" and read.session == session_of("t")
    assert found.config["configurable"]["checkpoint_id"] == found.checkpoint["id"]


def test_async_runs_see_what_sync_runs_wrote(mem):
    saver = LedgerSaver(mem)
    graph = graph_on(saver)
    config = {"configurable": {"thread_id": "t-async"}}

    async def run():
        await graph.ainvoke({"steps": [], "n": 3}, config)
        await graph.ainvoke(None, config)
        return [s async for s in graph.aget_state_history(config)]

    history = asyncio.run(run())
    assert [s.values.get("n") for s in history] == [8, 4, 3, None]
    assert [s.values.get("n") for s in graph.get_state_history(config)] == [8, 4, 3, None]


def test_state_rebuilt_from_the_log_equals_live(tmp_path):
    data = tmp_path / "data"
    saver = LedgerSaver(data_dir=data)
    graph = graph_on(saver)
    for thread in ("t1", "t2"):
        config = {"configurable": {"thread_id": thread}}
        graph.invoke({"steps": [], "n": 1}, config)
        graph.invoke(None, config)
    saver.put_writes(next(saver.list({"configurable": {"thread_id": "t1"}})).config,
                     [("steps", ["pending"])], "task-1")  # fmt: skip
    live = snapshot(saver)
    live_hash = saver.memory.state_hash()
    saver.close()

    reopened = LedgerSaver(data_dir=data)
    try:
        assert reopened.memory.state_hash() == live_hash
        assert snapshot(reopened) == live
        assert live[0][4] == [("task-1", "steps", ["pending"])]
        config = {"configurable": {"thread_id": "t1"}}
        assert graph_on(reopened).get_state(config).values == {"steps": ["a", "b"], "n": 4}
    finally:
        reopened.close()


CHILD = """
import sys
from langgraph.checkpoint.base.id import uuid6
from sections.adapters.langgraph import LedgerSaver

saver = LedgerSaver(data_dir=sys.argv[1])
config = {"configurable": {"thread_id": "crash", "checkpoint_ns": ""}}
i = 0
while True:
    checkpoint = {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": "", "versions_seen": {},
                  "channel_values": {"i": i}, "channel_versions": {"i": i + 1},
                  "pending_sends": [], "updated_channels": None}
    got = saver.put(config, checkpoint, {"step": i}, {"i": i + 1})
    saver.put_writes(got, [("out", i)], "task")
    print(got["configurable"]["checkpoint_id"], i, flush=True)  # both puts have returned
    config = got
    i += 1
"""


def test_every_put_that_returned_survives_kill_9(tmp_path):
    data = tmp_path / "data"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert child.stdout is not None
    returned = [child.stdout.readline().split() for _ in range(40)]
    child.send_signal(signal.SIGKILL)
    child.wait()
    with LedgerSaver(data_dir=data) as saver:
        for checkpoint_id, i in returned:
            config = {"configurable": {"thread_id": "crash", "checkpoint_id": checkpoint_id}}
            found = saver.get_tuple(config)
            assert found is not None, f"put {i} returned but is lost"
            assert found.checkpoint["channel_values"] == {"i": int(i)}
            assert found.pending_writes == [("task", "out", int(i))]


def test_a_deleted_thread_leaves_no_content_in_the_files(mem):
    saver = LedgerSaver(mem)
    graph = graph_on(saver)
    gone, kept = {"configurable": {"thread_id": "gone"}}, {"configurable": {"thread_id": "kept"}}
    for config in (gone, kept):
        graph.invoke({"steps": [], "n": 1}, config)
        graph.invoke(None, config)
    saver.put_writes(next(saver.list(gone)).config, [("steps", ["a pending write"])], "task-1")
    stored = [v.content for v in saver._session("gone").get("checkpoints")]
    blobs = [c["checkpoint"]["b64"] for c in stored if "checkpoint" in c]
    blobs += [c["value"]["b64"] for c in stored if "value" in c]
    kept_blobs = [c["checkpoint"]["b64"] for c in
                  (v.content for v in saver._session("kept").get("checkpoints")) if "checkpoint" in c]  # fmt: skip
    blobs = [b for b in blobs if len(b) >= 24]  # a short one is in any file by chance
    assert len(blobs) >= 5
    before = segment_bytes(mem)
    assert all(b.encode() in before for b in blobs)

    saver.delete_thread("gone")
    after = segment_bytes(mem)
    assert not [b for b in blobs if b.encode() in after]
    assert all(b.encode() in after for b in kept_blobs)  # the other thread is untouched
    assert saver.get_tuple(gone) is None and list(saver.list(gone)) == []
    assert graph.get_state(kept).values["n"] == 4
    # The thread can start again; its new checkpoints are new records.
    graph.invoke({"steps": [], "n": 5}, gone)
    assert graph.get_state(gone).values == {"steps": ["a"], "n": 6}


def test_pruned_and_deleted_runs_leave_no_content_in_the_files(mem):
    saver = LedgerSaver(mem)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    parent = None
    made = []
    for step in range(3):
        cfg = {"configurable": {**config["configurable"]}}
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent
        checkpoint = {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": "2026-01-01T00:00:00+00:00",
                      "channel_values": {"x": f"value-{step}"}, "channel_versions": {"x": step + 1},
                      "versions_seen": {}, "pending_sends": [], "updated_channels": None}  # fmt: skip
        made.append(saver.put(cfg, checkpoint, {"step": step, "run_id": f"run-{step}"}, {"x": 1}))
        parent = made[-1]["configurable"]["checkpoint_id"]
    blob = {v.metadata["checkpoint_id"]: v.content["checkpoint"]["b64"]
            for v in saver._session("t").get("checkpoints")}  # fmt: skip
    saver.delete_for_runs(["run-0"])
    files = segment_bytes(mem)
    ids = [m["configurable"]["checkpoint_id"] for m in made]
    assert blob[ids[0]].encode() not in files and blob[ids[1]].encode() in files
    saver.prune(["t"])
    files = segment_bytes(mem)
    assert blob[ids[1]].encode() not in files and blob[ids[2]].encode() in files
    assert [t.checkpoint["channel_values"] for t in saver.list(config)] == [{"x": "value-2"}]


def test_concurrent_runs_on_one_thread_never_lose_a_checkpoint(mem):
    saver = LedgerSaver(mem)
    config = {"configurable": {"thread_id": "busy", "checkpoint_ns": ""}}
    writers, each = 8, 25
    stored: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(writers)

    def put_many(worker: int) -> None:
        start.wait()
        for k in range(each):
            checkpoint = {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": "", "versions_seen": {},
                          "channel_values": {"who": [worker, k]}, "channel_versions": {"who": 1},
                          "pending_sends": [], "updated_channels": None}  # fmt: skip
            got = saver.put(config, checkpoint, {"step": k, "worker": worker}, {"who": 1})
            saver.put_writes(got, [("out", worker * 1000 + k)], f"task-{worker}")
            with lock:
                stored.append(got["configurable"]["checkpoint_id"])

    threads = [threading.Thread(target=put_many, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def put_async(worker: int) -> None:
        for k in range(each):
            checkpoint = {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": "", "versions_seen": {},
                          "channel_values": {"who": [worker, k]}, "channel_versions": {},
                          "pending_sends": [], "updated_channels": None}  # fmt: skip
            got = await saver.aput(config, checkpoint, {"step": k, "worker": worker}, {})
            stored.append(got["configurable"]["checkpoint_id"])

    async def main() -> None:
        await asyncio.gather(*(put_async(w) for w in range(writers, writers + 4)))

    asyncio.run(main())
    listed = {t.checkpoint["id"]: t for t in saver.list(config)}
    assert len(stored) == (writers + 4) * each
    assert set(listed) == set(stored)  # every put is readable, none twice, none lost
    for t in listed.values():
        worker, k = t.checkpoint["channel_values"]["who"]
        assert (t.metadata["worker"], t.metadata["step"]) == (worker, k)
        if worker < writers:
            assert t.pending_writes == [(f"task-{worker}", "out", worker * 1000 + k)]


def test_with_no_argument_it_is_in_process_and_removed_on_close():
    saver = LedgerSaver()
    root = saver.memory.data.root
    graph_on(saver).invoke({"steps": [], "n": 1}, {"configurable": {"thread_id": "x"}})
    assert Path(root).is_dir() and list(saver.list(None))
    saver.close()
    assert not Path(root).exists()


def test_any_thread_id_comes_back_exactly(mem):
    saver = LedgerSaver(mem)
    graph = graph_on(saver)
    ids = ["plain-1", "chat 1", "Zoë / ∞", "x" * 300]  # a log id, escaped, unicode, hashed
    for thread_id in ids:
        graph.invoke({"steps": [], "n": 1}, {"configurable": {"thread_id": thread_id}})
    listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert listed == set(ids)
    for thread_id in ids:
        assert graph.get_state({"configurable": {"thread_id": thread_id}}).values["n"] == 2


def test_memory_and_data_dir_together_are_refused(mem, tmp_path):
    with pytest.raises(ConfigError):
        LedgerSaver(mem, data_dir=tmp_path / "other")


def test_importing_ledgermem_imports_no_langgraph():
    code = ("import sys, eventstore, sections, streams, replay, ledgermem_cli\n"
            "import sections.runtime.memory, sections.adapters.jaf\n"
            "assert not [m for m in sys.modules if m.startswith(('langgraph', 'langchain'))]")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_the_docs_example_runs(tmp_path, monkeypatch, capsys):
    """docs/adapters/langgraph.md's example, as it stands, in a scratch working directory."""
    text = (ROOT / "docs" / "adapters" / "langgraph.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("langgraph_doc_example")  # LangGraph reads State's hints from it
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(example, "docs/adapters/langgraph.md", "exec"), module.__dict__)
    assert capsys.readouterr().out == "ok\n"
    assert (tmp_path / "data" / "log").is_dir()  # the durable form's data directory
