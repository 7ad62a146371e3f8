#!/bin/sh
# Runs the vision tower's gpu-suite checks and timing on the GPU machine from a staged folder
# (binaries built with -Dprefer_static=true -Dbuildtype=release, see README "CUDA vision tower"):
# STAGE holds test_vision_ops_cuda, test_vision_tower, bench_vision, s1-mkmodel, tokenizer.json
# and fx/ (tests/fixtures/vision). Logs go to OUTDIR. Exit status: the number of failed steps.
set -u
stage=$1 out=$2 fails=0
cd "$stage" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
step() { # name command...
  n=$1; shift
  "$@" > "$out/$n.log" 2>&1; rc=$?
  echo "== $n rc=$rc"; tail -n 25 "$out/$n.log"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
step ops ./test_vision_ops_cuda
step tower_tinyA ./test_vision_tower fixture fx tinyA
step tower_hd72 ./test_vision_tower fixture fx hd72
step tower_mkmodel_tiny sh -c './s1-mkmodel --shape tiny --vision --tokenizer tokenizer.json --out /tmp/tiny >/dev/null && ./test_vision_tower hf /tmp/tiny'
step bench ./bench_vision 30
cat "$out/gpu.txt"
exit $fails
