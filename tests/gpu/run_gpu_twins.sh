#!/bin/sh
# Runs the CUDA twin tests (in parallel) and then the kernel microbenchmark alone, on the GPU
# machine, from a folder of binaries built here. Logs go to OUT_DIR; a short summary to stdout.
# A failing test is re-run once under compute-sanitizer memcheck (same seed) for its first errors.
# usage: tests/gpu/run_gpu_twins.sh BIN_DIR OUT_DIR
set -u
B=$1
O=$2
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  >"$O/gpu.txt" 2>&1
: >"$O/summary.txt"
for t in test_cuda_conv1d test_cuda_gdn test_cuda_attention; do
  (
    start=$(date +%s)
    "$B/$t" >"$O/$t.log" 2>&1
    echo "$t rc=$? $(($(date +%s) - start))s" >>"$O/summary.txt"
  ) &
done
wait
"$B/bench_cuda_kernels" >"$O/bench.log" 2>&1
echo "bench rc=$?" >>"$O/summary.txt"
for t in test_cuda_conv1d test_cuda_gdn test_cuda_attention; do
  if ! grep -q "$t rc=0" "$O/summary.txt"; then
    seed=$(sed -n 's/.*seed \([0-9]*\).*/\1/p' "$O/$t.log" | head -1)
    S1_TEST_SEED=${seed:-1} timeout 120 compute-sanitizer --tool memcheck --print-limit 20 \
      "$B/$t" >"$O/$t.sanitizer.log" 2>&1
  fi
done
cat "$O/gpu.txt" "$O/summary.txt"
grep -h -E "FAIL|NONFINITE" "$O"/test_*.log | head -40
cat "$O/bench.log"
