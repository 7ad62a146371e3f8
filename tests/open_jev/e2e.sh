#!/bin/sh
# Builds the tiny random Open-Jev model directory (s1-mkmodel with the oracle's seed, the committed
# upstream package, s1-export --family open_jev) under the build folder, checks the base against
# the SHA-256 the GPU oracle recorded, then runs the end-to-end comparison.
# usage: e2e.sh S1_MKMODEL S1_EXPORT TEST_BINARY FIXTURE_DIR TOKENIZER_DIR WORK_DIR
set -eu
mkmodel=$1 export=$2 test=$3 fix=$4 tokdir=$5 work=$6
rm -rf "$work"
mkdir -p "$work"
"$mkmodel" --shape tiny --seed 4242 --tokenizer "$tokdir/tokenizer.json" --out "$work/base" >/dev/null
cp "$tokdir/tokenizer_config.json" "$work/base/"
want=$(sed -n 's/.*"model.safetensors": "\([0-9a-f]*\)".*/\1/p' "$fix/e2e.json")
got=$(sha256sum "$work/base/model.safetensors" | cut -d' ' -f1)
if [ "$want" != "$got" ]; then
  echo "s1-mkmodel output drifted: model.safetensors $got, the oracle used $want" >&2
  exit 1
fi
"$export" --family open_jev --package "$fix/package" --base "$work/base" --out "$work/model" >/dev/null
exec "$test" "$work/model" "$fix/e2e.json"
