#!/usr/bin/env bash
PY=/work/main/.venv/bin/python
cd /tmp/bench
for pair in "after 3" "before 3" "before 4" "after 4"; do
  set -- $pair; side=$1; rnd=$2
  if [ "$side" = before ]; then root=/work/before; else root=/work/main; fi
  echo "$(date +%T) memory $side $rnd"
  PYTHONPATH=$root $PY $root/bench/memory.py --records 50000 --out memory-$side-$rnd.json >/dev/null 2>memory-$side-$rnd.err
done
echo "$(date +%T) done"
