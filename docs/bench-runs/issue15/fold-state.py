"""Time `ledgermem state LOG --at 299998` per tree (A = before, B = after), one JSON line each."""

import json
import os
import subprocess
import sys
import time

trees = {"A": "/work/base-fold", "B": "/work/wt-fold"}
py = "/work/wt-fold/.venv/bin/python"
at = 299_998
for label in sys.argv[1:]:
    tree = trees[label]
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        p = subprocess.Popen(
            [py, "-m", "ledgermem_cli", "state", "/tmp/fold-log/log", "--at", str(at)],
            stdout=sink,
            stderr=subprocess.PIPE,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": tree},
        )
        _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    assert os.waitstatus_to_exitcode(status) == 0, p.stderr.read()
    cpu = usage.ru_utime + usage.ru_stime
    print(
        json.dumps(
            {
                "label": label,
                "tree": tree,
                "command": f"ledgermem state LOG --at {at}",
                "records": at + 1,
                "seconds": round(wall, 3),
                "cpu_seconds": round(cpu, 3),
                "records_per_s": round((at + 1) / wall),
                "records_per_cpu_s": round((at + 1) / cpu),
                "cpu_us_per_record": round(cpu / (at + 1) * 1e6, 2),
                "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
                "loadavg_before": load0,
                "loadavg_after": os.getloadavg()[0],
            }
        )
    )
