#!/bin/sh
# gdn3 device run 2: twin test + bench of every GDN variant, then Nsight Compute on the GDN
# launches (durations: simt's last launch triple, then invb's 30 and invf's first; sections: simt's
# and invf's triples at 4B, 3,400 tokens)
set -u
cd "$(dirname "$0")"
O=$OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$O/gpu.txt" 2>&1
sh ./run_gdn_variants.sh . "$O/gdn" >"$O/gdn_run.log" 2>&1
echo "run_gdn_variants rc=$? $(($(date +%s) - t0))s" >>"$O/gdn_run.log"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active
for c in 4B:3400 27B:3400 4B:128; do
  f=$(echo "$c" | tr ':' '_')
  S1_BENCH_ONLY=$c S1_GDN_BENCH_KINDS=invb,invf timeout 60 ncu --clock-control none \
    -k regex:'gdn_(intra|state|out)' --launch-skip 87 --launch-count 96 --metrics "$M" --csv \
    ./bench_cuda_kernels >"$O/ncu_dur_$f.csv" 2>&1
  echo "ncu durations $c rc=$? $(($(date +%s) - t0))s" >>"$O/gdn_run.log"
done
S1_BENCH_ONLY=4B:3400 S1_GDN_BENCH_KINDS=invf timeout 90 ncu --clock-control none \
  -k regex:'gdn_(intra|state|out)' --launch-skip 87 --launch-count 6 --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  ./bench_cuda_kernels >"$O/ncu_sections_4B_3400.txt" 2>&1
echo "ncu sections rc=$? $(($(date +%s) - t0))s" >>"$O/gdn_run.log"
cat "$O/gdn_run.log"
