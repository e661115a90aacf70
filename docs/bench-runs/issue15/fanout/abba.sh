#!/bin/sh
# ABBA: A = 32a2b60 (/work/base-15), B = s15-fanout (/work/wt-fanout); same client script in both
# (bench/fanout.py is unchanged on this branch). One JSON object per run in this directory.
OUT=/work/wt-fanout/docs/bench-runs/issue15/fanout
i=0
for side in A B B A; do
  i=$((i + 1))
  if [ $side = A ]; then root=/work/base-15; else root=/work/wt-fanout; fi
  uptime > $OUT/run$i-$side.uptime
  (cd /work/wt-fanout && PYTHONPATH=$root .venv/bin/python $root/bench/fanout.py \
     --k 1000 --transports sse,ws --out $OUT/run$i-$side.json > /dev/null 2> $OUT/run$i-$side.log)
done
