#!/bin/bash
# usage: fold-run.sh LABEL TREE  -> one JSON line on stdout
label=$1; tree=$2
rm -rf /tmp/fold-log/snapshots /tmp/fold-log/index
load0=$(cut -d' ' -f1 /proc/loadavg)
out=$(cd $tree && PYTHONPATH=$tree /work/wt-fold/.venv/bin/python $tree/bench/memory.py --child rebuild --dir /tmp/fold-log --reps 2)
load1=$(cut -d' ' -f1 /proc/loadavg)
rm -rf /tmp/fold-log/snapshots /tmp/fold-log/index
echo "{\"label\":\"$label\",\"tree\":\"$tree\",\"commit\":\"$(git -C $tree rev-parse --short HEAD)\",\"loadavg_before\":$load0,\"loadavg_after\":$load1,\"result\":$out}"
