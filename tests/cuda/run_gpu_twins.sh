#!/bin/sh
# Runs the CUDA twin tests (in parallel) and then the kernel microbenchmark alone, on the GPU
# machine, from a folder of binaries built here. Logs go to OUT_DIR; a short summary to stdout.
# A failing test is re-run once under compute-sanitizer memcheck (same seed) for its first errors.
# usage: tests/cuda/run_gpu_twins.sh BIN_DIR OUT_DIR
set -u
B=$1
O=$2
mkdir -p "$O"
# at most 8 files come back from the GPU machine: summary, 4 test logs, bench, ncu, sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  >"$O/summary.txt" 2>&1
for t in test_cuda_conv1d test_cuda_gdn test_cuda_attention; do
  (
    start=$(date +%s)
    "$B/$t" >"$O/$t.log" 2>&1
    echo "$t rc=$? $(($(date +%s) - start))s" >>"$O/summary.txt"
  ) &
done
(
  S1_ATTN_BM=128 "$B/test_cuda_attention" >"$O/test_cuda_attention_bm128.log" 2>&1
  echo "test_cuda_attention_bm128 rc=$?" >>"$O/summary.txt"
) &
wait
"$B/bench_cuda_kernels" >"$O/bench.log" 2>&1
echo "bench rc=$?" >>"$O/summary.txt"
for t in test_cuda_conv1d test_cuda_gdn test_cuda_attention; do
  if ! grep -q "$t rc=0" "$O/summary.txt"; then
    seed=$(sed -n 's/.*seed \([0-9]*\).*/\1/p' "$O/$t.log" | head -1)
    S1_TEST_SEED=${seed:-1} timeout 120 compute-sanitizer --tool memcheck --print-limit 20 \
      "$B/$t" >>"$O/sanitizer.log" 2>&1
  fi
done
# PROFILE=1: Nsight Compute speed-of-light of the GDN kernels and the attention kernel at the 4B
# shape, 3,400 tokens (launch indices follow bench_cuda_kernels' order: 90 attention launches, 30
# conv, 60 prepare, 270 GDN chunked kernels per shape (simt, invf, invt; 30 launches of 3 kernels
# each; only these match the filter); 4B 3,400 is the third shape; the 3 launches shown are simt).
if [ "${PROFILE:-0}" = 1 ]; then
  timeout 150 ncu --clock-control none -k regex:'gdn_(intra|state|out)' --launch-skip 540 \
    --launch-count 3 --section SpeedOfLight --section LaunchStats --section Occupancy \
    "$B/bench_cuda_kernels" >"$O/ncu.log" 2>&1
  timeout 120 ncu --clock-control none -k regex:attn_kernel --launch-skip 210 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis "$B/bench_cuda_kernels" \
    >>"$O/ncu.log" 2>&1
  grep -E "gdn_|attn_|Duration|Throughput|Achieved Occupancy|Registers|Block Size|Grid Size" \
    "$O/ncu.log" | grep -v -E "^(4B|27B) " | head -60
fi
cat "$O/summary.txt"
grep -h -E "FAIL|NONFINITE" "$O"/test_*.log | head -40
grep -h -E "^(prepare 4B.*3400|.*3400.*(out|state)|single 4B.*3400|single 27B.*3400)" "$O"/test_*.log | cut -c1-150
cat "$O/bench.log"
