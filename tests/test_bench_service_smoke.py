"""bench/http_writes.py and bench/fanout.py --quick run end to end against a real server and print one
JSON object with every figure they promise.

No timing is asserted: this only keeps the benchmarks from rotting.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
LATENCY_KEYS = {"p50", "p90", "p99", "max", "n"}
CPU_KEYS = {
    "server_cores",
    "server_loop_thread_cores",
    "server_kernel_share",
    "client_cores",
    "machine_busy_cores",
    "neighbour_cores_est",
}


def run_bench(script: str, name: str, tmp_path: Path) -> dict:
    """Run bench/<script>.py --quick; `name` is the bench's name in its JSON and temp dirs."""
    out = tmp_path / f"{name}.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), "--quick", "--dir", str(tmp_path)]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout)  # raises on anything but exactly one JSON value
    assert json.loads(out.read_text()) == result
    assert not list(tmp_path.glob(f"ledgermem-bench-{name}-*")), "a temporary directory is left"
    return result


def test_quick_http_bench_prints_one_json_object_with_the_promised_keys(tmp_path):
    result = run_bench("http_writes", "http", tmp_path)

    assert result["bench"] == "http"
    assert result["config"]["durability"] == "fsync"
    assert result["config"]["connections"] == 32
    for moment in ("noise_start", "noise_end"):
        assert {"loadavg", "busy_cores", "busiest_other_processes"} <= result["machine"][
            moment
        ].keys()
    assert result["targets"] == {"single_writes_per_s_min": 3_000, "batch_items_per_s_min": 50_000}
    for mode in ("single", "batch"):
        figures = result["results"]["shipped"][mode]
        assert figures.keys() >= CPU_KEYS | {
            "writes_per_s",
            "items_per_s",
            "latency_ms",
            "server_cpu_us_per_write",
            "server_cpu_us_per_item",
            "fdatasyncs",
            "records_per_fdatasync",
            "ratio_to_raw_append",
            "ratio_to_fsync_each_ceiling",
            "server_rss_mib",
            "errors",
        }
        assert figures["latency_ms"].keys() == LATENCY_KEYS
        assert figures["errors"] == {}, figures["first_error"]
        assert figures["server_exit_code"] == 0
        raw = result["raw_append"][mode]
        assert {
            "appends_per_s",
            "latency_ms",
            "cpu_us_per_append",
            "items_per_append",
        } <= raw.keys()
    assert set(result["pass"]["shipped"]) == {"single", "batch"}


def test_quick_fanout_bench_prints_one_json_object_with_the_promised_keys(tmp_path):
    result = run_bench("fanout", "fanout", tmp_path)

    assert result["bench"] == "fanout"
    assert result["config"]["durability"] == "fsync"
    for moment in ("noise_start", "noise_end"):
        assert {"loadavg", "busy_cores"} <= result["machine"][moment].keys()
    scenarios = [result["floor"]["20"]]
    for transport in ("sse", "ws"):
        figures = result["results"]["shipped"][transport]["20"]
        assert figures["server_exit_code"] == 0
        assert {"deliveries_to_limits_md", "deliveries_to_floor", "paced_p99_to_floor"} <= figures[
            "ratios"
        ].keys()
        scenarios.append(figures)
    for figures in scenarios:
        assert figures["gaps"] == 0
        assert {"records_per_s", "server_cpu_us_per_record"} <= figures["publish_alone"].keys()
        assert {"rss_mib_no_subscribers", "rss_mib_idle_subscribers", "kib_per_subscriber"} <= (
            figures["idle_memory"].keys()
        )
        paced = figures["paced"]
        assert paced.keys() >= CPU_KEYS | {"events", "deliveries", "latency_ms"}
        assert paced["deliveries"] == paced["expected_deliveries"]
        assert paced["latency_ms"].keys() == LATENCY_KEYS
        full = figures["full_rate"]
        assert full.keys() >= CPU_KEYS | {
            "deliveries_per_s",
            "events_per_s",
            "server_cpu_us_per_delivery",
            "fanout_cpu_us_per_delivery",
            "records_per_read",
            "latency_ms",
        }
    assert result["pass"]["shipped"] == {}  # the targets are for K=1000; --quick runs K=20
