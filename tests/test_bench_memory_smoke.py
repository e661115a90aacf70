"""bench/memory.py --quick runs end to end and prints one JSON object with every figure it promises.

No timing is asserted: this only keeps the benchmark from rotting.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "memory.py"
ADD_KEYS = {
    "adds_per_s",
    "add_ms",
    "cpu_us_per_add",
    "writer_thread_cpu_us_per_add",
    "evictions_per_add",
    "group_commits",
    "records_per_commit",
    "ratio_to_raw_append",
}
OPEN_KEYS = {
    "open_s",
    "records",
    "open_records_per_s",
    "live_items",
    "sessions",
    "ru_maxrss_mib",
    "vm_hwm_mib",
    "current_rss_mib_after_open",
}


def test_quick_memory_bench_prints_one_json_object_with_the_promised_keys(tmp_path):
    out = tmp_path / "memory.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(run.stdout)  # raises on anything but exactly one JSON value

    assert result["bench"] == "memory"
    assert result["config"]["durability_adds"] == "fsync"
    for moment in ("start", "end"):
        assert {"head", "uncommitted"} <= result["code"][moment].keys()
    for moment in ("start", "end"):
        noise = result["noise"][moment]
        assert {"loadavg", "cpu_idle", "busiest_other_processes"} <= noise.keys()
        assert {"p50_ms", "p99_ms"} <= noise["fdatasync"].keys()
    for family in ("threads", "asyncio"):
        assert set(result["adds"][family]) == {
            "64_sessions_full",
            "1_sessions_full",
            "64_sessions_fresh",
            "1_sessions_fresh",
        }
        for figures in result["adds"][family].values():
            assert figures.keys() >= ADD_KEYS
            assert {"p50", "p99"} <= figures["add_ms"].keys()
        assert result["raw_append"][family]["appends_per_s"] > 0
    rebuild = result["rebuild"]
    assert rebuild.keys() >= OPEN_KEYS | {
        "rebuild_records_per_s",
        "rebuild_records_per_cpu_s",
        "open_records_per_cpu_s",
        "floors",
        "snapshot",
        "ratios",
    }
    for floor in rebuild["floors"].values():
        assert {"records_per_s", "records_per_cpu_s", "machine_idle"} <= floor.keys()
    assert rebuild["rebuild_equals_live_state"] is True
    assert {"write_s", "bytes"} <= rebuild["snapshot"].keys()
    assert result["restart_from_snapshot"]["snapshot_present"]
    assert result["restart_from_snapshot"].keys() >= OPEN_KEYS
    for label in ("small", "big"):
        assert result["rss"][label].keys() >= OPEN_KEYS
        assert result["rss"][label]["snapshot_present"] is None
    assert set(result["pass"]) == {
        "adds_64_sessions_full",
        "adds_any_scenario",
        "rebuild",
        "rebuild_via_open",
        "rebuild_per_cpu_s",
        "restart_from_snapshot",
    }
    assert result["peak_rss_mib"] > 0
    assert json.loads(out.read_text()) == result
    assert not list(tmp_path.glob("ledgermem-bench-memory-*")), "the temporary directory is left"
