#!/bin/sh
# Builds the tiny random-weight checkpoint with s1-mkmodel (--shape tiny --vision) in a temporary
# folder and runs the CUDA vision tower twin test on it. Usage: vision_tower_tiny.sh MKMODEL
# TOKENIZER_JSON TEST_BINARY.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" --shape tiny --vision --tokenizer "$2" --out "$tmp/tiny" >/dev/null
"$3" hf "$tmp/tiny"
