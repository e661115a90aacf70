"""bench/recall.py runs end to end on LoCoMo's development half (a few questions per
conversation), and what it prints says recall found the evidence more often than the plain
BM25 reference over the same turns and never crossed users. The data lives beside the
repository, not in it: without it the test skips outside CI and fails in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"


def test_the_recall_bench_prints_its_figures():
    if not DATA.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI has LoCoMo's development half at {DATA}; it is missing")
        pytest.skip("LoCoMo's development half is not beside the repository")
    done = subprocess.run(
        [sys.executable, "bench/recall.py", "--limit", "6", "--semantic", "off"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)["semantic_off"]
    assert out["privacy"]["foreign_items_in_contexts"] == 0
    assert sum(out["questions"].values()) == 30
    ours, plain = out["context"]["2000"]["all"], out["reference_bm25"]["context"]["2000"]["all"]
    assert ours >= plain and ours > 0.5
    assert out["ingest"]["turns"] == 2760 and out["latency_ms"]["assemble_2000_p95"] > 0
