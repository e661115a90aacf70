"""One JSON line per run and mode from the run*.json files in a directory (default: this one)."""

import json
import sys
from pathlib import Path

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
for path in sorted(here.glob("run*.json")):
    d = json.loads(path.read_text())
    for mode, r in d["results"]["shipped"].items():
        line = {
            "run": path.name,
            "mode": mode,
            "server_root": d["config"]["server_root"],
            "started": d["started"],
            "writes_per_s": r["writes_per_s"],
            "items_per_s": r["items_per_s"],
            "server_cpu_us_per_write": r["server_cpu_us_per_write"],
            "server_cpu_us_per_item": r["server_cpu_us_per_item"],
            "loop_thread_cores": r["server_loop_thread_cores"],
            "server_cores": r["server_cores"],
            "threads_us_per_write": r.get("server_thread_cpu_us_per_write"),
            "kernel_share": r["server_kernel_share"],
            "p50_ms": r["latency_ms"]["p50"],
            "p99_ms": r["latency_ms"]["p99"],
            "records_per_fdatasync": r["records_per_fdatasync"],
            "neighbour_cores": r["neighbour_cores_est"],
            "machine_busy_cores": r["machine_busy_cores"],
            "loadavg_start": d["machine"]["noise_start"]["loadavg"],
            "raw_append_per_s": d["raw_append"][mode]["appends_per_s"],
        }
        print(json.dumps(line))
