#!/usr/bin/env bash
# gemmsel device run: correctness (test_gemm) first, then GEMM timing, then the 4B whole model.
set -u
cd "$(dirname "$0")"
O=${OUT:-./out}; mkdir -p "$O"
t0=$EPOCHREALTIME
el() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}'; }
{
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader)"
timeout 95 ./test_gemm > "$O/test_gemm.log" 2>&1; echo "test_gemm rc=$? t=$(el) | $(tail -1 "$O/test_gemm.log")"
timeout 45 ./bench_gemm all > "$O/bench_gemm.log" 2>&1; echo "bench_gemm rc=$? t=$(el)"
tail -14 "$O/bench_gemm.log"
xz -dc tokenizer.json.xz > /dev/shm/tok.json
W=/dev/shm/g4b
timeout 40 ./s1-mkmodel --shape 4b --seed 1 --tokenizer /dev/shm/tok.json --s1-out $W > "$O/mkmodel.log" 2>&1; echo "mkmodel rc=$? t=$(el)"
for n in 128 512 2048; do for sel in 0 1; do
  echo "## S1_GEMM_SELECT=$sel tokens=$n" >> "$O/engine_dir.log"
  S1_GEMM_SELECT=$sel timeout 30 ./engine_dir --model $W --tokens $n --repeat 5 --profile >> "$O/engine_dir.log" 2>&1
  echo "engine_dir sel=$sel n=$n rc=$? t=$(el)"
done; done
grep -o '"n_tokens": [0-9]*\|"median_ms": [0-9.]*\|"ready_ms": [0-9.]*\|"gemm[a-z_]*": [0-9.]*' "$O/engine_dir.log" | paste -sd' ' | sed 's/"n_tokens"/\n"n_tokens"/g'
} 2>&1 | tee "$O/summary.txt"
