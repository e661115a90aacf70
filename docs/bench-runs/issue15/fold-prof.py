"""History.load from zero over the first N records, thread CPU; --prof adds a cProfile."""

import cProfile
import pstats
import sys
import time
from pathlib import Path

from sections.history import History

import sections
from eventstore.reader import LogReader

print(sections.__file__, file=sys.stderr)
r = LogReader(Path("/tmp/fold-log/log"))
h = History(r)
upto = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
t = time.thread_time()
h.load(upto, False)
dt = time.thread_time() - t
print(f"{upto / dt:.0f} rec/CPU-s ({dt / upto * 1e6:.2f} us/rec)")
if "--prof" in sys.argv:
    cProfile.run("h.load(upto, False)", "/tmp/fold.prof")
    pstats.Stats("/tmp/fold.prof").sort_stats("tottime").print_stats(14)
