#!/bin/bash
# One call on the GPU machine: the cuda twin tests, engine_dir --check on an exported tiny model,
# and engine_dir --repeat timings on a 4B-shape model (s1-forward itself needs the image libraries,
# absent there without the bundle), from a folder holding the statically built binaries, this
# script and tokenizer.json. Logs go to $OUT (at most 8 files). Exit status 1 if any step failed.
# Usage: gpu_run.sh ["N1 N2 ..."]: token counts of the 4B timings ("0" skips them).
set -u
cd "$(dirname "$0")"
N4B=${1:-"512 3400"}
summary=$OUT/summary.log
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >"$summary"
date -u +"run %Y-%m-%dT%H:%M:%SZ" >>"$summary"
fails=0
for t in test_gemm test_ops test_engine; do
  s=$(date +%s.%N)
  ./$t >"$OUT/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(awk "BEGIN{printf \"%.1f s\", $(date +%s.%N)-$s}")" >>"$summary"
  [ $rc -eq 0 ] || fails=$((fails + 1))
done
w=/tmp/s1-tiny
mkdir -p $w
./s1-mkmodel --shape tiny --seed 9 --tokenizer tokenizer.json --out $w/hf >/dev/null &&
  ./s1-export --family qwen3_5 --base $w/hf --out $w/m >/dev/null &&
  ./engine_dir --model $w/m --tokens 300 --check --repeat 5 --profile >"$OUT/engine_dir_tiny.log" 2>&1
rc=$?
echo "engine_dir tiny --check rc=$rc" >>"$summary"
[ $rc -eq 0 ] || fails=$((fails + 1))
if [ "$N4B" != "0" ]; then
  w=/tmp/s1-4b
  mkdir -p $w
  s=$(date +%s)
  timeout "${S1_4B_MAKE_S:-600}" ./s1-mkmodel --shape 4b --seed 1 --tokenizer tokenizer.json \
    --out $w/hf >/dev/null &&
    timeout "${S1_4B_MAKE_S:-600}" ./s1-export --family qwen3_5 --base $w/hf --out $w/m >/dev/null
  echo "4b model made in $(($(date +%s) - s)) s" >>"$summary"
  for n in $N4B; do
    ./engine_dir --model $w/m --tokens "$n" --repeat 10 --profile >>"$summary" 2>&1
    echo "engine_dir 4b n=$n rc=$?" >>"$summary"
  done
fi
echo "failures: $fails" >>"$summary"
cat "$summary"
[ $fails -eq 0 ]
