"""Property test of s1-tokenize against the Python `tokenizers` library on the same file:
N seeded random strings mixing scripts, whitespace, control characters and special-token text,
plus a sweep over every code point U+0080..U+31FFF in a few contexts, are encoded by both and compared id-for-id; then decode(encode(x)) from s1-tokenize --decode must
equal the reference's decode and NFC(x) (exactly NFC(x) except where an added token is followed by
a mark that NFC would compose with its last character: normalization runs between added tokens). Mismatches are printed as JSON lines (text, want, got) to add to the golden cases.

usage: tokenizer_property.py S1_TOKENIZE TOKENIZER.json N SEED
"""
import json
import random
import subprocess
import sys
import unicodedata


def pools(added):
    r = lambda a, b: [chr(c) for c in range(a, b + 1)]
    return {
        "ascii_word": None,  # generated
        "digits": list("0123456789"),
        "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
        "space": [" ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\u00a0", "\u3000",
                  "\u2028", "\u2029", "\u0085", "\u2009", "\u202f", "\u180e", "\x0b", "\x0c"],
        "ctrl": r(0x1C, 0x1F) + ["\x00", "\x01", "\x7f", "\x1b"],
        "zero_width": ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e",
                       "\u200f", "\u034f"],
        "latin1": r(0xC0, 0xFF) + r(0x100, 0x17F),
        "combining": r(0x300, 0x36F) + r(0x1AB0, 0x1ABE) + r(0x20D0, 0x20F0),
        "cyrillic": r(0x410, 0x44F),
        "greek": r(0x391, 0x3C9),
        "cjk": r(0x4E00, 0x4FFF) + r(0x3000, 0x303F) + r(0xFF01, 0xFF5E) + r(0xF900, 0xF90F),
        "kana": r(0x3041, 0x3096) + r(0x30A1, 0x30FA) + ["\u3099", "\u309a", "\u30fc"],
        "hangul": r(0xAC00, 0xAC40) + r(0x1100, 0x1112) + r(0x1161, 0x1175) + r(0x11A8, 0x11C2),
        "arabic": r(0x621, 0x64A) + r(0x64B, 0x652) + r(0x660, 0x669),
        "devanagari": r(0x905, 0x939) + r(0x93C, 0x94D) + r(0x958, 0x95F) + r(0x966, 0x96F),
        "thai": r(0xE01, 0xE3A),
        "emoji": ["\U0001f600", "\U0001f44d", "\U0001f3fb", "\U0001f3ff", "\u200d", "\ufe0f",
                  "\U0001f469", "\U0001f467", "\u2764", "\U0001f1fa", "\U0001f1f8", "\U0001f308",
                  "\u20e3", "\U0001f9d1", "\U0001f91d"],
        "contraction": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE",
                        "'M", "'LL", "'D", "'", "\u017f"],
        "special": added + [a[:k] for a in added for k in (2, len(a) - 1)],
        "astral": ["\U00020000", "\U0002a6d6", "\U0001d400", "\U0001f9ff", "\U00010400"],
    }


WEIGHTS = {"ascii_word": 30, "digits": 6, "punct": 8, "space": 14, "ctrl": 2, "zero_width": 2,
           "latin1": 3, "combining": 3, "cyrillic": 3, "greek": 2, "cjk": 5, "kana": 3,
           "hangul": 3, "arabic": 3, "devanagari": 3, "thai": 2, "emoji": 4, "contraction": 3,
           "special": 4, "astral": 1}


def make(rng, P):
    names = list(WEIGHTS)
    w = [WEIGHTS[k] for k in names]
    out = []
    for _ in range(rng.randint(0, 40)):
        k = rng.choices(names, w)[0]
        if k == "ascii_word":
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
            out.append(word.upper() if rng.random() < 0.15 else word)
        else:
            out.append("".join(rng.choice(P[k]) for _ in range(rng.randint(1, 4))))
    return "".join(out)


def main():
    binary, path, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(path)
    added = [t.content for t in tk.get_added_tokens_decoder().values()]
    P = pools(sorted(added))
    rng = random.Random(seed)
    texts = [make(rng, P) for _ in range(n)]
    # plus every code point from U+0080 to U+31FFF, 64 at a time, alone, spaced and after letters
    # (this sweep found the Unicode-version differences of the regex classes and of NFC)
    for base in range(0x80, 0x32000, 64):
        cs = [chr(c) for c in range(base, base + 64) if not 0xD800 <= c <= 0xDFFF]
        texts += ["".join(cs), " ".join(cs), "a".join(cs) + "'S", "a\u0301" + "\u0316".join(cs)]
    n = len(texts)
    want = [e.ids for e in tk.encode_batch(texts, add_special_tokens=False)]
    inp = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    p = subprocess.run([binary, "--tokenizer", path], input=inp.encode(), capture_output=True)
    if p.returncode != 0:
        sys.exit(f"s1-tokenize failed: {p.stderr.decode(errors='replace')}")
    got = [json.loads(line) for line in p.stdout.decode().split("\n") if line]
    bad = 0
    if len(got) != n:
        sys.exit(f"s1-tokenize gave {len(got)} lines for {n} inputs")
    for t, a, b in zip(texts, want, got):
        if a != b:
            bad += 1
            if bad <= 10:
                print(json.dumps({"text": t, "want": a, "got": b}, ensure_ascii=False))
    inp = "".join(json.dumps(g) + "\n" for g in got)
    p = subprocess.run([binary, "--tokenizer", path, "--decode"], input=inp.encode(),
                       capture_output=True)
    if p.returncode != 0:
        sys.exit(f"s1-tokenize --decode failed: {p.stderr.decode(errors='replace')}")
    dec = [json.loads(line) for line in p.stdout.decode().split("\n") if line]
    bad_dec = 0
    for t, d, ids in zip(texts, dec, want):
        # NFC applies between added tokens, so an added token followed by a combining mark
        # (">" + U+0338) round-trips to the segment-wise form; the reference decodes the same.
        nfc = unicodedata.normalize("NFC", t)
        if d != tk.decode(ids, skip_special_tokens=False) or unicodedata.normalize("NFC", d) != nfc:
            bad_dec += 1
            if bad_dec <= 5:
                print(json.dumps({"text": t, "decoded": d}, ensure_ascii=False))
    if len(dec) != n:
        bad_dec += 1
    print(f"{n} strings (seed {seed}, {sum(map(len, texts))} chars; the random ones, then the "
          f"code point sweep): "
          f"{bad} id mismatches, {bad_dec} round-trip failures")
    sys.exit(1 if bad or bad_dec else 0)


if __name__ == "__main__":
    main()
