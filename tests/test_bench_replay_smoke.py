"""bench/replay.py runs and prints one JSON object with its figures (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_replay_bench_prints_one_json_object(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "replay.py"),
            "--quick",
            "--records",
            "3000",
            "--keep",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in (
        "replay",
        "state",
        "verify_jobs2",
        "floor_read_and_parse_records_per_s",
        "rss_by_length_mib",
        "meets",
    ):
        assert key in report
    assert report["records"] >= 2990
