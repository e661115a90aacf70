"""Search as shipped (sections/retrieval/search.py through `Memory`): query latency, update cost, rebuild, RSS.

Prints one JSON object. For each size N (10,000 and 100,000 documents of ~300 bytes, the corpus
of bench/search_engines.py), a child process of its own (so peak RSS is per size):

- loads N documents into a memory (batches of 100 per record, 100 sessions, `documents`);
- `query`: the index alone (BM25 top 10 plus snippets), p50/p95/p99 over --queries queries;
  `query_filtered`: the same restricted to one session; `memory_search`: `Memory.search`,
  which also appends the `items.read` records of the hits (no fsync: the log is opened with
  UNSAFE_NO_FSYNC so the figure is the search, not the disk);
- `query_after_reopen`: `query` again on the index built at open (one merged b-tree per
  tenant) rather than the one that grew add by add;
- `update`: single adds into a searchable section and into a section that is not searchable,
  interleaved in blocks in the same run; the difference per add is what the index costs;
- `rebuild`: a whole `Memory.open` (state and index from the snapshot that close wrote), and
  building the index from the state instead, as an open without a usable snapshot does;
- `rss`: the child's RSS before and after reopening (state plus index), the index database's own
  size, and the child's peak;
- at the smallest size, `naive`: building a fresh index of every document for each query, as some
  peers do, against the incremental index, as a ratio of medians.

Usage: python bench/search.py [--sizes 10000,100000] [--queries 200] [--naive-queries 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from search_engines import cpu_loop, make_docs, make_queries, pct, proc_status  # noqa: E402

from eventstore.writer import Durability  # noqa: E402
from sections.retrieval.search import Query, SearchIndex  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402

SEED = 6
SESSIONS = 100
BATCH = 100
PLAIN = {"plain": {"budget_tokens": None, "policy": "none", "searchable": False}}


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def _load(mem: Memory, n: int) -> None:
    by_session: dict[int, list[dict]] = {}
    for _, session, _, _, text in make_docs(SEED, n):
        by_session.setdefault(session, []).append({"content": text})
    sessions = {i: mem.session(f"s{i}", sections=PLAIN) for i in range(SESSIONS)}
    for i, docs in sorted(by_session.items()):
        for start in range(0, len(docs), BATCH):
            sessions[i].add_many("documents", docs[start : start + BATCH])


def _queries(count: int) -> list[tuple[str, str]]:
    return [(" ".join(terms), f"s{session}") for terms, session in make_queries(SEED, count)]


def _update_cost(mem: Memory, adds: int) -> dict:
    """Single adds, searchable vs not, interleaved in blocks of 50 in the same run."""
    s = mem.session("updates", sections=PLAIN)
    texts = [text for *_, text in make_docs(SEED + 1, adds * 2)]
    spent = {"documents": 0.0, "plain": 0.0}
    for block in range(0, adds, 50):
        for section in ("documents", "plain") if block % 100 == 0 else ("plain", "documents"):
            start = time.perf_counter()
            for i in range(block, min(block + 50, adds)):
                s.add(section, texts[2 * i + (section == "plain")])
            spent[section] += time.perf_counter() - start
    searchable, plain = spent["documents"] / adds * 1e6, spent["plain"] / adds * 1e6
    return {
        "adds_each": adds,
        "searchable_add_us": round(searchable, 1),
        "plain_add_us": round(plain, 1),
        "index_cost_per_add_us": round(searchable - plain, 1),
        "ratio_searchable_to_plain": round(searchable / plain, 3),
    }


def _top10(index: SearchIndex, qs: list[tuple[str, str]]) -> list:
    return [[(h.id, h.score) for h in index.search("default", Query(t))] for t, _ in qs[:50]]


def child(n: int, queries: int, naive_queries: int) -> dict:
    out: dict = {"docs": n, "cpu_loop_start_s": cpu_loop()}
    with tempfile.TemporaryDirectory(prefix="ledgermem-search-") as tmp:
        data = Path(tmp) / "data"
        options = {"durability": Durability.UNSAFE_NO_FSYNC, "snapshot_every": 10**9}
        mem = Memory.open(data, **options)
        seconds, _ = _timed(_load, mem, n)
        out["load_s"] = round(seconds, 2)
        qs = _queries(queries)
        index = mem.search_index
        for text, _ in qs[:20]:  # warm-up
            index.search("default", Query(text))
        lat, cpu, hits = [], [], 0
        for text, _ in qs:
            cpu_start = time.thread_time()
            took, found = _timed(index.search, "default", Query(text))
            cpu.append(time.thread_time() - cpu_start)
            lat.append(took)
            hits += len(found)
        out["query"] = {**pct(lat), "mean_hits": round(hits / len(qs), 2)}
        # This thread's CPU per query: on a shared machine the wall figures above include time
        # spent waiting for a core; this is the figure to compare across runs.
        out["query_cpu"] = pct(cpu)
        out["query_filtered"] = pct(
            [_timed(index.search, "default", Query(t, sessions=(s,)))[0] for t, s in qs]
        )
        out["memory_search"] = pct([_timed(mem.search, t)[0] for t, _ in qs])
        out["update"] = _update_cost(mem, 1000)
        first = _top10(index, qs)
        if naive_queries:
            naive = []
            for text, _ in qs[:naive_queries]:
                start = time.perf_counter()
                fresh = SearchIndex()
                mem.read(lambda state, fresh=fresh: fresh.build(state, mem.history.content_of))
                fresh.search("default", Query(text))
                naive.append(time.perf_counter() - start)
                fresh.close()
            out["naive"] = {
                "rebuild_index_per_query": pct(naive),
                "ratio_naive_to_incremental_p50": round(
                    pct(naive)["p50_ms"] / out["query"]["p50_ms"], 1
                ),
            }
        mem.close()

        before = proc_status()
        seconds, mem = _timed(Memory.open, data, **options)
        after = proc_status()
        out["rebuild"] = {"memory_open_s": round(seconds, 3), "index_from": mem.search_index_source}
        out["rss"] = {
            "before_open_mib": round(before.get("VmRSS", 0) / 1024, 1),
            "after_open_mib": round(after.get("VmRSS", 0) / 1024, 1),
            "index_db_mib": round(mem.search_index.size_bytes() / 2**20, 1),
        }
        fresh = SearchIndex()
        seconds, _ = _timed(mem.read, lambda state: fresh.build(state, mem.history.content_of))
        out["rebuild"]["index_build_s"] = round(seconds, 3)
        out["rebuild"]["docs_per_s"] = round(len(fresh) / seconds)
        fresh.close()
        out["rebuild"]["same_top10_after_reopen"] = _top10(mem.search_index, qs) == first
        lat, cpu = [], []
        for text, _ in qs:  # the index as built at open (merged), not as it grew
            cpu_start = time.thread_time()
            lat.append(_timed(mem.search_index.search, "default", Query(text))[0])
            cpu.append(time.thread_time() - cpu_start)
        out["query_after_reopen"] = pct(lat)
        out["query_after_reopen_cpu"] = pct(cpu)
        out["rss"]["peak_mib"] = round(proc_status().get("VmHWM", 0) / 1024, 1)
        mem.close()
    out["cpu_loop_end_s"] = cpu_loop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--naive-queries", type=int, default=20)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.queries, args.naive_queries)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    result: dict = {
        "bench": "search",
        "python": platform.python_version(),
        "loadavg_start": os.getloadavg(),
        "sizes": [],
    }
    for i, n in enumerate(sizes):
        command = [sys.executable, __file__, "--child", str(n), "--queries", str(args.queries),
                   "--naive-queries", str(args.naive_queries if i == 0 else 0)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        result["sizes"].append(json.loads(done.stdout))
    result["loadavg_end"] = os.getloadavg()
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
