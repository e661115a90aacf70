#!/bin/sh
# Alternating A (32a2b60) and B (this branch) verify of the same 131,072-record, 2-segment log
# (no checkpoint file), one process each, printing CPU per record; order ABBA repeated.
WT=/work/wt-verify-search
for round in 1 2 3 4; do
  for side in A B B A; do
    if [ $side = A ]; then P=/work/base-15; else P=$WT; fi
    printf "%s %s " $round $side; PYTHONPATH=$P $WT/.venv/bin/python $WT/docs/bench-runs/issue15/verify-search/verify_cpu.py /tmp/de/log2
  done
done
