"""bench/append.py --store runs end to end: the PostgreSQL scenarios beside the file store's,
in one JSON object. No timing is asserted: this only keeps the benchmark from rotting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.pg import pg_url  # noqa: F401

BENCH = Path(__file__).resolve().parents[1] / "bench" / "append.py"


def test_append_bench_with_a_store_reports_both_stores(pg_url, tmp_path):  # noqa: F811
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--seconds", "0.2", "--dir", str(tmp_path),
         "--store", pg_url],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    result = json.loads(run.stdout)
    store = result["store"]
    assert store["server"]["settings"]["synchronous_commit"] == "on"
    for family in ("threads", "asyncio"):
        for concurrency in ("1", "8", "64"):
            figures = store["results"][family][concurrency]
            assert figures["records"] > 0
            assert figures["ratio_to_file_store"] > 0
            assert figures["postgres_cpu_us_per_record"] is not None
            assert result["results"][family][concurrency]["records"] > 0


def test_a_store_that_is_not_a_postgresql_url_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--store", "mysql://x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode != 0 and "postgresql:// or redis://" in run.stderr
