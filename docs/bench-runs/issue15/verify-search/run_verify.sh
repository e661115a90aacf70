#!/bin/sh
# ABBA: A = 32a2b60 (/work/base-15), B = this branch. Same log for both (built once by bench/verify.py).
set -e
WT=/work/wt-verify-search
OUT=$WT/docs/bench-runs/issue15/verify-search
LOG=${LOG:-/tmp/de/log300k}
cd $WT
i=0
for side in A B B A; do
  i=$((i+1))
  date -u +%H:%M:%S >&2; uptime >&2
  if [ $side = A ]; then
    PYTHONPATH=/work/base-15 $WT/.venv/bin/python /work/base-15/bench/verify.py --records 300000 --repeat ${REPEAT:-1} --log $LOG > $OUT/verify${TAG:-}-$i-$side.json
  else
    PYTHONPATH=$WT $WT/.venv/bin/python bench/verify.py --records 300000 --repeat ${REPEAT:-1} --log $LOG > $OUT/verify${TAG:-}-$i-$side.json
  fi
done
