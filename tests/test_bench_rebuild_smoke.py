"""bench/rebuild.py runs and prints one JSON object with its figures (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_rebuild_bench_prints_one_json_object(tmp_path):
    command = [sys.executable, str(ROOT / "bench" / "rebuild.py"), "--data", str(tmp_path / "d")]
    command += ["--records", "3000", "--fold-records", "1000", "--snapshot-at", "1499"]
    command += ["--tree", f"B={ROOT}", "--order", "B"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (run,) = report["runs"]
    assert run["rebuild"]["rebuild_equals_live_state"] is True
    assert run["fold"]["records"] == 1000
    assert run["state_with_snapshots"]["at"] > 1499
    assert report["summary"]["fold_cpu_us_per_record"]["means"]["B"] > 0
