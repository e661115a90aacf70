#!/bin/sh
# Side by side: A = 32a2b60 (/work/base-15, run with its own bench/append.py), B = this branch.
# Usage (from the worktree): docs/bench-runs/issue15/append/abba.sh LABEL [ORDER, default "A B B A"]
# Raw JSON beside this file as LABEL-<n>-<side>.json; table.py LABEL prints the comparison.
set -e
out=docs/bench-runs/issue15/append
n=0
for side in ${2:-A B B A}; do
  n=$((n + 1))
  if [ "$side" = A ]; then
    PYTHONPATH=/work/base-15 .venv/bin/python /work/base-15/bench/append.py --seconds 3 \
      --out "$out/$1-$n-A.json" > /dev/null
  else
    PYTHONPATH="$PWD" .venv/bin/python bench/append.py --seconds 3 --out "$out/$1-$n-B.json" > /dev/null
  fi
done
