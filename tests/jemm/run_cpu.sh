#!/bin/sh
# Builds a tiny random JEMM model (vision tower, rank-16 alpha-32 adapter on every language
# projection), exports it with the adapter kept and merged, and runs test_jemm_cpu on both.
# usage: run_cpu.sh S1_MKMODEL S1_EXPORT TEST_JEMM_CPU TOKENIZER.json RENDER.jsonl WORK_DIR
set -eu
mk=$1 ex=$2 test=$3 tok=$4 render=$5 work=$6
rm -rf "$work" && mkdir -p "$work"
"$mk" --shape tiny --vision --seed 7 --tokenizer "$tok" --out "$work/hf" \
  --adapter-out "$work/adapter" --adapter-rank 16 --adapter-alpha 32 \
  --adapter-targets in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj,q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj \
  >/dev/null
printf '{"temperature": 1.3480874159655591, "mm_temperature": 1.3954832341582943, "threshold": 0.9872681877423998}\n' \
  >"$work/adapter/decision_config.json"
"$ex" --family jemm --base "$work/hf" --adapter "$work/adapter" --out "$work/unmerged" >/dev/null
"$ex" --family jemm --base "$work/hf" --adapter "$work/adapter" --lora merge --out "$work/merged" >/dev/null
exec "$test" "$work/unmerged" "$work/merged" "$render"
