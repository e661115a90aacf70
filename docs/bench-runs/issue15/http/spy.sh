#!/bin/sh
# Samples the server of one bench/http_writes.py scenario with py-spy (installed in the venv only):
# the loop thread and the writer, search-index and verifier threads apart. Usage: sh spy.sh single OUT
# usage: spy.sh MODE OUT
mode=$1; out=$2
.venv/bin/python bench/http_writes.py --modes $mode --seconds 8 > /tmp/spy-$mode.json 2> /tmp/spy-$mode.err &
for i in $(seq 1 60); do
  pid=$(grep -o "server pid [0-9]*" /tmp/spy-$mode.err | awk '{print $3}')
  [ -n "$pid" ] && break; sleep 0.5
done
sleep 3
.venv/bin/py-spy record -p $pid -d 7 -r 250 --threads --nonblocking -f raw -o $out > /dev/null 2>&1
wait
