"""One bench/append.py scenario, optionally under cProfile (profile-asyncio64.txt came from it).

Usage: PYTHONPATH=<tree> .venv/bin/python docs/bench-runs/issue15/append/one_scenario.py
       FAMILY CONCURRENCY SECONDS [prof]
"""

import cProfile
import pstats
import shutil
import sys
import tempfile
from pathlib import Path

import eventstore

sys.path.insert(0, str(Path(eventstore.__file__).resolve().parents[1] / "bench"))
import append as bench  # noqa: E402

family, concurrency, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
profile = cProfile.Profile() if len(sys.argv) > 4 else None
root = Path(tempfile.mkdtemp())
scenario = bench.Scenario(root, family, concurrency, bench.make_payloads(1024))
if profile is not None:
    profile.enable()
figures = scenario.run(0.3, seconds)
if profile is not None:
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)
shutil.rmtree(root, ignore_errors=True)
print(
    family, concurrency, figures["records_per_s"], "cpu", figures["cpu_us_per_record"],
    "writer", figures["writer_thread_us_per_record"], "ack", figures["ack_ms"],
    "rpc", figures["records_per_commit"], "nb", figures["neighbour_cores_est"],
    "fsync", figures["fdatasync_in_writer_ms"],
)  # fmt: skip
