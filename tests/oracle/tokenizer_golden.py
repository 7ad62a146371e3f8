"""Writes tests/fixtures/tokenizer/golden.jsonl: hand-made strings by category, each with the ids
and the decoded text that the Python `tokenizers` library (pinned 0.23.2) gives for the Qwen3
tokenizer (../shared/tokenizers/qwen3/tokenizer.json) and the Qwen3.5 tokenizer derived by
tokenizer_qwen35.py. One JSON object per line:
  {"cat": ..., "text": ..., "qwen3": [ids], "qwen3_dec": str, "qwen35": [ids], "qwen35_dec": str}
Every mismatch the C tokenizer ever showed is added to MISMATCHES below (category "regression").

usage: tokenizer_golden.py QWEN3_JSON QWEN35_JSON GOLDEN.jsonl VARIANTS.jsonl

VARIANTS.jsonl: Qwen3's vocabulary with other pre-tokenizers, normalizers, added-token flags
(lstrip/rstrip/single_word/normalized) and ignore_merges, as {"variant", "patch", "cases"}.
"""
import json
import sys
import unicodedata

PROSE = [
    "Hello, world! This is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "Prefill-only models read a state and answer questions with calibrated probabilities.",
    "She said: \"Don't panic.\" Then she left.",
    "Email me at someone@example.com or visit https://example.org/path?q=1&x=2#frag.",
    "Mr. Smith paid $1,234.56 for 3.5 kg of apples (about 7.7 lb).",
    "Semicolons; colons: dashes -- and em-dashes \u2014 all appear here.",
    "A sentence with a trailing space ",
    " a sentence with a leading space",
    "Numbers like 1st, 2nd, 3rd and 4th are ordinals.",
    "What is 2+2? And 3*3=9, 10/2=5, 7-1=6.",
    "Question marks??? Exclamations!!! Ellipses...",
    "Hyphenated-words and under_scores and CamelCaseWords and snake_case_names.",
    "ALL CAPS SENTENCE WITH SOME WORDS.",
    "mIxEd CaSe TeXt iS hArD tO rEaD.",
    "Parentheses (like these) and brackets [like these] and braces {like these}.",
    "Quotes 'single' and \"double\" and `backtick`.",
    "The year 2026 and the time 21:20 UTC.",
    "a",
    "I",
    ".",
    "",
    "x y z",
    "Tabs\tbetween\twords.",
    "Line one.\nLine two.\nLine three.",
    "Windows line endings.\r\nSecond line.\r\n",
    "Old Mac line endings.\rSecond line.\r",
    "Form feed\x0cand vertical tab\x0bhere.",
    "The end.\n",
]

CODE = [
    "def f(x):\n    return x**2  # square\n",
    "int main(void) {\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; i++) {\r\n\tsum += a[i];\r\n}\r\n",
    "if x == 1:\n\tprint('one')\nelif x == 2:\n\tprint(\"two\")\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "<div class=\"x\">\n  <p>Hello</p>\n</div>",
    "x = [i * i for i in range(10) if i % 2 == 0]",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "const add = (a, b) => a + b; // arrow\n",
    "\t\t\tdeeply\n\t\t\t\tindented\n",
    "    four spaces\n        eight spaces\n",
    "a\t\tb\t\t\tc",
    "line with trailing tab\t\nnext",
    "$ echo \"hi\" | grep -v x > /dev/null 2>&1",
    "git commit -m 'fix: off-by-one in heap_pop()'",
    "matrix[i][j] += alpha * x[i] * y[j];\r\n",
    "/* comment */ // another\n# python comment\n-- sql comment",
    "0x7fffffff 0b1010 0o777 1e-7 3.14f 2.5e+10",
    "   \n\n   \t\n",
    "key:\tvalue\r\nkey2:\tvalue2",
    "@decorator\nclass Foo(Bar):\n    pass\n",
    "print(f\"{x!r:>10}\")",
    "a==b!=c<=d>=e&&f||g",
]

NUMBERS = [
    "1234567890",
    "Numbers: 1234567890 3.14159 -42 1,000,000",
    "3141592653589793238462643383279502884197169399375105820974944592",
    "Call 555-0100 or +1 (555) 010-0199.",
    "2026-11-29T21:20:00Z",
    "Version 0.23.2 and 10.42 and 2.8.0",
    "00000000000000000000",
    "1 2 3 4 5 6 7 8 9 10",
    "\u0661\u0662\u0663 \u0967\u0968\u0969 \uff11\uff12\uff13",  # Arabic-Indic, Devanagari, fullwidth
    "\u2160\u2161\u2162 \u00bd \u00b2 \u2075",  # Roman numerals, fractions, superscripts
    "$9.99 \u20ac12,50 \u00a3100 \u00a55000",
    "IPv4 192.168.0.1 and port 8080",
]

CONTRACTIONS = [
    "don't I'LL we'Ve it's",
    "DON'T WON'T CAN'T SHOULDN'T",
    "I'M YOU'RE HE'S SHE'D THEY'LL WE'VE",
    "It'S tHe'Re ThEy'Ve",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock 'n' roll, 'tis, o'clock",
    "The dog's bone and the dogs' bones.",
    "'hello' 'world'",
    "I\u2019m using a curly apostrophe.",
    "\u017fs long s: it'\u017f",  # long s case-folds to s
    "'K' and the Kelvin sign '\u212a'",
]

CJK = [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u4eba\u5de5\u667a\u80fd\u6b63\u5728\u6539\u53d8\u4e16\u754c\u3002",
    "\u6211\u559c\u6b22\u5403\u82f9\u679c\u548c\u9999\u8549\u3002",
    "\u4ff1\u4e50\u90e8 \u4eba\u529b\u8d44\u6e90 \u6570\u636e\u5e93",
    "\u4e2d\u6587English\u6df7\u5408123\u6570\u5b57",
    "\u300c\u5f15\u7528\u300d\u300e\u4e66\u540d\u300f\u3010\u6ce8\u3011",
    "\u6f22\u5b57\u3068\u4eee\u540d\u306e\u6df7\u3058\u308a\u6587",
    "\U00020000\U0002a700\U0002b740",  # CJK extension B/C/D
    "\uf900\uf901\uf902",  # compatibility ideographs (NFC changes them)
    "\u3000\u5168\u89d2\u7a7a\u683c\u3000",
]
KANA = [
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\u30b3\u30fc\u30d2\u30fc\u3092\u98f2\u307f\u307e\u3059\u304b\uff1f",
    "\uff76\uff80\uff76\uff85 halfwidth",
    "\u304b\u3099 \u30cf\u309a",  # dakuten combining (NFC composes)
    "\u30fc\u30fc\u30fc\u3001\u3002",
]
HANGUL = [
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \ud1a0\ud070\ud654",
    "\u1100\u1161\u11a8",  # conjoining jamo (NFC composes to one syllable)
    "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\uac00\ub098\ub2e4\ub77c\ub9c8\ubc14\uc0ac",
    "\u3131\u314f \u3134\u3153",  # compatibility jamo
]
ARABIC = [
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629.",
    "\u0643\u064e\u062a\u064e\u0628\u064e \u0627\u0644\u0637\u0651\u064e\u0627\u0644\u0650\u0628\u064f",  # harakat
    "\u0633\u0644\u0627\u0645 world \u0633\u0644\u0627\u0645",
    "\u200f\u0639\u0631\u0628\u064a\u200f",  # RLM marks
    "\u0641\u0627\u0631\u0633\u06cc \u06a9\u06cc \u06af",
]
DEVANAGARI = [
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964",
    "\u0915\u093c \u0916\u093c \u0917\u093c",  # nukta (composition exclusions)
    "\u0958\u0959\u095a",  # precomposed nukta letters (NFC decomposes)
    "\u0915\u094d\u0937 \u0924\u094d\u0930 \u091c\u094d\u091e",
    "\u0905\u0902\u0917\u094d\u0930\u0947\u091c\u093c\u0940 and English",
    "\u0938\u0902\u0938\u094d\u0915\u0943\u0924\u092e\u094d \u0965",
]
EMOJI = [
    "I \u2764\ufe0f \U0001f355 and \U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f642",
    "\U0001f44d\U0001f3fb\U0001f44d\U0001f3fc\U0001f44d\U0001f3fd\U0001f44d\U0001f3fe\U0001f44d\U0001f3ff",
    "\U0001f468\u200d\U0001f4bb \U0001f469\u200d\U0001f52c \U0001f9d1\u200d\U0001f680",
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f3f4\u200d\u2620\ufe0f",
    "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea",
    "\U0001f600\U0001f601\U0001f602\U0001f923",
    "Great job!\U0001f389\U0001f389",
    "\U0001f9d1\U0001f3fd\u200d\U0001f91d\u200d\U0001f9d1\U0001f3fb",
    "\u263a \u263a\ufe0f \u263a\ufe0e",
    "#\ufe0f\u20e3 1\ufe0f\u20e3",
]
NFD = [
    "cafe\u0301 nai\u0308ve",
    "e\u0301e\u0300e\u0302e\u0308",
    "A\u030a ngstro\u0308m",
    "n\u0303 N\u0303 espan\u0303ol",
    "o\u0302\u0323 o\u0323\u0302",  # two marks, both orders
    "u\u0308\u0301",
    "C\u0327a\u0300 va",
    "\u1e9b\u0323",
    "a\u0328\u0301",
    "Z\u030c\u0323",
    "\u212b \u2126 \u00c5",  # singletons
    "s\u0323\u0307 s\u0307\u0323",
]
ZERO_WIDTH = [
    "zero\u200bwidth\u200bspace",
    "joiner\u200dnon\u200cjoiner",
    "\ufeffBOM at start",
    "word\u2060joiner",
    "soft\u00adhyphen",
    "\u200b\u200b\u200b",
    "a\u200b b \u200bc",
    "mongolian\u180evowel\u180e separator",
    "\u200e\u200fdirection marks\u202a\u202c",
    "\u2062\u2063\u2064 invisible operators",
]
CONTROL = [
    "a\x1cb\x1dc\x1ed\x1ff",
    "\x1c\x1d\x1e\x1f",
    "field\x1frecord\x1e",
    " \x1c ",
    "\x1c\n\x1d\r\n",
    "x\x00y",
    "\x01\x02\x03\x7f",
    "tab\x1c\ttab",
    "\x85next line\x85",
    "nbsp\u00a0nbsp\u00a0\u00a0",
    "\u2028line sep\u2029para sep",
    "\u2000\u2001\u2002\u2003\u2009\u200a\u202f\u205f",
]
SPECIAL = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning\n</think>\n\nanswer",
    "text<|endoftext|>more",
    "Look at <|vision_start|><|image_pad|><|image_pad|><|vision_end|> and describe it.",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>",
    "a<|im_end|>b<|im_end|>c",
    "<|im_start|><|im_start|><|im_end|>",
    "<|im_start",
    "<|im_start|",
    "im_start|>",
    "<<|im_start|>>",
    "< |im_start| >",
    "<|IM_START|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<tool_response>ok</tool_response>",
    " <|im_end|> spaced <|im_end|> ",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<|box_start|>(10,20),(30,40)<|box_end|>",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    "x<|audio_start|>y<|audio_end|>z",
    "<tts_pad><tts_text_bos>",
    "\u00e9<|im_end|>\u0301",
    "\n\n<|im_end|>\n\n",
    "<|video_pad|>\U0001f600<|vision_pad|>",
]
LONG = [
    "a" * 1000,
    "ab" * 600,
    "supercalifragilisticexpialidocious" * 20,
    "\u4e2d" * 500,
    "\U0001f600" * 200,
    " " * 1000,
    "\n" * 300,
    "9" * 500,
    "x" * 3000 + " end",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "-" * 200 + "=" * 200,
    "\u00e9" * 400,
    "\t" * 100 + "x",
    ("word " * 200).strip(),
]


def expand():
    cases = []
    add = lambda cat, xs: cases.extend((cat, x) for x in xs)
    add("prose", PROSE)
    add("code", CODE)
    add("numbers", NUMBERS)
    add("contractions", CONTRACTIONS)
    add("cjk", CJK)
    add("kana", KANA)
    add("hangul", HANGUL)
    add("arabic", ARABIC)
    add("devanagari", DEVANAGARI)
    add("emoji", EMOJI)
    add("nfd", NFD)
    add("zero_width", ZERO_WIDTH)
    add("control", CONTROL)
    add("special", SPECIAL)
    add("long", LONG)
    # runs of spaces and trailing spaces around words and newlines
    for n in range(1, 9):
        cases.append(("spaces", "a" + " " * n + "b"))
        cases.append(("spaces", "word" + " " * n))
        cases.append(("spaces", " " * n + "word"))
        cases.append(("spaces", "x" + " " * n + "\n" + " " * n + "y"))
        cases.append(("spaces", "p" + "\t" * n + " " * n + "q"))
    # upper-case contractions on several words
    for w in ["I", "YOU", "WE", "THEY", "IT", "SHE"]:
        for c in ["'S", "'T", "'RE", "'VE", "'M", "'LL", "'D"]:
            cases.append(("contractions", w + c + " GO"))
    # numbers of each length up to 24 digits, alone and inside text
    for n in range(1, 25):
        digits = "".join(str((i * 7 + 3) % 10) for i in range(n))
        cases.append(("numbers", digits))
        cases.append(("numbers", "x" + digits + "y"))
    # NFD of composed samples
    for s in ["R\u00e9sum\u00e9", "\u00c5ngstr\u00f6m", "se\u00f1or", "\u1ec7", "\uac01",
              "Cr\u00e8me br\u00fbl\u00e9e", "\u01d5\u01d7", "\u1e69"]:
        cases.append(("nfd", unicodedata.normalize("NFD", s)))
        cases.append(("nfd", unicodedata.normalize("NFKD", s) + " " + s))
    # mixed scripts
    mixed = ["\u041f\u0440\u0438\u0432\u0435\u0442world123\u0430\u0431\u0432 ok",
             "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac and \u05e2\u05d1\u05e8\u05d9\u05ea",
             "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u1780\u17d2\u1798\u17c2\u179a",
             "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u0540\u0561\u0575\u0565\u0580\u0565\u0576",
             "\u12a0\u121b\u122d\u129b \u13e3\u13b3\u13a9",
             "Tamil \u0ba4\u0bae\u0bbf\u0bb4\u0bcd Bengali \u09ac\u09be\u0982\u09b2\u09be"]
    add("mixed", mixed)
    # special-token text at every position in a sentence
    base = "the cat sat on the mat"
    words = base.split(" ")
    for tokname in ["<|im_start|>", "<|endoftext|>", "<think>", "<|image_pad|>"]:
        for i in range(len(words) + 1):
            cases.append(("special", " ".join(words[:i]) + tokname + " ".join(words[i:])))
    cases.extend(("regression", x) for x in MISMATCHES)
    return cases


# Inputs on which the C tokenizer once disagreed with the reference (kept as golden cases).
MISMATCHES = [
    # PCRE2's \s matched U+180E (Mongolian vowel separator); Oniguruma's does not
    " \u180e ", "a \u180e\u180e b", "\t\u180e\x0b", "x  \u180e", "\u3000 \u180e  \u180e\r\n",
    "\u00d3 \u180e\u0e37\u0e2e", "  \x0c \u180e\u200d\u0967",
    # property test round trip: NFC does not compose across an added token
    "<|fim_prefix|>\u0338x", "a<|im_end|>\u0301",
    # letters, digits and marks newer than PCRE2 10.42's Unicode 14 tables (Oniguruma has 16)
    "\U00010d4a\U00010d4b x\U00010d40\U00010d41", "'S\u1c89 \ua7cb\U000105c0",
    "a\U00013460\U00013461 \U0001e5d0", " \u0897\u0cf3 \U00010d69",
    # newer combining marks unknown to the reference's NFC tables (no reordering there)
    "a\u0301\u0898\u0316", " \U0001e4ec\u0301", "a\u0301\u1ac1\u0316", "e\u0316\u1df6\u0301",
    "\u0915\u093c\U00011070\u094d",
]


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
QWEN_SPLIT = None  # filled from the Qwen3 file


def split(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


def variants(doc):
    """Qwen3's vocabulary and merges with other components: (name, {top-level key: value})."""
    qsplit = doc["pre_tokenizer"]["pretokenizers"][0]
    pat = qsplit["pattern"]["Regex"]
    out = []
    for beh in ["Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        out.append(("split_" + beh, {"pre_tokenizer": seq(split(pat, beh), BL)}))
    out.append(("split_invert_isolated", {"pre_tokenizer": seq(split(pat, "Isolated", True), BL)}))
    out.append(("split_invert_removed", {"pre_tokenizer": seq(split(" ", "Removed", True, True), BL)}))
    out.append(("split_literal_next", {"pre_tokenizer": seq(split(" ", "MergedWithNext", literal=True), BL)}))
    out.append(("split_two_steps", {"pre_tokenizer": seq(split("\\s+", "MergedWithPrevious"), split(pat, "Isolated"), BL)}))
    out.append(("bytelevel_gpt2", {"pre_tokenizer": dict(BL, add_prefix_space=True, use_regex=True)}))
    out.append(("bytelevel_regex", {"pre_tokenizer": dict(BL, use_regex=True)}))
    out.append(("split_then_prefix", {"pre_tokenizer": seq(split(pat, "Isolated"), dict(BL, add_prefix_space=True))}))
    out.append(("norm_nfkc", {"normalizer": {"type": "NFKC"}}))
    out.append(("norm_seq_nfd", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}]}}))
    out.append(("norm_none", {"normalizer": None}))
    added = [dict(a) for a in doc["added_tokens"]]
    for a in added:
        if a["content"] == "<|im_start|>":
            a["lstrip"] = True
        if a["content"] == "<|im_end|>":
            a["rstrip"] = True
        if a["content"] == "<think>":
            a["single_word"] = True
        if a["content"] == "</think>":
            a["lstrip"] = a["rstrip"] = True
    nid = max(a["id"] for a in added) + 1
    added.append({"id": nid, "content": "caf\u00e9", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": True, "special": False})
    added.append({"id": nid + 1, "content": "\u00c5X", "single_word": True, "lstrip": False,
                  "rstrip": False, "normalized": True, "special": True})
    added.append({"id": nid + 2, "content": "<|im", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True})
    out.append(("added_flags", {"added_tokens": added}))
    model = dict(doc["model"], ignore_merges=True)
    out.append(("ignore_merges", {"model": model}))
    return out


VARIANT_TEXTS = [
    "Hello, world! This is a test.", "a  b   c\t\td\n\n\ne    ", "  leading and trailing  ",
    "don't I'LL we'Ve it's", "def f(x):\n    return x**2  # square\n", "1234567890 3.14",
    "cafe\u0301 caf\u00e9 CAF\u00c9 xcaf\u00e9y", "A\u030aX \u00c5X \u212bX w\u00c5X",
    "\ufb01 \u2460 \uff21\uff22 \u00bd \u1e9b\u0323", "<|im_start|>user\nHi<|im_end|>\n",
    "  <|im_start|>  x  <|im_end|>  y", "a <think> b<think>c <think>", " </think>  z\t</think>\n",
    "<|im <|im_start <|im_start|>", "\u4f60\u597d\uff0c\u4e16\u754c\uff01 \uc548\ub155 \u3053\u3093\u306b\u3061\u306f",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f44d\U0001f3fd", "x\x1cy\x1d z \u00a0 \u3000 w",
    " ", "", "   ", "\n", "word", " word", "word ", "a b", "  a  b  ",
]


def main():
    from tokenizers import Tokenizer
    q3 = Tokenizer.from_file(sys.argv[1])
    q35 = Tokenizer.from_file(sys.argv[2])
    with open(sys.argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    texts = VARIANT_TEXTS
    with open(sys.argv[4], "w", encoding="utf-8") as f:
        for name, patch in variants(doc):
            d = dict(doc, **patch)
            tk = Tokenizer.from_str(json.dumps(d))
            rows = [{"text": t, "ids": tk.encode(t, add_special_tokens=False).ids} for t in texts]
            f.write(json.dumps({"variant": name, "patch": patch if "model" not in patch else
                                {"model.ignore_merges": True}, "cases": rows},
                               ensure_ascii=False) + "\n")
    cases = expand()
    seen = set()
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        n = 0
        for cat, text in cases:
            if text in seen:
                continue
            seen.add(text)
            row = {"cat": cat, "text": text}
            for key, tk in (("qwen3", q3), ("qwen35", q35)):
                ids = tk.encode(text, add_special_tokens=False).ids
                row[key] = ids
                row[key + "_dec"] = tk.decode(ids, skip_special_tokens=False)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    print(f"{n} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
