"""Renders the base tokenizer's chat template around a sentinel user message and writes the JEMM
chat wrapper {"prefix", "suffix"} that `s1-export --family jemm --chat FILE` records (spec/jemm.md
§3.11): [system, user] with add_generation_prompt=True, enable_thinking=False,
preserve_thinking=False, split at the sentinel, which must occur exactly once.

usage: chat_wrapper.py BASE_DIR OUT.json      (python with transformers, on the base checkpoint)
"""
import json
import sys

SYSTEM = ("Choose the best available candidate for the question using only the supplied state. "
          "Return exactly one candidate label.")
SENTINEL = "\u0000S1SERVE_JEMM_USER\u0000"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
    text = tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SENTINEL}],
        tokenize=False, add_generation_prompt=True, enable_thinking=False, preserve_thinking=False)
    if text.count(SENTINEL) != 1:
        sys.exit("the template does not place the user message exactly once")
    prefix, suffix = text.split(SENTINEL)
    if SYSTEM not in prefix or not suffix.endswith("<think>\n\n</think>\n\n"):
        sys.exit("the template does not give the JEMM wrapper (system text, thinking off)")
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"prefix": prefix, "suffix": suffix}, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
