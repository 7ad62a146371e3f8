#!/bin/sh
# Remakes this folder (notes/2026-12-05-serve-roofline.md): the work of every benchmark request
# (recorded on the CPU with tiny directories, the Qwen3.5 tokenizer of the GPU runs) and the
# tables of the committed GPU runs. From the repository root, after `ninja -C build`.
set -eu
D=notes/2026-12-05-serve-roofline R=notes/gpu-runs
TOK=build/tests/omnijev/qwen35_tokenizer.json
S1_PYTHON=${S1_PYTHON:-.venv/bin/python} sh tests/oracle/qwen35_tokenizer.sh "$TOK"
CFG=$(mktemp)
python3 -c 'import json, sys
q = json.load(open(sys.argv[1]))
json.dump({"tokenizer_class": "Qwen3_5Tokenizer", "chat_template": q["chat_template"],
           "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
           "add_bos_token": False, "split_special_tokens": False}, open(sys.argv[2], "w"), indent=1)' \
  ../shared/tokenizers/qwen3/tokenizer_config.json "$CFG"   # as scripts/gpu-issue18b stages it
for f in jemm open_jev omnijev; do
  .venv/bin/python tests/cuda/serve_work.py record --bin build --family $f --tokenizer "$TOK" \
    --tokenizer-config "$CFG" --out $D/work_$f.json
done
rm -f "$CFG"
W="python3 tests/cuda/serve_work.py roofline"
$W --work $D/work_jemm.json --raw $R/2026-12-02-H200-issue18b/partA/logs/bench_jemm/raw.jsonl --shape 27b >$D/jemm27b_issue18b.txt
$W --work $D/work_open_jev.json --raw $R/2026-12-02-H200-issue18b/partB/logs/bench_oj27/raw.jsonl --shape 27b >$D/open_jev27b_issue18b.txt
$W --work $D/work_open_jev.json --raw $R/2026-12-02-H200-issue14/logs/bench_oj9/raw.jsonl --shape 9b >$D/open_jev9b_issue14.txt
$W --work $D/work_omnijev.json --raw $R/2026-12-02-H200-issue14/logs/bench_omni/raw.jsonl --shape 4b >$D/omnijev4b_issue14.txt
