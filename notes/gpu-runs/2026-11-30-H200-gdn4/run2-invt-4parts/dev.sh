#!/bin/sh
# gdn4 device run 2 (invt walk with NQ = 4 parts per 16 columns): twin test + bench of simt/invf/invt, then Nsight Compute launch durations
# (invf's last 10 launch triples and invt's 30) at 4B/27B x 3,400 and 4B x 128, and the sections of
# invt's first triple at 4B x 3,400. Everything under $OUT/r, tarred at the end.
set -u
cd "$(dirname "$0")"
O=$OUT/r
mkdir -p "$O"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$O/gpu.txt" 2>&1
sh ./run_gdn_variants.sh . "$O/gdn" >"$O/gdn_run.log" 2>&1
echo "run_gdn_variants rc=$? $(($(date +%s) - t0))s" >>"$O/gdn_run.log"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size
if grep -q "^invt: [1-9][0-9]* ok, 0 FAIL" "$O/gdn/gdn_summary.txt"; then
for c in 4B:3400 27B:3400 4B:128; do
  f=$(echo "$c" | tr ':' '_')
  S1_BENCH_ONLY=$c S1_GDN_BENCH_KINDS=invf,invt timeout 60 ncu --clock-control none \
    -k regex:'gdn_(intra|state|out)' --launch-skip 150 --launch-count 120 --metrics "$M" --csv \
    ./bench_cuda_kernels >"$O/ncu_dur_$f.csv" 2>&1
  echo "ncu durations $c rc=$? $(($(date +%s) - t0))s" >>"$O/gdn_run.log"
done
S1_BENCH_ONLY=4B:3400 S1_GDN_BENCH_KINDS=invf,invt timeout 60 ncu --clock-control none \
  -k regex:'gdn_state_tc' --launch-skip 0 --launch-count 1 --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis ./bench_cuda_kernels >"$O/ncu_sections_invt_walk_4B_3400.txt" 2>&1
echo "ncu sections rc=$? $(($(date +%s) - t0))s" >>"$O/gdn_run.log"
fi
cat "$O/gdn_run.log"
cat "$O/gdn/gdn_summary.txt"
cd "$OUT" && tar czf gdn4_run.tgz r && rm -rf r
