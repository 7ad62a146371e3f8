#!/bin/sh
# gpu-suite runner of tests/oracle/qwen35_bf16_parity.py: makes a random checkpoint with s1-mkmodel,
# exports it and compares `s1-forward --device cuda:0` with transformers bf16 (sdpa) on the GPU.
#   bf16_parity.sh MKMODEL EXPORT FORWARD TOKENIZER PARITY_PY WORK SHAPE [PARITY ARGS...]
# SHAPE is tiny (with the vision tower), 4b (with the vision tower) or 27b (text). The python is
# $S1_GPU_PYTHON or python3 (the GPU machine's, with torch + transformers). Any missing piece
# (no GPU, no torch, no CUDA build of s1-forward) is a failure, never a skip (exit 77).
set -eu
mk=$1 ex=$2 fw=$3 tok=$4 py=$5 work=$6 shape=$7
shift 7
case "$shape" in
  tiny|4b) vis=--vision ;;
  27b) vis= ;;
  *) echo "bf16_parity: unknown shape $shape" >&2; exit 1 ;;
esac
rm -rf "$work/hf_$shape" "$work/$shape" "$work/parity_$shape"
mkdir -p "$work"
"$mk" --shape "$shape" $vis --seed 8 --tokenizer "$tok" --out "$work/hf_$shape"
"$ex" --family qwen3_5 --base "$work/hf_$shape" --out "$work/$shape"
rm -rf "$work/hf_$shape"
img=
[ -n "$vis" ] && img=--image
rc=0
"${S1_GPU_PYTHON:-python3}" "$py" --model "$work/$shape" --forward "$fw" \
  --work "$work/parity_$shape" $img --out "$work/parity_$shape.json" "$@" || rc=$?
[ "$rc" -eq 77 ] && rc=1
exit "$rc"
