"""bench/append.py runs end to end and prints one JSON object with every figure it promises.

No timing is asserted: this only keeps the benchmark from rotting.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "append.py"
SCENARIO_KEYS = {
    "records_per_s",
    "ack_ms",
    "ratio_to_floor",
    "ratio_to_append_step_ceiling",
    "group_commits",
    "records_per_commit",
    "fdatasyncs_per_record",
    "segment_fdatasyncs",
    "fsync_count_method",
    "cpu_us_per_record",
}


def test_quick_append_bench_prints_one_json_object_with_the_promised_keys(tmp_path):
    out = tmp_path / "append.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--seconds", "0.3", "--dir", str(tmp_path)]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(run.stdout)  # raises on anything but exactly one JSON value

    assert result["bench"] == "append"
    assert result["config"]["durability"] == "fsync"
    assert {"loadavg_1m_before", "cpu_idle_before"} <= result["machine"].keys()
    for moment in ("start", "end"):
        assert {"p50_ms", "p99_ms"} <= result["disk_noise"][moment].keys()
    assert result["floor"]["records_per_s"] > 0
    for family in ("threads", "asyncio"):
        assert set(result["results"][family]) == {"1", "8", "64"}
        for figures in result["results"][family].values():
            assert figures.keys() >= SCENARIO_KEYS
            assert {"p50", "p99"} <= figures["ack_ms"].keys()
        assert set(result["pass"][family]) == {"records_per_s", "ack_p99", "both"}
    assert result["targets"] == {
        "concurrency": 64,
        "records_per_s_min": 50_000,
        "ack_p99_ms_max": 20.0,
    }
    assert result["peak_rss_mib"] > 0
    assert json.loads(out.read_text()) == result
    assert not list(tmp_path.glob("ledgermem-bench-*")), "the temporary data directory is left"
