"""One `verify_log` run in this process: verdict, records, CPU seconds, CPU µs per record, wall.

Usage: PYTHONPATH=<tree> .venv/bin/python verify_cpu.py LOGDIR  (a log of bench/verify.py's key)
"""

import sys
import time
from pathlib import Path

from eventstore.checkpoint import SigningKey
from eventstore.verify import verify_log

ORIGIN = "bench.ledgermem.local/verify"
SEED = bytes(range(32))  # bench/verify.py's benchmark key
vkey = str(SigningKey.from_seed(ORIGIN, SEED).vkey)
cpu, wall = time.process_time(), time.perf_counter()
report = verify_log(Path(sys.argv[1]), vkey)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(
    report.verdict,
    report.records,
    f"cpu_s {cpu:.3f} cpu_us_per_record {cpu / report.records * 1e6:.2f} wall_s {wall:.2f}",
    f"loadavg {__import__('os').getloadavg()[0]:.1f}",
)
