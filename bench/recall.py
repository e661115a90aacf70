"""Recall on LoCoMo's development half: does the context hold the relevant past? (docs/recall.md)

Prints one JSON object. The data is LoCoMo's development half, `locomo-dev.json` (the first five
of the ten conversations of snap-research/LoCoMo's data/locomo10.json: long two-person
conversations over many dated sessions, questions whose evidence turns are labelled), read from
the shared data folder beside the repository, or `--data PATH`. It is not in the repository.
Categories 1-4 with evidence count; 5 (adversarial) has none to find.

- **Ingest.** One tenant; each conversation is one user (`user_id` metadata), each of its
  sessions one ledgermem session (its date as the `date` metadata), each turn one `messages` item
  added on its own, a durable write (fsync), as an agent would write it: `ingest.turns_per_s`
  and the CPU per turn.
- **Questions.** Each question is asked from a new session of its user (one per user, reused:
  assembly adds no items), through the public API:
  - `search`: `Memory.search(question, scope="user", session=...)`; recall of an evidence turn in
    the top 5, 10 and 20 hits;
  - `context`: `assemble(budget, query=question, observations=20, summaries=5)` at each budget;
    an evidence turn counts when the record's manifest names it (and its text is in the
    messages: checked);
  - `reference_bm25`: a plain BM25 (SQLite FTS5, the same tokenizer, the question's words ORed)
    over the same user's turns, computed in the same run: top 5/10/20, and the top turns that
    fit each budget as bare `speaker: text` lines;
  - `privacy`: items of another user in any context (must be 0);
  - `latency_ms`: context assembly at 2,000 tokens, p50/p95, and the CPU per assembly.
- `--scale N` adds N filler items (other users' sessions, 100-item batches) before the
  questions, so assembly's latency is measured in a tenant of that size.
- `--recall off`: contexts assembled without recall, the baseline it is measured against.
- `--semantic on|off|both`: the whole run with the semantic extra on, off, or both side by side
  (the default when the extra is installed), with `on_vs_off` ratios.

Usage: python bench/recall.py [--data PATH] [--scale 100000] [--limit Q] [--semantic off]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from sections.model.config import MemoryConfig  # noqa: E402
from sections.model.tokens import counter_named  # noqa: E402
from sections.retrieval import semantic  # noqa: E402
from sections.retrieval.search import TOKENIZER, match_expression  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"
BUDGETS = (1000, 2000, 4000)
TOPS = (5, 10, 20)
CATEGORIES = (1, 2, 3, 4)
TENANT = "locomo"


def turns_of(conversation: dict) -> list[tuple[int, str, dict]]:
    """(session number, its date, turn) in the conversation's order."""
    out = []
    numbers = sorted(
        int(m.group(1)) for k in conversation if (m := re.fullmatch(r"session_(\d+)", k))
    )
    for n in numbers:
        date = conversation[f"session_{n}_date_time"]
        out.extend((n, date, turn) for turn in conversation[f"session_{n}"])
    return out


def turn_text(turn: dict) -> str:
    caption = turn.get("blip_caption")
    return turn["text"] + (f" [shares a photo: {caption}]" if caption else "")


def questions_of(sample: dict) -> list[dict]:
    return [q for q in sample["qa"] if q.get("category") in CATEGORIES and q.get("evidence")]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Reference:
    """Plain BM25 over one user's turns: the figure recall is compared with."""

    def __init__(self, lines: list[tuple[str, str]]) -> None:  # (dia_id, "speaker: text")
        self.lines = lines
        self.db = sqlite3.connect(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize = '{TOKENIZER}')")
        self.db.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)",
                            [(i, text) for i, (_, text) in enumerate(lines)])  # fmt: skip

    def ranked(self, question: str) -> list[int]:
        expression = match_expression(question)
        if expression is None:
            return []
        sql = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid LIMIT 400"
        return [row for (row,) in self.db.execute(sql, (expression,))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--scale", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="questions per conversation (0: all)")
    parser.add_argument("--semantic", choices=("on", "off", "both"), default=None,
                        help="default: both when the extra is installed, else off")  # fmt: skip
    parser.add_argument("--recall", choices=("on", "off"), default="on",
                        help="off: the context as it was before recall (the baseline)")  # fmt: skip
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"no data at {args.data}: give --data PATH to LoCoMo's locomo-dev.json")
    samples = json.loads(args.data.read_text())
    modes = {"on": [True], "off": [False], "both": [False, True]}[
        args.semantic or ("both" if semantic.available() else "off")
    ]
    out: dict = {"bench": "recall", "data": args.data.name, "machine": platform.node(),
                 "cpus": os.cpu_count(), "scale": args.scale, "load_before": os.getloadavg()}  # fmt: skip
    for on in modes:
        out["semantic_on" if on else "semantic_off"] = run(samples, on, args)
    if len(modes) == 2:
        off, on_ = out["semantic_off"], out["semantic_on"]
        out["on_vs_off"] = {
            "ingest_rate": round(on_["ingest"]["turns_per_s"] / off["ingest"]["turns_per_s"], 3),
            "cpu_per_turn": round(on_["ingest"]["cpu_ms_per_turn"] / off["ingest"]["cpu_ms_per_turn"], 3),
            "context_2000": round(on_["context"]["2000"]["all"] - off["context"]["2000"]["all"], 3),
            "search_top10": round(on_["search_top"]["10"]["all"] - off["search_top"]["10"]["all"], 3),
        }  # fmt: skip
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))


def run(samples: list[dict], on: bool, args: argparse.Namespace) -> dict:
    """One whole run, the semantic extra on or off: ingest, then every question."""
    counter = counter_named("o200k_base")
    out: dict = {}
    hits_at: Counter = Counter()
    ctx_at: Counter = Counter()
    ref_at: Counter = Counter()
    ref_ctx_at: Counter = Counter()
    totals: Counter = Counter()
    foreign = 0
    latencies: list[float] = []
    cpu_per_assembly: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = MemoryConfig(recall_semantic=on)
        mem = Memory.open(Path(tmp) / "data", tenant=TENANT, config=config)
        try:
            ingest_wall = ingest_cpu = 0.0
            turns_total = 0
            users: list[tuple[dict, dict[str, str], set[str], str]] = []
            for i, sample in enumerate(samples):
                user = f"user-{i}"
                by_item: dict[str, str] = {}
                sessions: set[str] = set()
                current = None
                for n, date, turn in turns_of(sample["conversation"]):
                    sid = f"c{i}-s{n}"
                    if sid != current:
                        mem.session(sid, metadata={"user_id": user, "date": date})
                        sessions.add(sid)
                        current = sid
                    session = mem.session(sid, create=False)
                    wall, cpu = time.perf_counter(), time.process_time()
                    view = session.add("messages", turn_text(turn), role="user",
                                       name=turn["speaker"])  # fmt: skip
                    ingest_wall += time.perf_counter() - wall
                    ingest_cpu += time.process_time() - cpu
                    turns_total += 1
                    by_item[view.id] = turn["dia_id"]
                ask = f"c{i}-ask"
                mem.session(ask, metadata={"user_id": user})
                sessions.add(ask)
                users.append((sample, by_item, sessions, ask))
            out["ingest"] = {"turns": turns_total,
                             "turns_per_s": round(turns_total / ingest_wall, 1),
                             "cpu_ms_per_turn": round(1000 * ingest_cpu / turns_total, 3)}  # fmt: skip
            if args.scale:
                filler(mem, args.scale)
            wall, cpu = time.perf_counter(), time.process_time()
            mem.settle()  # the embeddings of everything written (none without the extra)
            out["settle"] = {"wall_s": round(time.perf_counter() - wall, 2),
                             "cpu_s": round(time.process_time() - cpu, 2)}  # fmt: skip
            for sample, by_item, sessions, ask in users:
                session = mem.session(ask, create=False)
                dia_of = by_item
                lines = [(t["dia_id"], f"{t['speaker']}: {turn_text(t)}")
                         for _, _, t in turns_of(sample["conversation"])]  # fmt: skip
                reference = Reference(lines)
                questions = questions_of(sample)
                if args.limit:
                    questions = questions[: args.limit]
                for q in questions:
                    category = q["category"]
                    evidence = set(q["evidence"])
                    totals[category] += 1
                    text = q["question"]
                    hits = mem.search(text, scope="user", session=ask, top_k=max(TOPS))
                    found = [dia_of.get(h.item.id) for h in hits]
                    for k in TOPS:
                        if evidence & set(found[:k]):
                            hits_at[(k, category)] += 1
                    ranked = reference.ranked(text)
                    for k in TOPS:
                        if evidence & {lines[r][0] for r in ranked[:k]}:
                            ref_at[(k, category)] += 1
                    for budget in BUDGETS:
                        spent, inside = 0, set()
                        for r in ranked:
                            cost = counter.count(lines[r][1]) + 1
                            if spent + cost > budget:
                                break
                            spent += cost
                            inside.add(lines[r][0])
                        if evidence & inside:
                            ref_ctx_at[(budget, category)] += 1
                        wall, cpu = time.perf_counter(), time.process_time()
                        record, messages = session.assemble(
                            budget,
                            query=text,
                            observations=20,
                            summaries=5,
                            recall=args.recall == "on",
                        )
                        if budget == 2000:
                            latencies.append(1000 * (time.perf_counter() - wall))
                            cpu_per_assembly.append(1000 * (time.process_time() - cpu))
                        manifest = record.payload["manifest"]
                        named = {e["id"] for e in manifest if e.get("session") in sessions}
                        foreign += sum(
                            1 for e in manifest
                            if e.get("session") not in sessions and e.get("session") != "_tenant"
                        )  # fmt: skip
                        assert record.payload["tokens"] <= budget
                        got = {dia_of[i] for i in named if i in dia_of}
                        if evidence & got:
                            ctx_at[(budget, category)] += 1
                            rendered = orjson.dumps(messages).decode()
                            assert any(orjson.dumps(t)[1:-1].decode() in rendered
                                       for d, t in lines if d in evidence & got)  # fmt: skip
        finally:
            mem.close()

    def rates(counts: Counter, keys: tuple[int, ...]) -> dict:
        total = sum(totals.values())
        result = {}
        for k in keys:
            result[str(k)] = {
                "all": round(sum(counts[(k, c)] for c in CATEGORIES) / total, 3),
                **{
                    f"cat{c}": round(counts[(k, c)] / totals[c], 3) for c in CATEGORIES if totals[c]
                },
            }
        return result

    out["questions"] = dict(sorted((f"cat{c}", n) for c, n in totals.items()))
    out["search_top"] = rates(hits_at, TOPS)
    out["context"] = rates(ctx_at, BUDGETS)
    out["reference_bm25"] = {"top": rates(ref_at, TOPS), "context": rates(ref_ctx_at, BUDGETS)}
    out["privacy"] = {"foreign_items_in_contexts": foreign}
    out["latency_ms"] = {"assemble_2000_p50": round(statistics.median(latencies), 2),
                         "assemble_2000_p95": round(pct(latencies, 95), 2),
                         "cpu_ms_per_assembly": round(statistics.mean(cpu_per_assembly), 2)}  # fmt: skip
    return out


FILLER_WORDS = """dinner project weekend family travel music painting hiking book movie work school
garden recipe concert camping photo dog cat friend birthday job city beach game coffee park doctor
car house paint yoga class team trip sister brother"""


def filler(mem: Memory, n: int) -> None:
    """`n` items of other users, in sessions of 100 turns of plausible chat."""
    rng = random.Random(7)
    words = FILLER_WORDS.split()
    for start in range(0, n, 100):
        session = mem.session(f"filler-{start // 100}", metadata={"user_id": f"filler-{start % 7}"})
        batch = [{"content": " ".join(rng.choices(words, k=rng.randint(8, 30))), "role": "user",
                  "name": f"speaker{rng.randint(0, 9)}"} for _ in range(min(100, n - start))]  # fmt: skip
        session.add_many("messages", batch)


if __name__ == "__main__":
    main()
