#!/bin/sh
# ABBA side by side, A = 32a2b60 (/work/base-15, its own bench scripts), B = s15-commands.
# Run from /work/wt-commands. Appends one JSON line per run to the files below.
set -e
OUT=docs/bench-runs/issue15/commands
for t in A B B A; do
  if [ $t = A ]; then P=/work/base-15; else P=/work/wt-commands; fi
  PYTHONPATH=$P .venv/bin/python $P/bench/memory_evict.py --seconds 3 --one-caller-adds 1500 \
    --label "$t" --out $OUT/evict.jsonl > /dev/null
done
# The build (bench/memory.py --child build, 64 asyncio callers, no fsync): B's script, which
# also reports the adds' loop alone (records/s and CPU per record), run on both trees.
for t in A B B A; do
  if [ $t = A ]; then P=/work/base-15; else P=/work/wt-commands; fi
  rm -rf /tmp/b1-build
  echo "{\"label\": \"$t\", \"tree\": \"$P\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"build\": $(PYTHONPATH=$P .venv/bin/python bench/memory.py --child build --dir /tmp/b1-build --records 40000)}" >> $OUT/build.jsonl
done
rm -rf /tmp/b1-build
