#!/usr/bin/env bash
# The CPU before/after runs of notes/2026-12-01-sched-cpu/README.md: for each family's demo model
# (recipe/*/make-demo-model, made once with BUILD's tools), the trio from BIN (s1-frontend
# --queue 256, one s1-preprocessor --credits $CREDITS (default 16), s1-executor --device cpu with
# EXTRA executor arguments) on 127.0.0.1, then load.py at concurrency 1, 8 and 16 over the
# family's recipe/*/examples requests: 4 s warm-up excluded, 20 s measured, RUNS runs each.
# usage: [CREDITS=N] run.sh BIN BUILD OUT.jsonl LABEL [RUNS] [-- EXTRA executor arguments]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
bin="$1" build="$2" out="$3" label="$4" runs="${5:-2}"; shift 5 || shift $#
[ "${1:-}" = "--" ] && shift
extra=("$@")
work=/tmp/sched-bench; mkdir -p "$work"
tok3="/work/shared/tokenizers/qwen3/tokenizer.json"
tok35="$build/tests/omnijev/qwen35_tokenizer.json"
[ -d "$work/omnijev" ] || "$root/recipe/omnijev/make-demo-model" "$tok35" "$work/omnijev" --build "$build" >/dev/null
[ -d "$work/open_jev" ] || "$root/recipe/open_jev/make-demo-model" "$work/open_jev" --build "$build" >/dev/null
[ -d "$work/jemm" ] || "$root/recipe/jemm/make-demo-model" "$work/jemm" --build "$build" >/dev/null
py=/usr/bin/python3 # Debian's, with python3-aiohttp
port=18670
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for fam in open_jev jemm omnijev; do
  d="$work/run-$label-$fam"; rm -rf "$d"; mkdir -p "$d"
  "$bin/s1-executor" --model "$work/$fam" --device cpu --listen "ipc://$d/ex.sock" "${extra[@]}" >"$d/ex.log" 2>&1 &
  ex=$!
  "$bin/s1-frontend" --listen "127.0.0.1:$port" --pool "ipc://$d/fe.sock" --queue 256 --timeout-ms 600000 >"$d/fe.log" 2>&1 &
  fe=$!
  "$bin/s1-preprocessor" --frontend "ipc://$d/fe.sock" --executor "ipc://$d/ex.sock" --model "$work/$fam" --credits "${CREDITS:-16}" >"$d/pp.log" 2>&1 &
  pp=$!
  pids=("$ex" "$fe" "$pp")
  for i in $(seq 600); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  for c in 1 8 16; do
    for r in $(seq "$runs"); do
      line=$("$py" "$here/load.py" "http://127.0.0.1:$port/v1/systemone" "$c" 4 20 "$root/recipe/$fam/examples/"*.json)
      echo "{\"label\": \"$label\", \"family\": \"$fam\", \"credits\": ${CREDITS:-16}, \"run\": $r, \"load1\": $(cut -d' ' -f1 /proc/loadavg), ${line#\{}" | tee -a "$out"
    done
  done
  kill "$fe" "$pp" "$ex"; wait "$fe" "$pp" "$ex" 2>/dev/null || true
  pids=()
done
