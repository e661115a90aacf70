#!/bin/sh
# bench/http_app.py (the HTTP layer's own loop CPU, in-process) for A = 32a2b60 and B = s15-http,
# in the order A B B A. Usage: sh docs/bench-runs/issue15/http/app-run.sh OUTFILE.jsonl
out=${1:-/tmp/http-app.jsonl}
cd /work/wt-http
for side in A B B A; do
    if [ "$side" = A ]; then tree=/work/base-15; else tree=/work/wt-http; fi
    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$tree" .venv/bin/python bench/http_app.py \
        --requests 5000 --rounds 1 2>/dev/null >> "$out"
done
