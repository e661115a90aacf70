#!/bin/sh
# Issue 15, HTTP write path: ABBA, A = 32a2b60 (/work/base-15), B = s15-http (/work/wt-http).
# The client (bench/http_writes.py) is B's for both sides; only the server comes from each tree.
# Usage: [ORDER="B A A B" FIRST=4] sh docs/bench-runs/issue15/http/run.sh OUTDIR (FIRST: runs before)
set -e
out=${1:-/tmp/http-abba}
mkdir -p "$out"
cd /work/wt-http
i=${FIRST:-0}
for side in ${ORDER:-A B B A}; do
    i=$((i + 1))
    if [ "$side" = A ]; then tree=/work/base-15; else tree=/work/wt-http; fi
    echo "run $i side $side tree $tree $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=/work/wt-http .venv/bin/python bench/http_writes.py --server-root "$tree" \
        --out "$out/run$i-$side.json" 2>&1 | grep -E "writes/s|appends/s"
done
