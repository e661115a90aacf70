"""Side-by-side measurement of the full-text engines proposed for issue 6: SQLite FTS5, bm25s, tantivy.

Prints one JSON object on stdout (progress on stderr). For every size N (default 10,000 and
100,000 synthetic documents of ~300 bytes) and every engine, a fresh child process (this same
script with --child) builds one index, i.e. one tenant's corpus, and measures:

- build: bulk build time, and peak RSS growth (VmHWM after the build minus VmRSS before it; the
  peak is reset through /proc/self/clear_refs before the build when the kernel allows it);
- query: p50/p95/p99 latency over --queries queries of 1-4 terms (OR semantics, BM25, top_k=10),
  after 20 untimed warm-up queries; the same queries are run twice to check that the order is
  identical; ties (equal scores inside a top 10) are counted, and whether they come in seq order;
- query_filtered: the same queries restricted to one of 100 sessions (FTS5: join to a plain table
  with a session column; tantivy: boolean query with a zero-score term on an indexed session
  field; bm25s: a weight_mask array);
- query_snippet: the same queries plus a snippet with the matched terms marked for each hit
  (FTS5 snippet(), tantivy SnippetGenerator; bm25s has none);
- add: 1,000 documents added one at a time, each visible to search before the next (FTS5: one
  INSERT transaction each; tantivy: add + commit + reload + new searcher each; bm25s has no
  incremental update, so one rebuild of N+1 documents is measured and reported as the per-add
  cost). Visibility is checked, untimed, every 50 adds with a query restricted to the new id;
- delete: 1,000 original documents removed one at a time under the same rules;
- query_after_churn: the query latency again, after the adds and deletes;
- exact_after_churn: the top 10 of every query on the churned index compared with a fresh bulk
  build of the same final set of documents (ids, order, scores): what "rebuild from the log
  gives identical results" needs;
- the CPU loop timed at the start of the child.

Separately, per engine, a child builds 50 small tenant indexes of 200 documents each (one index
per tenant is how all three give score isolation) and reports the time and RSS per tenant.

All indexes are in memory (FTS5 ':memory:', tantivy's RAM directory, bm25s arrays): the search
index is a projection of the log, rebuilt on start-up, so it needs no durability of its own.

Tokenizing: FTS5 'porter unicode61 remove_diacritics 2'; tantivy a registered analyzer
simple -> remove_long(40) -> lowercase -> ascii_fold -> stemmer(english); bm25s a Python
NFKD-fold + lowercase + \\w+ split + PyStemmer english. BM25 k1=1.2, b=0.75 everywhere (FTS5's
and tantivy's fixed values; bm25s set to match, method "lucene").

Corpus: deterministic (fixed seed) Zipf-weighted vocabulary of ~3,000 synthetic English-like
words, ~50 function words at the top ranks, ~400 real English words in inflection families
(connect/connected/connection...) so stemming matters, and a few words with diacritics. Queries
mix real inflected forms (matching other forms only through stemming), unaccented spellings of
accented words, and Zipf-drawn content words.

Usage: python bench/search_engines.py [--sizes 10000,100000] [--queries 200] [--seed 6]
       [--engines fts5,bm25s,tantivy] [--adds 1000] [--deletes 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
import unicodedata
from typing import Any

ENGINES = ("fts5", "bm25s", "tantivy")
TOP_K = 10
N_SESSIONS = 100
SECTIONS = ("messages", "actions", "findings", "documents", "observations")
WARMUP = 20
VISIBILITY_EVERY = 50

# --------------------------------------------------------------------------------------------
# corpus


FUNCTION_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "be",
    "this",
    "from",
    "or",
    "an",
    "are",
    "not",
    "but",
    "have",
    "has",
    "had",
    "they",
    "you",
    "we",
    "he",
    "she",
    "his",
    "her",
    "their",
    "its",
    "which",
    "will",
    "would",
    "can",
    "could",
    "there",
    "been",
    "were",
    "one",
    "all",
    "when",
    "then",
    "so",
    "if",
]

IRREGULAR_FAMILIES = [
    ("connect", "connects", "connected", "connecting", "connection", "connections"),
    ("run", "runs", "running", "runner", "runners"),
    ("store", "stores", "stored", "storing", "storage"),
    ("retrieve", "retrieves", "retrieved", "retrieving", "retrieval"),
    ("memory", "memories"),
    ("agent", "agents"),
    ("query", "queries", "queried", "querying"),
    ("index", "indexes", "indexed", "indexing"),
    ("search", "searches", "searched", "searching"),
    ("decide", "decides", "decided", "deciding", "decision", "decisions"),
    ("discover", "discovers", "discovered", "discovering", "discovery", "discoveries"),
    ("configure", "configures", "configured", "configuring", "configuration", "configurations"),
    ("migrate", "migrates", "migrated", "migrating", "migration", "migrations"),
    ("generate", "generates", "generated", "generating", "generation", "generator"),
    ("relate", "relates", "related", "relating", "relation", "relational"),
    ("happy", "happiness", "happily"),
    ("analyse", "analysed", "analysis", "analyses"),
    ("compute", "computes", "computed", "computing", "computation", "computer"),
    ("organize", "organizes", "organized", "organizing", "organization"),
    ("argue", "argues", "argued", "arguing", "argument", "arguments"),
]
REGULAR_VERBS = [
    "deploy",
    "request",
    "record",
    "report",
    "insert",
    "select",
    "filter",
    "convert",
    "detect",
    "expect",
    "import",
    "export",
    "render",
    "load",
    "stream",
    "restart",
    "mount",
    "print",
    "alert",
    "assign",
    "attach",
    "benchmark",
    "build",
    "check",
    "clear",
    "collect",
    "commit",
    "compress",
    "count",
    "crash",
    "debug",
    "default",
    "delete",
    "design",
    "document",
    "edit",
    "evict",
    "extract",
    "fail",
    "fetch",
    "fix",
    "follow",
    "format",
    "handle",
    "help",
    "ignore",
    "launch",
    "limit",
    "list",
    "lock",
    "log",
    "merge",
    "monitor",
    "open",
    "order",
    "pack",
    "patch",
    "plan",
    "play",
    "post",
    "process",
    "push",
    "queue",
    "read",
    "release",
    "remind",
    "repeat",
    "replay",
    "return",
    "review",
    "rollback",
    "roll",
    "schedule",
    "scan",
    "sign",
    "snapshot",
    "sort",
    "split",
    "start",
    "stop",
    "test",
    "track",
    "train",
    "transform",
    "trust",
    "update",
    "upgrade",
    "verify",
    "view",
    "wait",
    "walk",
    "warn",
    "watch",
    "work",
]
DIACRITIC_WORDS = [
    ("café", "cafe"),
    ("naïve", "naive"),
    ("résumé", "resume"),
    ("façade", "facade"),
    ("jalapeño", "jalapeno"),
    ("crème", "creme"),
    ("über", "uber"),
    ("déjà", "deja"),
]


def _regular_forms(v: str) -> tuple[str, ...]:
    s = v + "es" if v.endswith(("ch", "sh", "x")) else v + "s"
    if v.endswith("e"):
        ed, ing = v + "d", v[:-1] + "ing"
    elif v.endswith("y") and v[-2] not in "aeiou":
        ed, ing = v[:-1] + "ied", v + "ing"
    else:
        ed, ing = v + "ed", v + "ing"
    return (v, s, ed, ing)


def build_vocab(seed: int) -> tuple[list[str], list[float], list[tuple[str, ...]], list[str]]:
    rng = random.Random(seed)
    families = list(IRREGULAR_FAMILIES) + [_regular_forms(v) for v in REGULAR_VERBS]
    real = sorted({w for fam in families for w in fam} - set(FUNCTION_WORDS))
    cons, vows = "bcdfghjklmnprstvwz", "aeiou"
    synth: set[str] = set()
    while len(synth) < 3000:
        n = rng.choice((2, 2, 3, 3, 3, 4))
        w = "".join(
            rng.choice(cons) + rng.choice(vows) + (rng.choice(cons) if rng.random() < 0.3 else "")
            for _ in range(n)
        )
        synth.add(w)
    rest = real + [d for d, _ in DIACRITIC_WORDS] + sorted(synth - set(real))
    rng.shuffle(rest)
    vocab = FUNCTION_WORDS + rest
    cum, acc = [], 0.0
    for r in range(len(vocab)):
        acc += 1.0 / (r + 1) ** 1.0
        cum.append(acc)
    content = rest
    return vocab, cum, families, content


def make_docs(seed: int, n: int, start_seq: int = 1) -> list[tuple[int, int, str, int, str]]:
    """(seq, session, section, ts, text) for n documents of ~300 bytes (UTF-8)."""
    vocab, cum, _, _ = build_vocab(seed)
    rng = random.Random(seed * 1_000_003 + start_seq)
    docs = []
    ts0 = 1_700_000_000_000_000
    for i in range(n):
        seq = start_seq + i
        target = rng.randint(270, 330)
        words = rng.choices(vocab, cum_weights=cum, k=80)
        out, size, sent = [], 0, 0
        for w in words:
            if sent == 0:
                w = w.capitalize()
            sent += 1
            if sent >= rng.randint(8, 14):
                w += "."
                sent = 0
            out.append(w)
            size += len(w.encode()) + 1
            if size >= target:
                break
        text = " ".join(out)
        if not text.endswith("."):
            text += "."
        docs.append(
            (seq, rng.randrange(N_SESSIONS), rng.choice(SECTIONS), ts0 + seq * 1_000_000, text)
        )
    return docs


def make_queries(seed: int, q: int) -> list[tuple[list[str], int]]:
    """q queries of 1-4 terms, each with a session to filter on."""
    vocab, cum, families, content = build_vocab(seed)
    nf = len(FUNCTION_WORDS)
    base = cum[nf - 1]
    ccum = [c - base for c in cum[nf:]]
    rng = random.Random(seed * 7 + q)
    out = []
    for _ in range(q):
        terms = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.45:
                terms.append(rng.choice(rng.choice(families)))
            elif r < 0.55:
                terms.append(rng.choice(rng.choice(DIACRITIC_WORDS)))
            else:
                terms.append(rng.choices(content, cum_weights=ccum, k=1)[0])
        out.append((terms, rng.randrange(N_SESSIONS)))
    return out


# --------------------------------------------------------------------------------------------
# machine


def cpu_loop() -> float:
    t = time.perf_counter()
    acc = 0
    for i in range(2_000_000):
        acc = (acc + i * i) % 1_000_003
    return round(time.perf_counter() - t, 4)


def proc_status() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def pct(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)

    def p(q: float) -> float:
        if not s:
            return float("nan")
        k = (len(s) - 1) * q
        lo, hi = int(k), min(int(k) + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {
        "n": len(s),
        "p50_ms": round(p(0.5) * 1e3, 3),
        "p95_ms": round(p(0.95) * 1e3, 3),
        "p99_ms": round(p(0.99) * 1e3, 3),
        "mean_ms": round(statistics.fmean(s) * 1e3, 3),
        "max_ms": round(s[-1] * 1e3, 3),
    }


# --------------------------------------------------------------------------------------------
# engines: each has build(docs), search(terms, session|None, snippet) -> [(seq, score, snip)],
# add(doc), delete(seq), visible(doc) -> bool, info() -> dict.  Scores: higher is better.


class FTS5:
    name = "fts5"

    def __init__(self) -> None:
        import sqlite3

        self.sqlite3 = sqlite3
        self.con = sqlite3.connect(":memory:", isolation_level=None)
        self.con.execute(
            "CREATE VIRTUAL TABLE t USING fts5(body, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        self.con.execute(
            "CREATE TABLE meta(seq INTEGER PRIMARY KEY, session INTEGER, section TEXT, ts INTEGER)"
        )
        self.con.execute("CREATE INDEX meta_session ON meta(session)")

    @staticmethod
    def versions() -> dict[str, str]:
        import sqlite3

        return {"sqlite": sqlite3.sqlite_version}

    def build(self, docs) -> None:
        c = self.con
        c.execute("BEGIN")
        c.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", ((d[0], d[4]) for d in docs))
        c.executemany(
            "INSERT INTO meta VALUES (?, ?, ?, ?)", ((d[0], d[1], d[2], d[3]) for d in docs)
        )
        c.execute("COMMIT")

    @staticmethod
    def _match(terms) -> str:
        return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)

    def search(self, terms, session=None, snippet=False):
        m = self._match(terms)
        snip = ", snippet(t, 0, '[', ']', '…', 12)" if snippet else ""
        if session is None:
            rows = self.con.execute(
                f"SELECT t.rowid, bm25(t){snip} FROM t WHERE t MATCH ? ORDER BY bm25(t), t.rowid LIMIT ?",
                (m, TOP_K),
            ).fetchall()
        else:
            rows = self.con.execute(
                f"SELECT t.rowid, bm25(t){snip} FROM t JOIN meta m ON m.seq = t.rowid "
                "WHERE t MATCH ? AND m.session = ? ORDER BY bm25(t), t.rowid LIMIT ?",
                (m, session, TOP_K),
            ).fetchall()
        return [(r[0], -r[1], r[2] if snippet else None) for r in rows]

    def add(self, d) -> None:
        c = self.con
        c.execute("BEGIN")
        c.execute("INSERT INTO t(rowid, body) VALUES (?, ?)", (d[0], d[4]))
        c.execute("INSERT INTO meta VALUES (?, ?, ?, ?)", (d[0], d[1], d[2], d[3]))
        c.execute("COMMIT")

    def delete(self, seq) -> None:
        c = self.con
        c.execute("BEGIN")
        c.execute("DELETE FROM t WHERE rowid = ?", (seq,))
        c.execute("DELETE FROM meta WHERE seq = ?", (seq,))
        c.execute("COMMIT")

    def visible(self, d) -> bool:
        terms = re.findall(r"\w+", d[4])[:6]
        return (
            self.con.execute(
                "SELECT count(*) FROM t WHERE t MATCH ? AND rowid = ?", (self._match(terms), d[0])
            ).fetchone()[0]
            > 0
        )

    def info(self) -> dict[str, Any]:
        n = self.con.execute("SELECT count(*) FROM t_data").fetchone()[0]
        return {"fts5_data_blocks": n}


class Tantivy:
    name = "tantivy"

    def __init__(self) -> None:
        import tantivy as tv

        self.tv = tv
        sb = tv.SchemaBuilder()
        sb.add_integer_field("seq", stored=True, indexed=True, fast=True)
        sb.add_integer_field("session", indexed=True, fast=True)
        sb.add_text_field("body", stored=True, tokenizer_name="porter_uni")
        self.schema = sb.build()
        self.index = tv.Index(self.schema)  # RAM directory
        an = (
            tv.TextAnalyzerBuilder(tv.Tokenizer.simple())
            .filter(tv.Filter.remove_long(40))
            .filter(tv.Filter.lowercase())
            .filter(tv.Filter.ascii_fold())
            .filter(tv.Filter.stemmer("english"))
            .build()
        )
        self.index.register_tokenizer("porter_uni", an)
        self.writer = None
        self.searcher = None

    @staticmethod
    def versions() -> dict[str, str]:
        from importlib.metadata import version

        return {"tantivy": version("tantivy")}

    def _doc(self, d):
        return self.tv.Document(seq=d[0], session=d[1], body=d[4])

    def open_writer(self, heap=128_000_000, threads=0) -> None:
        self.writer = self.index.writer(heap_size=heap, num_threads=threads)

    def build(self, docs) -> None:
        if self.writer is None:
            self.open_writer()
        w = self.writer
        for d in docs:
            w.add_document(self._doc(d))
        w.commit()
        self._refresh()

    def _refresh(self) -> None:
        self.index.reload()
        self.searcher = self.index.searcher()

    def search(self, terms, session=None, snippet=False):
        tv, s = self.tv, self.searcher
        q = self.index.parse_query(" ".join(terms), ["body"])
        fq = q
        if session is not None:
            fq = tv.Query.boolean_query(
                [
                    (tv.Occur.Must, q),
                    (
                        tv.Occur.Must,
                        tv.Query.const_score_query(
                            tv.Query.term_query(self.schema, "session", session), 0.0
                        ),
                    ),
                ]
            )
        hits = s.search(fq, TOP_K).hits
        out = []
        gen = tv.SnippetGenerator.create(s, q, self.schema, "body") if snippet and hits else None
        for score, addr in hits:
            doc = s.doc(addr)
            sn = None
            if gen is not None:
                x = gen.snippet_from_doc(doc)
                sn = (x.fragment(), [(h.start, h.end) for h in x.highlighted()])
            out.append((doc["seq"][0], score, sn))
        return out

    def add(self, d) -> None:
        self.writer.add_document(self._doc(d))
        self.writer.commit()
        self._refresh()

    def delete(self, seq) -> None:
        self.writer.delete_documents_by_term("seq", seq)
        self.writer.commit()
        self._refresh()

    def visible(self, d) -> bool:
        tv = self.tv
        terms = re.findall(r"\w+", d[4])[:6]
        q = tv.Query.boolean_query(
            [
                (tv.Occur.Must, self.index.parse_query(" ".join(terms), ["body"])),
                (tv.Occur.Must, tv.Query.term_query(self.schema, "seq", d[0])),
            ]
        )
        return len(self.searcher.search(q, 1).hits) > 0

    def info(self) -> dict[str, Any]:
        return {"num_segments": self.searcher.num_segments, "num_docs": self.searcher.num_docs}


class BM25S:
    name = "bm25s"

    def __init__(self) -> None:
        import bm25s
        import numpy as np
        import Stemmer

        self.bm25s, self.np = bm25s, np
        self.stemmer = Stemmer.Stemmer("english")
        self.word = re.compile(r"\w+")
        self.retriever = None
        self.seqs = None
        self.sessions = None
        self.tokens: list[list[str]] = []  # cached per-document tokens, aligned with seqs

    @staticmethod
    def versions() -> dict[str, str]:
        from importlib.metadata import version

        return {
            "bm25s": version("bm25s"),
            "PyStemmer": version("PyStemmer"),
            "numpy": version("numpy"),
        }

    def tok(self, text: str) -> list[str]:
        t = unicodedata.normalize("NFKD", text)
        t = "".join(c for c in t if not unicodedata.combining(c)).lower()
        return self.stemmer.stemWords(self.word.findall(t))

    def index_tokens(self, docs, tokens) -> None:
        np = self.np
        r = self.bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        r.index(tokens, show_progress=False)
        self.retriever = r
        self.docs = list(docs)
        self.tokens = tokens
        self.seqs = np.array([d[0] for d in docs], dtype=np.int64)
        self.sessions = np.array([d[1] for d in docs], dtype=np.int64)
        self._mask_cache: dict[int, Any] = {}

    def build(self, docs) -> None:
        self.index_tokens(docs, [self.tok(d[4]) for d in docs])

    def search(self, terms, session=None, snippet=False):
        np = self.np
        q = self.tok(" ".join(terms))
        kw = {}
        if session is not None:
            m = self._mask_cache.get(session)
            if m is None:
                m = (self.sessions == session).astype(np.float32)
                self._mask_cache[session] = m
            kw["weight_mask"] = m
        ids, scores = self.retriever.retrieve([q], k=TOP_K, show_progress=False, **kw)
        return [
            (int(self.seqs[i]), float(s), None)
            for i, s in zip(ids[0], scores[0], strict=True)
            if s > 0
        ]

    def visible(self, d) -> bool:
        return bool((self.seqs == d[0]).any())

    def info(self) -> dict[str, Any]:
        return {"vocab": len(self.retriever.vocab_dict)}


CLASSES = {"fts5": FTS5, "tantivy": Tantivy, "bm25s": BM25S}


# --------------------------------------------------------------------------------------------
# child


def run_queries(eng, queries, session=False, snippet=False):
    lat, res = [], []
    for terms, sess in queries:
        t = time.perf_counter()
        r = eng.search(terms, sess if session else None, snippet)
        lat.append(time.perf_counter() - t)
        res.append(r)
    return lat, res


def tie_stats(results) -> dict[str, int]:
    pairs = in_order = queries_with_ties = 0
    for r in results:
        had = False
        for (s1, sc1, _), (s2, sc2, _) in zip(r, r[1:], strict=False):
            if sc1 == sc2:
                pairs += 1
                had = True
                in_order += s1 < s2
        queries_with_ties += had
    return {
        "queries_with_ties": queries_with_ties,
        "tied_adjacent_pairs": pairs,
        "tied_pairs_in_seq_order": in_order,
    }


def ids(results) -> list[list[int]]:
    return [[h[0] for h in r] for r in results]


def child(engine: str, n: int, nq: int, seed: int, n_add: int, n_del: int) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu_loop_s": cpu_loop()}
    try:
        cls = CLASSES[engine]
        eng = cls()
        out["versions"] = cls.versions()
    except Exception as e:  # import failure, missing native lib
        return {"skipped": f"{type(e).__name__}: {e}"}
    docs = make_docs(seed, n)
    extra = make_docs(seed, n_add, start_seq=n + 1)
    queries = make_queries(seed, nq)
    warm = make_queries(seed + 1, WARMUP)
    out["corpus"] = {
        "docs": n,
        "mean_doc_bytes": round(statistics.fmean(len(d[4].encode()) for d in docs), 1),
    }

    st0 = proc_status()
    out["peak_reset"] = reset_peak()
    st0b = proc_status()
    t = time.perf_counter()
    eng.build(docs)
    build_s = time.perf_counter() - t
    st1 = proc_status()
    out["build"] = {
        "seconds": round(build_s, 3),
        "rss_before_kb": st0.get("VmRSS"),
        "hwm_before_kb": st0b.get("VmHWM"),
        "hwm_after_kb": st1.get("VmHWM"),
        "rss_after_kb": st1.get("VmRSS"),
        "peak_growth_kb": (st1.get("VmHWM", 0) - st0.get("VmRSS", 0)),
        "retained_growth_kb": (st1.get("VmRSS", 0) - st0.get("VmRSS", 0)),
    }

    run_queries(eng, warm)
    lat, res = run_queries(eng, queries)
    lat2, res2 = run_queries(eng, queries)
    out["query"] = pct(lat)
    out["query_second_pass"] = pct(lat2)
    out["deterministic_repeat"] = ids(res) == ids(res2) and [[h[1] for h in r] for r in res] == [
        [h[1] for h in r] for r in res2
    ]
    out["ties"] = tie_stats(res)
    out["hits_per_query_mean"] = round(statistics.fmean(len(r) for r in res), 2)
    out["top_ids"] = ids(res)  # used by the parent for cross-engine overlap, then dropped

    flat, fres = run_queries(eng, queries, session=True)
    out["query_filtered"] = pct(flat)
    out["query_filtered"]["hits_per_query_mean"] = round(statistics.fmean(len(r) for r in fres), 2)
    if engine == "bm25s":
        out["query_snippet"] = {"skipped": "bm25s has no snippet/highlight API"}
    else:
        slat, sres = run_queries(eng, queries, snippet=True)
        out["query_snippet"] = pct(slat)
        ex = next((r[0][2] for r in sres if r), None)
        out["query_snippet"]["example"] = ex if isinstance(ex, str) else (ex[0] if ex else None)
    out["info_after_build"] = eng.info()

    rng = random.Random(seed * 31 + n)
    del_seqs = rng.sample(range(1, n + 1), n_del)
    by_seq = {d[0]: d for d in docs}
    dset = set(del_seqs)
    final_docs = sorted([d for d in docs if d[0] not in dset] + extra)

    if engine == "bm25s":
        # no incremental update: every add/delete is a rebuild.  Measure one of each, both from
        # cached tokens (the best an integration could do) and with re-tokenizing everything.
        base_docs, base_toks = eng.docs, eng.tokens
        d = extra[0]
        t = time.perf_counter()
        eng.index_tokens(base_docs + [d], base_toks + [eng.tok(d[4])])
        add_cached = time.perf_counter() - t
        ok_add = eng.visible(d)
        t = time.perf_counter()
        eng.build(base_docs + [d])
        add_full = time.perf_counter() - t
        keep = [i for i, x in enumerate(eng.docs) if x[0] != del_seqs[0]]
        t = time.perf_counter()
        eng.index_tokens([eng.docs[i] for i in keep], [eng.tokens[i] for i in keep])
        del_cached = time.perf_counter() - t
        ok_del = not eng.visible(by_seq[del_seqs[0]])
        out["add"] = {
            "ops": 1,
            "per_op_ms": round(add_cached * 1e3, 3),
            "per_op_full_retokenize_ms": round(add_full * 1e3, 3),
            "method": "rebuild of N+1 docs from cached tokens (per_op_ms) / re-tokenizing all",
            "visible_checks_ok": f"{int(ok_add)}/1",
        }
        out["delete"] = {
            "ops": 1,
            "per_op_ms": round(del_cached * 1e3, 3),
            "method": "rebuild of N docs from cached tokens",
            "invisible_checks_ok": f"{int(ok_del)}/1",
        }
        t = time.perf_counter()
        eng.build(final_docs)
        out["churn_rebuild_s"] = round(time.perf_counter() - t, 3)
    else:
        if engine == "tantivy":
            out["writer"] = "heap 128 MB, default threads, kept open"
        lat_add, ok = [], 0
        for i, d in enumerate(extra):
            t = time.perf_counter()
            eng.add(d)
            lat_add.append(time.perf_counter() - t)
            if i % VISIBILITY_EVERY == 0:
                ok += eng.visible(d)
        out["add"] = pct(lat_add) | {
            "ops": len(extra),
            "total_s": round(sum(lat_add), 3),
            "visible_checks_ok": f"{ok}/{len(range(0, len(extra), VISIBILITY_EVERY))}",
        }
        out["info_after_adds"] = eng.info()
        lat_del, ok = [], 0
        for i, s in enumerate(del_seqs):
            t = time.perf_counter()
            eng.delete(s)
            lat_del.append(time.perf_counter() - t)
            if i % VISIBILITY_EVERY == 0:
                ok += not eng.visible(by_seq[s])
        out["delete"] = pct(lat_del) | {
            "ops": len(del_seqs),
            "total_s": round(sum(lat_del), 3),
            "invisible_checks_ok": f"{ok}/{len(range(0, len(del_seqs), VISIBILITY_EVERY))}",
        }
        out["info_after_churn"] = eng.info()
    st2 = proc_status()
    out["hwm_end_kb"] = st2.get("VmHWM")

    run_queries(eng, warm)
    lat, res_churn = run_queries(eng, queries)
    out["query_after_churn"] = pct(lat)

    fresh = cls()
    fresh.build(final_docs)
    _, res_fresh = run_queries(fresh, queries)
    same_ids = sum(ids([a]) == ids([b]) for a, b in zip(res_churn, res_fresh, strict=True))
    same_set = sum(
        set(ids([a])[0]) == set(ids([b])[0]) for a, b in zip(res_churn, res_fresh, strict=True)
    )
    maxdiff = 0.0
    for a, b in zip(res_churn, res_fresh, strict=True):
        for x, y in zip(a, b, strict=False):
            maxdiff = max(maxdiff, abs(x[1] - y[1]))
    out["exact_after_churn"] = {
        "queries": len(queries),
        "same_ids_and_order": same_ids,
        "same_id_set": same_set,
        "max_abs_score_diff_rankwise": round(maxdiff, 6),
    }
    return out


def tenants_child(engine: str, tenants: int, per: int, seed: int) -> dict[str, Any]:
    try:
        cls = CLASSES[engine]
        cls()
    except Exception as e:
        return {"skipped": f"{type(e).__name__}: {e}"}
    corpora = [make_docs(seed + 100 + k, per) for k in range(tenants)]
    queries = make_queries(seed, 50)
    st0 = proc_status()
    t = time.perf_counter()
    engs = []
    for docs in corpora:
        e = cls()
        if engine == "tantivy":
            e.open_writer(heap=15_000_000, threads=1)  # tantivy's minimum heap, kept open for adds
        e.build(docs)
        engs.append(e)
    dt = time.perf_counter() - t
    st1 = proc_status()
    lat = []
    for i, (terms, _) in enumerate(queries):
        e = engs[i % tenants]
        t0 = time.perf_counter()
        e.search(terms)
        lat.append(time.perf_counter() - t0)
    return {
        "tenants": tenants,
        "docs_per_tenant": per,
        "build_ms_per_tenant": round(dt / tenants * 1e3, 3),
        "rss_growth_kb_per_tenant": round((st1.get("VmRSS", 0) - st0.get("VmRSS", 0)) / tenants, 1),
        "writer": "tantivy: one writer per tenant, heap 15 MB, 1 thread, kept open"
        if engine == "tantivy"
        else None,
        "query": pct(lat),
    }


# --------------------------------------------------------------------------------------------
# parent


def spawn(args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout}s"}
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-800:]}"}
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": f"bad output: {p.stdout[-300:]!r} {p.stderr[-300:]!r}"}


def overlap(a: list[list[int]], b: list[list[int]]) -> float:
    js = []
    for x, y in zip(a, b, strict=True):
        sx, sy = set(x), set(y)
        if sx or sy:
            js.append(len(sx & sy) / len(sx | sy))
    return round(statistics.fmean(js), 3) if js else float("nan")


def lib_versions() -> dict[str, str | None]:
    import sqlite3
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"sqlite": sqlite3.sqlite_version}
    for p in ("bm25s", "PyStemmer", "tantivy", "numpy"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--adds", type=int, default=1000)
    ap.add_argument("--deletes", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--tenants-child", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        print(json.dumps(child(a.child, a.n, a.queries, a.seed, a.adds, a.deletes)))
        return
    if a.tenants_child:
        print(json.dumps(tenants_child(a.tenants_child, a.tenants, 200, a.seed)))
        return

    sizes = [int(x) for x in a.sizes.split(",") if x]
    engines = [e for e in a.engines.split(",") if e]
    started = time.time()
    noise: dict[str, Any] = {
        "loadavg_start": os.getloadavg(),
        "cpu_loop_start_s": [cpu_loop() for _ in range(3)],
    }
    results: dict[str, Any] = {}
    for n in sizes:
        row: dict[str, Any] = {}
        for e in engines:
            print(f"[search_engines] {e} N={n} ...", file=sys.stderr, flush=True)
            t = time.perf_counter()
            row[e] = spawn(
                [
                    "--child",
                    e,
                    "--n",
                    str(n),
                    "--queries",
                    str(a.queries),
                    "--seed",
                    str(a.seed),
                    "--adds",
                    str(a.adds),
                    "--deletes",
                    str(a.deletes),
                ],
                a.timeout,
            )
            row[e]["child_wall_s"] = round(time.perf_counter() - t, 2)
        tops = {e: row[e].pop("top_ids") for e in engines if "top_ids" in row[e]}
        names = sorted(tops)
        row["top10_jaccard_between_engines"] = {
            f"{x}~{y}": overlap(tops[x], tops[y])
            for i, x in enumerate(names)
            for y in names[i + 1 :]
        }
        results[str(n)] = row
    tenants: dict[str, Any] = {}
    if a.tenants > 0:
        for e in engines:
            print(f"[search_engines] {e} tenants ...", file=sys.stderr, flush=True)
            tenants[e] = spawn(
                ["--tenants-child", e, "--tenants", str(a.tenants), "--seed", str(a.seed)],
                a.timeout,
            )
    noise["loadavg_end"] = os.getloadavg()
    noise["cpu_loop_end_s"] = [cpu_loop() for _ in range(3)]
    noise["cpu_loop_per_child_s"] = {
        f"{e}@{n}": results[n][e].get("cpu_loop_s")
        for n in results
        for e in engines
        if isinstance(results[n].get(e), dict)
    }
    out = {
        "bench": "search_engines",
        "params": {
            "sizes": sizes,
            "queries": a.queries,
            "top_k": TOP_K,
            "seed": a.seed,
            "adds": a.adds,
            "deletes": a.deletes,
            "sessions": N_SESSIONS,
            "warmup_queries": WARMUP,
            "query_semantics": "OR of 1-4 terms, BM25 k1=1.2 b=0.75",
        },
        "machine": {
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "versions": lib_versions(),
        "noise": noise,
        "results": results,
        "tenant_overhead": tenants,
        "wall_s": round(time.time() - started, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
