#!/bin/sh
# The Gated DeltaNet chunked implementations (invf: the engine's exc_gdn_chunked; simt, invt:
# tests/cuda/gdn_variants.cu) on the GPU machine, from binaries built here: the twin test, which checks
# every variant against the CPU, then the kernel benchmark (each variant timed, its output compared
# with simt's). A per-variant count of ok / FAIL lines goes to OUT_DIR/gdn_summary.txt and stdout.
# usage: tests/cuda/run_gdn_variants.sh BIN_DIR OUT_DIR   exit status: the twin test's (0 = all pass)
set -u
B=$1
O=$2
mkdir -p "$O"
start=$(date +%s)
"$B/test_cuda_gdn" >"$O/test_cuda_gdn.log" 2>&1
rc=$?
echo "test_cuda_gdn rc=$rc $(($(date +%s) - start))s" >"$O/gdn_summary.txt"
for v in simt invf invt; do
  echo "$v: $(grep -c "^$v .* ok\$" "$O/test_cuda_gdn.log") ok," \
    "$(grep -c "^$v .*FAIL" "$O/test_cuda_gdn.log") FAIL" >>"$O/gdn_summary.txt"
done
# the benchmark times only the variants whose twin lines all passed, as many as simt's (a variant
# that faulted part-way would take the benchmark down with it)
n_simt=$(grep -c "^simt .* ok\$" "$O/test_cuda_gdn.log")
kinds=simt
for v in invf invt; do
  if [ "$(grep -c "^$v .* ok\$" "$O/test_cuda_gdn.log")" = "$n_simt" ] &&
    [ "$(grep -c "^$v .*FAIL" "$O/test_cuda_gdn.log")" = 0 ]; then
    kinds=$kinds,$v
  fi
done
# (invf, the engine's, is always timed: the model sum takes it)
echo "bench variants: $kinds (model sum: invf)" >>"$O/gdn_summary.txt"
S1_GDN_BENCH_KINDS=$kinds timeout 120 "$B/bench_cuda_kernels" >"$O/bench.log" 2>&1
echo "bench rc=$?" >>"$O/gdn_summary.txt"
grep -E "gdn_chunked|sum\(model\)" "$O/bench.log" >>"$O/gdn_summary.txt"
cat "$O/gdn_summary.txt"
grep -E "FAIL|NONFINITE" "$O/test_cuda_gdn.log" | head -20
exit $rc
