"""LangGraph's long-term store on ledgermem (sections/adapters/langgraph_store.py): namespaces
as sessions, keys as items; get, put, delete, search ranked by the memory's own ranking with
LangGraph's filters, namespaces listed; every put a record, every read traced, the store
rebuilt from the log equal to the live one, an erased namespace gone from the files.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp  # noqa: E402

from eventstore.errors import InvalidInput  # noqa: E402
from eventstore.file_sink import Durability  # noqa: E402
from sections.adapters.langgraph import LedgerSaver  # noqa: E402
from sections.adapters.langgraph_store import LedgerStore, session_of  # noqa: E402
from sections.model.config import MemoryConfig  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402

DOCS = {
    "coffee": {"text": "likes dark roast coffee, espresso in the morning", "rank": 3},
    "pet": {"text": "has a cat named Miso", "rank": 5, "tags": ["home"]},
    "tea": {"text": "sometimes green tea instead of coffee", "rank": 1},
}


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield memory
    memory.close()


@pytest.fixture
def store(mem):
    store = LedgerStore(mem)
    for key, value in DOCS.items():
        store.put(("users", "ana", "memories"), key, value)
    store.put(("users", "bo", "memories"), "coffee", {"text": "no coffee, ever", "rank": 2})
    return store


def types_of(mem: Memory, session: str) -> list[str]:
    return [r.type for r in mem.reader.records() if r.session == session]


def test_put_get_update_delete_are_records(mem, store):
    ns = ("users", "ana", "memories")
    got = store.get(ns, "pet")
    assert got is not None and got.value == DOCS["pet"] and got.namespace == ns
    store.put(ns, "pet", {"text": "has two cats", "rank": 6})
    again = store.get(ns, "pet")
    assert again.value == {"text": "has two cats", "rank": 6}
    assert again.created_at == got.created_at and again.updated_at > got.updated_at
    store.delete(ns, "pet")
    assert store.get(ns, "pet") is None and store.get(ns, "nothing") is None
    types = types_of(mem, session_of(ns))
    assert types.count("item.added") == 3 and "item.updated" in types and "item.removed" in types
    assert types.count("items.read") == 2  # a get that finds nothing reads nothing


def test_search_ranks_as_the_memory_does(mem, store):
    hits = store.search(("users",), query="coffee espresso")
    ranked = mem.search("coffee espresso", sessions=sorted({session_of(h.namespace) for h in hits}),
                        sections=["store"], top_k=10)  # fmt: skip
    assert [(session_of(h.namespace), h.key) for h in hits] == [
        (h.session, h.item.metadata["key"]) for h in ranked
    ]
    assert hits[0].key == "coffee" and hits[0].namespace == ("users", "ana", "memories")
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.key for h in store.search(("users", "bo"), query="coffee")} == {"coffee"}
    coffee = store.search(("users",), query="coffee")
    second = store.search(("users",), query="coffee", limit=1, offset=1)
    assert [(i.namespace, i.key) for i in second] == [(coffee[1].namespace, coffee[1].key)]


def test_search_filters_and_lists_without_a_query(store):
    ns = ("users", "ana", "memories")
    assert {h.key for h in store.search(ns, filter={"rank": {"$gte": 3}})} == {"coffee", "pet"}
    assert [h.key for h in store.search(ns, filter={"tags": ["home"]})] == ["pet"]
    assert [h.key for h in store.search(("users",), query="coffee", filter={"rank": 2})] == [
        "coffee"
    ]
    everything = store.search(("users",), limit=10)
    assert len(everything) == 4 and all(h.score is None for h in everything)
    assert [h.updated_at for h in everything] == sorted((h.updated_at for h in everything),
                                                         reverse=True)  # fmt: skip


def test_unindexed_values_are_kept_but_not_searched(store):
    ns = ("users", "cy")
    store.put(ns, "secret", {"text": "coffee notes"}, index=False)
    assert store.get(ns, "secret").value == {"text": "coffee notes"}
    assert [h.key for h in store.search(ns, query="coffee")] == []
    assert [h.key for h in store.search(ns)] == ["secret"]
    store.put(ns, "secret", {"text": "coffee notes"})  # indexed now
    assert [h.key for h in store.search(ns, query="coffee")] == ["secret"]


def test_namespaces_are_listed_matched_and_truncated(store):
    store.put(("docs", "ana"), "a", {"x": 1})
    assert store.list_namespaces() == [("docs", "ana"), ("users", "ana", "memories"),
                                       ("users", "bo", "memories")]  # fmt: skip
    assert store.list_namespaces(prefix=("users",), max_depth=2) == [("users", "ana"),
                                                                      ("users", "bo")]  # fmt: skip
    assert store.list_namespaces(prefix=("users", "*", "memories"), limit=1, offset=1) == [
        ("users", "bo", "memories")
    ]
    assert store.list_namespaces(suffix=("ana",)) == [("docs", "ana")]
    store.delete(("docs", "ana"), "a")
    assert ("docs", "ana") not in store.list_namespaces()


def test_bad_namespaces_and_values_are_refused_and_append_nothing(mem, store):
    head = mem.reader.head()
    for bad in [(), ("langgraph", "x"), ("a.b",), ("",)]:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(bad, "k", {"v": 1})])
    for value in [{"when": datetime.now(UTC)}, {"n": float("nan")}, ["not", "a", "dict"]]:
        with pytest.raises(InvalidInput):
            store.batch([PutOp(("a", "new", "namespace"), "k", value)])
    assert mem.reader.head() == head
    assert store.list_namespaces(prefix=("a",)) == []


def test_the_store_rebuilt_from_the_log_equals_live(tmp_path):
    data = tmp_path / "data"
    store = LedgerStore(data_dir=data)
    for key, value in DOCS.items():
        store.put(("users", "ana"), key, value)
    store.put(("users", "ana"), "tea", {"text": "only green tea", "rank": 9})
    store.delete(("users", "ana"), "pet")
    live = [(i.key, i.value, i.created_at, i.updated_at) for i in store.search(("users",))]
    ranked = [(i.key, i.score) for i in store.search(("users",), query="green tea coffee")]
    store.close()
    reopened = LedgerStore(data_dir=data)
    try:
        assert [(i.key, i.value, i.created_at, i.updated_at)
                for i in reopened.search(("users",))] == live  # fmt: skip
        assert [
            (i.key, i.score) for i in reopened.search(("users",), query="green tea coffee")
        ] == ranked
    finally:
        reopened.close()


def test_an_erased_namespace_leaves_no_content_in_the_files(mem, store):
    store.put(("users", "zed"), "k", {"text": "zed's unmistakable marker 7f3a"})
    files = lambda: b"".join(p.read_bytes() for p in Path(mem.log_dir).iterdir() if p.is_file())  # noqa: E731
    assert b"unmistakable marker 7f3a" in files()
    store.erase_namespace(("users", "zed"))
    assert b"unmistakable marker 7f3a" not in files()
    assert store.get(("users", "zed"), "k") is None
    assert b"likes dark roast coffee" in files()  # other namespaces are untouched
    assert store.get(("users", "ana", "memories"), "coffee").value == DOCS["coffee"]


def test_async_batches(store):
    async def run():
        await store.aput(("users", "dee"), "k", {"text": "async value"})
        return await store.abatch([GetOp(("users", "dee"), "k"),
                                   SearchOp(("users", "dee"), query="async")])  # fmt: skip

    got, hits = asyncio.run(run())
    assert got.value == {"text": "async value"} and [h.key for h in hits] == ["k"]


class State(TypedDict):
    said: Annotated[list[str], operator.add]


def test_a_graph_remembers_across_threads_through_the_store():
    saver, store = LedgerSaver(), LedgerStore()

    def remember(state: State, runtime: Runtime) -> dict:
        assert runtime.store is not None
        runtime.store.put(("notes",), state["said"][-1], {"text": state["said"][-1]})
        return {}

    def recall(state: State, runtime: Runtime) -> dict:
        assert runtime.store is not None
        return {"said": [h.value["text"] for h in runtime.store.search(("notes",), query="tea")]}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    graph = builder.compile(checkpointer=saver, store=store)
    try:
        graph.invoke({"said": ["I like green tea"]}, {"configurable": {"thread_id": "one"}})
        out = graph.invoke({"said": ["hello"]}, {"configurable": {"thread_id": "two"}})
        assert out["said"] == ["hello", "I like green tea"]
    finally:
        saver.close()
        store.close()


class Clock:
    """The store's time, moved by the test (microseconds)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000_000

    def __call__(self) -> int:
        return self.now

    def minutes(self, m: float) -> None:
        self.now += int(m * 60_000_000)


def test_a_key_past_its_ttl_is_never_returned_and_a_sweep_removes_it(mem):
    clock = Clock()
    store = LedgerStore(mem, ttl={"default_ttl": 10, "refresh_on_read": False}, clock=clock)
    store.put(("s",), "short", {"text": "short lived tea"})  # the default: 10 minutes
    store.put(("s",), "long", {"text": "long lived tea"}, ttl=60)
    store.put(("s",), "forever", {"text": "kept tea"}, ttl=None)
    clock.minutes(11)
    assert store.get(("s",), "short") is None
    assert {h.key for h in store.search(("s",), query="tea")} == {"long", "forever"}
    assert {h.key for h in store.search(("s",))} == {"long", "forever"}
    store.put(("s",), "short", {"text": "back again"}, ttl=None)  # a new value, no expiry
    assert store.get(("s",), "short").value == {"text": "back again"}
    clock.minutes(50)
    assert store.sweep_ttl() == 2  # the first "short" and "long"
    assert store.sweep_ttl() == 0
    assert {h.key for h in store.search(("s",))} == {"short", "forever"}
    removed = [r for r in mem.reader.records() if r.type == "item.removed"]
    assert sum(len(ids) for r in removed for ids in r.payload["items"].values()) == 2


def test_a_read_refreshes_a_ttl_when_asked(mem):
    clock = Clock()
    store = LedgerStore(mem, ttl={"default_ttl": 10}, clock=clock)  # refresh_on_read: True
    store.put(("r",), "k", {"text": "refreshed"})
    store.put(("r",), "other", {"text": "not read"})
    clock.minutes(8)
    assert store.get(("r",), "k") is not None  # its expiry moves to minute 18
    assert store.get(("r",), "other", refresh_ttl=False) is not None
    clock.minutes(8)
    assert store.get(("r",), "k").value == {"text": "refreshed"}
    assert store.get(("r",), "other") is None


def test_a_ttl_sweeper_thread_runs_and_stops_on_close(mem):
    clock = Clock()
    store = LedgerStore(mem, ttl={"sweep_interval_minutes": 0.0001}, clock=clock)  # 6 ms
    store.put(("w",), "k", {"text": "gone soon"}, ttl=1)
    clock.minutes(2)
    deadline = 0
    while store.memory.read(lambda s: any(sec.items for sess in s.sessions.values()
                                          for sec in sess.sections.values())):  # fmt: skip
        deadline += 1
        assert deadline < 10_000, "the sweeper never removed the expired key"
        threading.Event().wait(0.005)
    store.close()
    assert store._sweeper is not None and not store._sweeper.is_alive()


def test_with_the_semantic_extra_search_finds_paraphrases(tmp_path):
    """The memory's hybrid ranking (docs/recall.md): no word of the query is in the value."""
    pytest.importorskip("sentence_transformers")
    config = MemoryConfig(recall_semantic=True)
    with Memory.open(
        tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC, config=config
    ) as mem:
        store = LedgerStore(mem)
        store.put(("u",), "pet", {"text": "has a cat named Miso"})
        store.put(("u",), "drink", {"text": "likes green tea"})
        store.put(("u",), "job", {"text": "works as a nurse at night"})
        assert mem.settle(120)
        assert store.search(("u",), query="feline companion")[0].key == "pet"
        assert store.search(("u",), query="favourite beverage")[0].key == "drink"
        assert (
            store.search(("u",), query="feline", filter={"text": "likes green tea"})[0].key
            == "drink"
        )


def test_concurrent_puts_of_one_key_leave_one_value_and_a_delete_leaves_none(mem):
    store = LedgerStore(mem)
    start = threading.Barrier(8)
    failed: list[BaseException] = []

    def put(worker: int) -> None:
        start.wait()
        try:
            for round_ in range(5):
                store.put(("c",), "k", {"w": worker, "round": round_})
        except BaseException as error:
            failed.append(error)

    threads = [threading.Thread(target=put, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    got = store.get(("c",), "k")
    assert got is not None and got.value["round"] == 4
    assert [h.value for h in store.search(("c",))] == [got.value]
    store.delete(("c",), "k")
    assert store.get(("c",), "k") is None and store.search(("c",)) == []
    held = store.memory.read(lambda s: [i for sess in s.sessions.values()
                                        for sec in sess.sections.values() for i in sec.items])  # fmt: skip
    assert held == []  # no older duplicate comes back after the delete


def test_a_saver_and_a_store_on_one_data_directory_share_its_memory(tmp_path):
    """One writer per data directory: the adapters of a process given the same directory stand
    on one memory, which stays open until the last of them closes."""
    from sections.adapters.langgraph import LedgerSaver

    saver = LedgerSaver(data_dir=tmp_path / "data")
    store = LedgerStore(data_dir=tmp_path / "data")
    assert store.memory is saver.memory
    saver.close()
    store.put(("users", "ana"), "pet", {"text": "a cat named Miso"})
    assert store.get(("users", "ana"), "pet").value == {"text": "a cat named Miso"}
    store.close()
    assert saver.memory.writer.closed
