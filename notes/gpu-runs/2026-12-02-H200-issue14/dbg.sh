#!/bin/bash
# debug: the open_jev tiny trio on cuda:0 (gpu-issue14's trio_cuda step hangs)
tar xJf .device/i14/bundle.tar.xz -C /dev/shm
rm -rf /tmp/s1t-*
S1_EXECUTOR_TIMINGS=1 S1_TRIO_FAMILIES=${FAM:-open_jev} timeout 45 python3 tests/gpu/trio_cuda_check.py .device/i14/trio_stage /dev/shm/bundle/bin $OUT/l cuda:0 > $OUT/check.out 2>&1 &
sleep 22
port=$(grep -o '127.0.0.1:[0-9]*' /tmp/s1t-*/fe.log | head -1 | cut -d: -f2)
echo "port $port"
curl -s 127.0.0.1:$port/metrics | grep -vE "^#|bucket" | head -60
sleep 3
curl -s 127.0.0.1:$port/metrics | grep -E "step|program|in_flight|queue_depth" | grep -v "^#" | head -20
ps -eo pid,stat,pcpu,comm | grep -E "s1-" 
ex=$(pgrep -x s1-executor | head -1)
command -v gdb && gdb -p $ex -batch -ex 'thread apply all bt 12' 2>&1 | grep -E "^#|^Thread" | head -70
cat /proc/$ex/task/*/stat 2>/dev/null | awk '{print $1, $3, $14, $15}' | head
for f in /tmp/s1t-*/*.log; do echo "== $f"; tail -c 2000 $f; done
wait
cat $OUT/check.out | tail -5
