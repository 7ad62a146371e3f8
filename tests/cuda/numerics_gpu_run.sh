#!/bin/bash
# The engine-numerics checks on the GPU machine from one staged folder (static release binaries
# test_engine, test_ops, engine_dir, s1-mkmodel, s1-export, this script and the Qwen3
# tokenizer.json, or tokenizer.json.xz): test_engine (both numerics against their CPU twins), test_ops (every op twin,
# the ref-bf16 ops included) and engine_dir --check on an exported s1-mkmodel tiny model (both
# numerics), then engine_dir --repeat in each numerics for a timing pair. Logs into OUT_DIR
# (summary.log + one log per step, 5 files). Exit status 1 if any step failed.
# Usage: numerics_gpu_run.sh OUT_DIR
set -u
out=${1:?usage: numerics_gpu_run.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")"
[ -f tokenizer.json ] || xz -dc tokenizer.json.xz >/tmp/s1-numerics-tokenizer.json
tokenizer=tokenizer.json
[ -f tokenizer.json ] || tokenizer=/tmp/s1-numerics-tokenizer.json
summary=$out/summary.log
date -u +"run %Y-%m-%dT%H:%M:%SZ" >"$summary"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$summary" 2>&1
fails=0
step() { # name log command...
  local name=$1 log=$2 s rc
  shift 2
  s=$(date +%s.%N)
  "$@" >>"$out/$log" 2>&1
  rc=$?
  echo "$name rc=$rc $(awk "BEGIN{printf \"%.1f s\", $(date +%s.%N)-$s}")" >>"$summary"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
step test_engine test_engine.log timeout 120 ./test_engine
step test_ops test_ops.log timeout 150 ./test_ops
w=/tmp/s1-numerics-tiny
rm -rf $w && mkdir -p $w
step "make tiny" engine_dir_tiny.log sh -c "./s1-mkmodel --shape tiny --seed 9 --tokenizer \
$tokenizer --out $w/hf >/dev/null && ./s1-export --family qwen3_5 --base $w/hf --out $w/m >/dev/null"
step "engine_dir tiny --check" engine_dir_tiny.log timeout 120 ./engine_dir --model $w/m \
  --tokens 300 --check
for mode in ref-bf16 fp32-residual; do
  step "engine_dir tiny --repeat 5 $mode" timing.log timeout 60 ./engine_dir --model $w/m \
    --tokens 300 --repeat 5 --numerics $mode
done
grep -h '"median_ms"' "$out/timing.log" >>"$summary"
echo "failures: $fails" >>"$summary"
cat "$summary"
[ $fails -eq 0 ]
