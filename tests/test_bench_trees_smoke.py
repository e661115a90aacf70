"""bench/trees.py --smoke runs each bench it supports on the same tree twice and prints one JSON
object: a run per tree, every figure of its table found, a positive finite ratio per figure.

No timing is asserted: this only keeps the side-by-side tool and its figure table from rotting
(a bench whose JSON moves a figure fails here, not in a comparison run).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ROOT / "bench" / "trees.py"


@pytest.mark.parametrize("bench", ["append", "memory", "http_app", "http_writes"])
def test_smoke_run_on_the_same_tree_twice(bench, tmp_path):
    command = [sys.executable, str(TREES), "--tree", f"A={ROOT}", "--tree", f"B={ROOT}"]
    command += ["--order", "AB", "--smoke", "--dir", str(tmp_path), "--", bench]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # raises on anything but exactly one JSON value

    assert report["measured"] == bench
    assert [r["tree"] for r in report["runs"]] == ["A", "B"]
    assert report["tree_checks_ok"], [r["children"] for r in report["runs"]]
    for tree in ("A", "B"):
        assert report["trees"][tree]["imports_ok"]
    for run in report["runs"]:
        assert {"loadavg_1m_before", "machine_idle", "neighbour_cores"} <= run["noise"].keys()
        assert all(v is not None for v in run["figures"].values()), run["figures"]
    assert report["summary"], "no figure"
    for name, figure in report["summary"].items():
        assert figure["better"] in ("lower", "higher")
        for ratio in (figure["ratio"]["B"], *figure["pair_ratios"]["B"]):
            assert isinstance(ratio, float) and math.isfinite(ratio) and ratio > 0, (name, ratio)
    assert not list(tmp_path.glob("ledgermem-bench-*")), "a temporary directory is left"
