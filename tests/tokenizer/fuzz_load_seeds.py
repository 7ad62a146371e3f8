#!/usr/bin/env python3
"""Writes the seed documents of fuzz_tok_load (tests/fixtures/tokenizer/fuzz_load/): small
tokenizer.json files of our own making in the layouts the loader's fast path meets (pretty and
compact, pair and string merges, escapes) and a few it must refuse or fall back on. Each file is
one selector byte (members per piece - 1) followed by the document.
usage: fuzz_load_seeds.py OUT_DIR"""
import json
import os
import sys

VOCAB = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "\u0120": 6, "\u0120\u0120": 7,
         "\"q\\": 8, "x,y": 10, "{[": 11}
PAIRS = [["a", "b"], ["b", "c"], ["a", "bc"], ["\u0120", "\u0120"]]


def doc(vocab=VOCAB, merges=PAIRS, **model):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
         "ignore_merges": True, "vocab": vocab, "merges": merges}
    m.update(model)
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 9, "content": "<|x|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                              "use_regex": False},
            "post_processor": None, "decoder": {"type": "ByteLevel"}, "model": m}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "pretty_pairs": (0, json.dumps(doc(), indent=2, ensure_ascii=False)),
        "compact_strings": (1, json.dumps(doc(merges=[" ".join(p) for p in PAIRS]),
                                          separators=(",", ":"))),
        "ascii_escapes": (2, json.dumps(doc(), indent=1)),
        "empty": (3, json.dumps(doc(vocab={}, merges=[]))),
        "dup_key": (0, json.dumps(doc()).replace('"b": 1,', '"b": 1, "a": 12,')),
        "escaped_vocab_key": (1, json.dumps(doc()).replace('"type": "BPE"',
                                                           '"type": "BPE", "voc\\u0061b": {}')),
        "trailing_comma": (0, json.dumps(doc()).replace('"c": 2,', '"c": 2,,')),
        "comment": (2, json.dumps(doc()).replace('"c": 2,', '"c": 2, /* , */')),
    }
    for name, (sel, text) in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([sel]) + text.encode())


if __name__ == "__main__":
    main()
