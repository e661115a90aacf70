#!/usr/bin/env bash
# Side by side: before (a836902, /work/before) and after (main), ABBA order.
set -u
PY=/work/main/.venv/bin/python
cd /tmp/bench
run() { # side round
  local side=$1 round=$2 root
  if [ "$side" = before ]; then root=/work/before; else root=/work/main; fi
  echo "$(date +%T) append $side $round"
  PYTHONPATH=$root $PY $root/bench/append.py --out append-$side-$round.json >/dev/null 2>append-$side-$round.err
  echo "$(date +%T) memory $side $round"
  PYTHONPATH=$root $PY $root/bench/memory.py --records 200000 --out memory-$side-$round.json >/dev/null 2>memory-$side-$round.err
  echo "$(date +%T) http $side $round"
  PYTHONPATH=/work/main $PY /work/main/bench/http_writes.py --server-root $root --variants shipped --out http-$side-$round.json >/dev/null 2>http-$side-$round.err
}
run before 1; run after 1; run after 2; run before 2
echo "$(date +%T) done"
