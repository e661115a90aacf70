"""The fold of both trees in ONE process, alternating A B F per round (F = read + orjson.loads),
so that the machine's drift hits both alike. A's `sections` is copied to a temporary package
`sections_base` (its imports are relative; `eventstore` is the same in both trees).

    PYTHONPATH=/work/wt-fold .venv/bin/python inproc.py LOGDIR BASE_TREE RECORDS ROUNDS
Prints one JSON object: thread CPU µs per record of each round, min and median per name.
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

log_dir, base, n, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tmp = Path(tempfile.mkdtemp())
shutil.copytree(base / "sections", tmp / "sections_base")
sys.path.insert(0, str(tmp))
from sections.history import History as HistoryB  # noqa: E402
from sections_base.history import History as HistoryA  # noqa: E402

from eventstore.reader import LogReader  # noqa: E402

reader = LogReader(log_dir)


def floor():
    loads = orjson.loads
    for _, line in reader.lines(after=-1, until=n):
        loads(line)


runs = {
    "A": lambda: HistoryA(reader).load(n - 1, False)[0],
    "B": lambda: HistoryB(reader).load(n - 1, False)[0],
    "F": floor,
}
us = {name: [] for name in runs}
hashes = {}
for _ in range(rounds):
    for name, fn in runs.items():
        t = time.thread_time()
        state = fn()
        us[name].append(round((time.thread_time() - t) / n * 1e6, 2))
        hashes[name] = state.state_hash() if state is not None else None
        del state
shutil.rmtree(tmp)
print(
    json.dumps(
        {
            "records": n,
            "rounds": rounds,
            "loadavg": os.getloadavg(),
            "same_state": hashes["A"] == hashes["B"],
            "us_per_record": us,
            "min": {k: min(v) for k, v in us.items()},
            "median": {k: sorted(v)[len(v) // 2] for k, v in us.items()},
        }
    )
)
