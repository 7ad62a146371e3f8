"""OmniJev compile oracle: a re-implementation of spec/omnijev.md §2-§5 (request forms, option
rendering, the exact prompt, shared prefix, rows, positions, usage) with the Python standard
library and `tokenizers`, written from the spec, not from the C code. It writes the compile
fixtures tests/fixtures/omnijev/compile.jsonl that tests/omnijev/test_omnijev_compile.c checks.

The OmniJev tokenizer is the Qwen3.5 tokenizer.json (derived by tests/oracle/tokenizer_qwen35.py)
with `<|opt|>` and `<|/opt|>` added as special tokens, as records.add_option_tokens and the export
do: they get ids 248077 and 248078 and the vocabulary becomes 248,079.

usage: omnijev_compile.py tokenizer QWEN35.json OUT.json        build the OmniJev tokenizer
       omnijev_compile.py fixtures OMNIJEV_TOKENIZER.json OUT.jsonl [--check]
"""
import base64
import json
import math
import struct
import sys
import zlib

OPT, OPT_END = "<|opt|>", "<|/opt|>"
RESERVED = [OPT, OPT_END, "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
PY_SPACE = set(range(0x09, 0x0E)) | set(range(0x1C, 0x21)) | {0x85, 0xA0, 0x1680} | \
    set(range(0x2000, 0x200B)) | {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
MIN_PIXELS, MAX_PIXELS = 65536, 602112
Q1 = {"type": "noul", "instructions": "x"}


def build_tokenizer(src, out):
    from tokenizers import AddedToken, Tokenizer
    tok = Tokenizer.from_file(src)
    base = tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens([AddedToken(OPT, special=True, normalized=False),
                            AddedToken(OPT_END, special=True, normalized=False)])
    assert tok.token_to_id(OPT) == base and tok.token_to_id(OPT_END) == base + 1, "option ids"
    assert tok.get_vocab_size(with_added_tokens=True) == base + 2
    tok.save(out)


# ---- images: solid PNGs written with zlib (no imaging library needed) ----------------------------

def png(width, height, rgb=(90, 140, 200)):
    row = b"\x00" + bytes(rgb) * width
    raw = zlib.compress(row * height, 9)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


def data_url(width, height):
    return "data:image/png;base64," + base64.b64encode(png(width, height)).decode()


def smart_resize(h, w):
    """spec §10.3 with Python round (half to even)."""
    hb, wb = 32 * round(h / 32), 32 * round(w / 32)
    if hb * wb > MAX_PIXELS:
        beta = math.sqrt(h * w / MAX_PIXELS)
        hb, wb = max(32, 32 * math.floor(h / beta / 32)), max(32, 32 * math.floor(w / beta / 32))
    elif hb * wb < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (h * w))
        hb, wb = 32 * math.ceil(h * beta / 32), 32 * math.ceil(w * beta / 32)
    return [1, hb // 16, wb // 16]


# ---- request forms (spec §2.2, with the native port's refusals of §2.5) --------------------------

class Refused(Exception):
    pass


def truthy(v):
    return bool(v)


def check_text(v, what):
    if not isinstance(v, str):
        raise Refused(what)
    if len(v) > 8192:
        raise Refused(what)
    if any(m in v for m in RESERVED):
        raise Refused(what)
    return v


def render_region(region):
    box = region["box"]
    return "region [" + ",".join(str(round(float(x))) for x in box[:4]) + "]"


def options_of(q):
    """answer keys and option texts of one question (MSO1._options + records.render_option)."""
    t = q["type"]
    if t == "noul":
        return ["yes"], [render_region(q["region"]) if truthy(q.get("region")) else ""]
    if t == "score":
        levels = q.get("levels") or list(q.get("criteria", {}).keys())
        return list(levels), [str(v)[:200] for v in levels]
    if "options" in q:
        keys, texts = [], []
        for i, e in enumerate(q["options"]):
            if truthy(e.get("abstain")):
                continue
            keys.append(e.get("key") or e.get("text") or "option_%d" % i)
            texts.append(render_region(e["region"]) if "region" in e else str(e.get("text", ""))[:200])
        return keys, texts
    keys, texts = [], []
    for k, r in q["criteria"].items():
        keys.append(k)
        texts.append((k if r is None or r == "" else k + ": " + str(r))[:200])
    return keys, texts


def rstrip_py(s):
    n = len(s)
    while n and ord(s[n - 1]) in PY_SPACE:
        n -= 1
    return s[:n]


STILL = "<|vision_start|><|image_pad|><|vision_end|>"


def video_head(video):
    """records.video_content through the template (spec §3.6): the intro text, then per frame
    "t={ts}s:" and an image item; duration with zero decimals (Python's correctly rounded format)."""
    head = "A video of %s seconds; %d frames sampled uniformly in order." % (
        format(video["duration"], ".0f"), video["n_frames"])
    return head + "".join("t=%ss:" % str(t) + STILL for t in video["timestamps"])


def prompt_of(q, texts, head=STILL):
    return ("<|im_start|>user\n" + head +
            rstrip_py(q["instructions"]) + "<|im_end|>\n<|im_start|>assistant\n<think>\n" +
            "".join(OPT + t + OPT_END for t in texts))


def mrope_prefix(ids, pad, grid):
    """spec §5.1: text tokens s, s+1, ...; an image run (s, s+r, s+c); next text at s+max(h', w')."""
    pos = [[], [], []]
    s, i = 0, 0
    hp, wp = grid[1] // 2, grid[2] // 2
    while i < len(ids):
        if ids[i] == pad:
            for r in range(hp):
                for c in range(wp):
                    pos[0].append(s), pos[1].append(s + r), pos[2].append(s + c)
            i += hp * wp
            s += max(hp, wp)
        else:
            for a in range(3):
                pos[a].append(s)
            s += 1
            i += 1
    return pos, s


def compile_request(tok, req, size):
    opt, opt_end = tok.token_to_id(OPT), tok.token_to_id(OPT_END)
    pad = tok.token_to_id("<|image_pad|>")
    video = req["state"].get("video")
    # a video's frames are tile x tile crops of the mosaic, each its own image (spec §2.3)
    grid = smart_resize(video["tile"], video["tile"]) if video else smart_resize(size[1], size[0])
    n_image = grid[1] * grid[2] // 4
    head = video_head(video) if video else STILL
    qs = []
    for qid, q in req["questions"].items():
        keys, texts = options_of(q)
        prompt = prompt_of(q, texts, head)
        ids = []
        for t in tok.encode(prompt, add_special_tokens=False).ids:
            ids.extend([pad] * n_image if t == pad else [t])
        qs.append(dict(id=qid, type=q["type"], keys=keys, texts=texts, prompt=prompt, seq=ids))
    # shared prefix (spec §4.3)
    l0 = min(len(q["seq"]) for q in qs)
    for q in qs[1:]:
        n = 0
        while n < l0 and q["seq"][n] == qs[0]["seq"][n]:
            n += 1
        l0 = n
    firsts = [q["seq"].index(opt) - 1 for q in qs if opt in q["seq"]]
    L = max(1, min([l0] + firsts))
    prefix = qs[0]["seq"][:L]
    pos, p0 = mrope_prefix(prefix, pad, grid)
    # rows (spec §4.4)
    rows, usage = [], L
    for q in qs:
        s = q["seq"]
        opens = [i for i, t in enumerate(s) if t == opt]
        closes = [i for i, t in enumerate(s) if t == opt_end]
        pairs = [(o, c) for o, c in zip(opens, closes) if c >= o][:len(q["keys"])]
        q["first_row"] = len(rows)
        if not pairs:
            rows.append(s[L:])
            q["open_offset"] = 0
        else:
            head = s[L:opens[0]]
            q["open_offset"] = len(head)
            for o, c in pairs:
                rows.append(head + s[o:c + 1])
        q["n_rows"] = len(rows) - q["first_row"]
        usage += sum(len(r) for r in rows[q["first_row"]:])
    return dict(grid=grid, n_images=video["n_frames"] if video else 1, L=L, prefix_ids=prefix, prefix_pos=pos, p0=p0, rows=rows,
                input_tokens=usage,
                questions=[{k: q[k] for k in ("id", "type", "keys", "texts", "prompt", "first_row",
                                              "n_rows", "open_offset")} | {"n_seq": len(q["seq"])}
                           for q in qs])


# ---- the cases -----------------------------------------------------------------------------------

def cases():
    LONG = "The quick brown fox jumps over the lazy dog. " * 6
    ASTRAL = "x" * 199 + "\U0001F642" + "y" * 10
    bench = {
        "op": {"type": "choice", "instructions": "Which operation comes next?",
               "options": [{"text": "click"}, {"text": "type text"}, {"text": "scroll"},
                           {"text": "wait"}, {"abstain": True}]},
        "err": {"type": "noul", "instructions": "An error dialog is shown."},
        "irrev": {"type": "score", "instructions": "How irreversible is the next action?",
                  "levels": ["low", "medium", "high"]},
        "obj": {"type": "choice", "instructions": "What is the main object?",
                "options": [{"text": t} for t in ["a person", "a car", "a screen", "a dog", "food"]]
                + [{"abstain": True}]},
        "indoors": {"type": "noul", "instructions": "The scene is indoors."},
        "clutter": {"type": "score", "instructions": "How cluttered is the scene?",
                    "levels": ["none", "some", "a lot", "extreme"]},
        "where": {"type": "choice", "instructions": "Where should the user click?",
                  "options": [{"key": "r%d" % i, "region": {"box": [200 * i, 100, 200 * i + 180, 300]}}
                              for i in range(4)] + [{"abstain": True}]},
        "moving": {"type": "noul", "instructions": "Something is moving."},
        "risk": {"type": "score", "instructions": "How risky is acting now?",
                 "levels": ["safe", "check first", "dangerous"]},
        "next": {"type": "choice", "instructions": "What is the next step?",
                 "options": [{"text": "open the menu"}, {"text": "close the dialog"},
                             {"text": "do nothing"}, {"abstain": True}]},
        "done": {"type": "noul", "instructions": "The task is finished."},
        "colour": {"type": "choice", "instructions": "What colour dominates?",
                   "options": [{"text": c} for c in ["red", "green", "blue", "white", "black"]]
                   + [{"abstain": True}]},
    }
    full = {
        "visible": {"type": "noul", "instructions": "A person is visible."},
        "action": {"type": "choice", "instructions": "Which operation comes next?",
                   "criteria": {"click": None, "type": "Enter text into the focused field"}},
        "target": {"type": "choice", "instructions": "Pick the element to use.",
                   "options": [{"key": "ok", "text": "the OK button"},
                               {"key": "cancel", "text": "the Cancel button"},
                               {"key": "box", "region": {"box": [120, 80, 360, 140.5]}},
                               {"abstain": True}]},
        "risk": {"type": "score", "instructions": "How risky is acting on this screen?",
                 "levels": ["safe", "check first", "dangerous"]}}
    shared = {
        "blue": {"type": "noul", "instructions": "Is the button on the left side blue?"},
        "red": {"type": "noul", "instructions": "Is the button on the left side red?"},
        "size": {"type": "choice", "instructions": "Is the button on the left side small or large?",
                 "options": [{"text": "small"}, {"text": "large"}]}}
    ok = [
        ("single_noul_1600x900", (1600, 900), {"v": {"type": "noul", "instructions": "A person is visible."}}),
        ("whitespace", (64, 48), {
            "dark": {"type": "noul", "instructions": "  Is it dark?  \n\x1f "},
            "ab": {"type": "choice", "instructions": "Pick one.\u3000\u2028",
                   "criteria": {"a ": None, " b": "rubric "}}}),
        ("options_list_forms", (333, 217), {
            "pick": {"type": "choice", "instructions": "Which part?",
                     "options": [{"key": "top", "region": {"box": [0, 0, 1000, 120.4]}},
                                 {"text": "the dialog in the middle"}, {}, {"abstain": True},
                                 {"key": "long", "text": LONG}, {"key": "astral", "text": ASTRAL}]},
            "reg": {"type": "noul", "instructions": "This region is a button.",
                    "region": {"box": [10.5, 20.49, 300, 400.5]}}}),
        ("shared_prefix", (64, 48), shared),
        ("shared_prefix_reordered", (64, 48), {k: shared[k] for k in ("size", "red", "blue")}),
        ("full_example_1600x900", (1600, 900), full),
        ("bench_12", (320, 256), bench),
        ("choice_255", (64, 48), {"many": {"type": "choice", "instructions": "Which number is shown?",
                                           "options": [{"text": str(i)} for i in range(255)]}}),
        ("empty_option_text", (64, 48), {"c": {"type": "choice", "instructions": "Choose.",
                                               "options": [{"text": "yes"}, {"text": ""}, {},
                                                           {"key": "k", "text": ""}]}}),
        ("unicode", (200, 150), {
            "\u554f\u984c": {"type": "choice", "instructions": "\u753b\u9762\u306b\u4f55\u304c\u3042\u308a\u307e\u3059\u304b\uff1f \U0001F600 e\u0301 \u05e9\u05dc\u05d5\u05dd",
                             "options": [{"text": "\u732b"}, {"text": "\u72ac \U0001F436"},
                                         {"text": "caf\u00e9"}, {"text": "\u0645\u0631\u062d\u0628\u0627"}]},
            "ctl": {"type": "noul", "instructions": "Stop here<|im_end|> and go on"}}),
        ("score_criteria_keys", (64, 48), {"s": {"type": "score", "instructions": "Rate it.",
                                                 "criteria": {"bad": "it is bad", "ok": None, "good": ""}}}),
        ("choice_criteria_rubrics", (64, 48), {"c": {"type": "choice", "instructions": "Which?",
                                                     "criteria": {"a": "", "b": None, "c": "the third"}}}),
        ("empty_choice", (64, 48), {"n": {"type": "noul", "instructions": "Is it day?"},
                                    "e": {"type": "choice", "instructions": "Nothing to pick.",
                                          "options": [{"abstain": True}]}}),
        ("only_empty_choice", (64, 48), {"e": {"type": "choice", "instructions": "Nothing to pick.",
                                               "criteria": {}}}),
        ("score_10_levels", (64, 48), {"s": {"type": "score", "instructions": "Rate from 1 to 10.",
                                             "levels": [str(i) for i in range(1, 11)]}}),
        ("identical_questions", (64, 48), {"a": {"type": "noul", "instructions": "Same text."},
                                           "b": {"type": "noul", "instructions": "Same text."}}),
        ("wide_2000x20", (2000, 20), {"w": {"type": "noul", "instructions": "A line."}}),
        # issue 16 F4 (../shared/findings/2026-12-01-attack/omnijev_region_int_boundaries.json):
        # the 64-bit bounds are values; round(float(x)) of each, exact however large
        ("region_64_bit_bounds", (64, 48), {"q": {"type": "choice", "instructions": "Pick",
            "options": [{"key": "r", "region": {"box": [-2 ** 63, 0, 2 ** 64 - 1, 10]}},
                        {"key": "t", "text": "x"},
                        {"key": "f", "region": {"box": [1e300, -0.5, 2.5, 9007199254740993]}}]}}),
        ("cut_multibyte", (64, 48), {"c": {"type": "choice", "instructions": "Long options.",
                                           "options": [{"text": "\u00e9" * 250},
                                                       {"text": "\u4e2d" * 199 + "\U0001F600" * 5}]}}),
        ("unicode_ids", (64, 48), {"\u00e9t\u00e9 \U0001F31E": {"type": "noul", "instructions": "Summer."}}),
        ("empty_instructions", (64, 48), {"e": {"type": "noul", "instructions": ""},
                                          "f": {"type": "choice", "instructions": " ",
                                                "options": [{"text": "x"}]}}),
        ("shared_instruction_start", (64, 48), {
            "a": {"type": "noul", "instructions": "Look at the whole screen carefully. A dialog is open."},
            "b": {"type": "choice", "instructions": "Look at the whole screen carefully. Which button?",
                  "options": [{"text": "OK"}, {"text": "Cancel"}]},
            "c": {"type": "score", "instructions": "Look at the whole screen carefully. How busy?",
                  "levels": ["calm", "busy"]}}),
        ("same_text_options", (64, 48), {"c": {"type": "choice", "instructions": "Twins.",
                                               "options": [{"key": "one", "text": "same"},
                                                           {"key": "two", "text": "same"}]}}),
        ("key_fallbacks", (64, 48), {"c": {"type": "choice", "instructions": "Fallbacks.",
                                           "options": [{"key": "", "text": "from text"},
                                                       {"key": "", "text": ""},
                                                       {"abstain": False, "text": "kept"}]}}),
        ("mixed_20", (180, 120), {"q%02d" % i: (
            {"type": "noul", "instructions": "Statement number %d holds." % i} if i % 3 == 0 else
            {"type": "choice", "instructions": "Question %d: which?" % i,
             "options": [{"text": "alpha %d" % i}, {"text": "beta"}, {"abstain": True}]} if i % 3 == 1 else
            {"type": "score", "instructions": "Question %d: how much?" % i, "levels": ["little", "much"]})
            for i in range(20)}),
    ]
    q1 = Q1
    bad = [
        ("reserved_marker_instructions", {"q": {"type": "noul", "instructions": "a <|opt|> b"}}, "questions.q.instructions"),
        ("reserved_marker_option", {"q": {"type": "choice", "instructions": "a",
                                          "options": [{"text": "<|vision_start|>"}]}}, "questions.q.options[0].text"),
        ("reserved_marker_level", {"q": {"type": "score", "instructions": "a", "levels": ["<|image_pad|>"]}}, "questions.q.levels[0]"),
        ("unknown_field", {"q": {"type": "noul", "instructions": "a", "criteria": {"x": None}}}, 'questions.q.criteria: unknown field; questions.q takes "type", "instructions", "region"'),
        ("options_and_criteria", {"q": {"type": "choice", "instructions": "a", "options": [{"text": "x"}],
                                        "criteria": {"x": None}}}, 'questions.q: needs exactly one of "options" and "criteria"'),
        ("duplicate_keys", {"q": {"type": "choice", "instructions": "a",
                                  "options": [{"key": "x"}, {"key": "x"}]}}, 'questions.q: duplicate key "x"'),
        ("too_many_options", {"q": {"type": "choice", "instructions": "a",
                                    "options": [{"text": str(i)} for i in range(256)]}}, "questions.q: has more than 255 options"),
        ("text_too_long", {"q": {"type": "noul", "instructions": "y" * 8193}}, "questions.q.instructions: longer than 8192 characters"),
        ("score_no_levels", {"q": {"type": "score", "instructions": "a", "levels": []}}, "questions.q: has no levels"),
        ("box_three_values", {"q": {"type": "noul", "instructions": "a", "region": {"box": [1, 2, 3]}}}, "questions.q.region.box: must be an array of 4 numbers"),
        ("box_wider_than_64_bits", {"q": {"type": "noul", "instructions": "a", "region": {"box": [0, 0, 2 ** 64, 1]}}},
         "questions.q.region.box[2]: integer 18446744073709551616 is outside 64 bits"),
        ("abstain_not_boolean", {"q": {"type": "choice", "instructions": "a",
                                       "options": [{"text": "x", "abstain": 1}]}}, "questions.q.options[0].abstain: must be a boolean"),
        ("numeric_level", {"q": {"type": "score", "instructions": "a", "levels": [1, 2]}}, "questions.q.levels[0]: must be a string"),
        ("missing_instructions", {"q": {"type": "noul"}}, "questions.q.instructions: required"),
        ("unknown_type", {"q": {"type": "rank", "instructions": "a"}}, 'questions.q.type: must be "noul", "choice" or "score"'),
        ("empty_questions", {}, "questions: must not be empty"),
        ("too_many_questions", {"q%d" % i: q1 for i in range(65)}, "questions: more than 64 questions"),
        ("rows_over_1024", {"q%d" % i: {"type": "choice", "instructions": "a",
                                        "options": [{"text": str(j)} for j in range(200)]} for i in range(6)},
         "questions: more than 1024 options in all"),
    ]
    return ok, bad


def special_cases(specials):
    """Every special token of the tokenizer in every text field (issue 16 F5): the six markers of
    spec §2.5 (RESERVED) are refused in each field, naming it; every other special token is its
    special id, as the reference tokenizer makes it (spec §3.4)."""
    def fields(t):
        yield ("instructions", {"q": {"type": "noul", "instructions": "is " + t + "?"}},
               "questions.q.instructions")
        yield ("option_text", {"q": {"type": "choice", "instructions": "a",
                                     "options": [{"text": "x" + t}, {"text": "y"}]}},
               "questions.q.options[0].text")
        yield ("option_key", {"q": {"type": "choice", "instructions": "a",
                                    "options": [{"key": "k" + t, "text": "x"}, {"text": "y"}]}},
               "questions.q.options[0].key")
        yield ("criteria_key", {"q": {"type": "choice", "instructions": "a",
                                      "criteria": {"k" + t: None, "b": None}}},
               "questions.q.criteria: a key")
        yield ("criteria_rubric", {"q": {"type": "choice", "instructions": "a",
                                         "criteria": {"a": "r" + t, "b": None}}},
               "questions.q.criteria.a")
        yield ("level", {"q": {"type": "score", "instructions": "a", "levels": ["lo" + t, "hi"]}},
               "questions.q.levels[0]")
        yield ("score_criteria_key", {"q": {"type": "score", "instructions": "a",
                                            "criteria": {"lo" + t: None, "hi": None}}},
               "questions.q.criteria: a key")
    ordinary = "".join(t for t in specials if t not in RESERVED)
    ok = [("special_ordinary_" + f, (64, 48), qs) for f, qs, _ in fields(ordinary)]
    bad = [("special_%s_%s" % (t.strip("<|>").replace("/", "end_"), f), qs,
            what + (" " if ": " in what else ": ") + "contains reserved marker text")
           for t in RESERVED for f, qs, what in fields(t)]
    return ok, bad


def video_cases():
    """The video form (spec §2.3, §3.6): mso/video.py's 16 frames in 4 columns, and a small one."""
    d = 12.5
    v16 = {"n_frames": 16, "cols": 4, "tile": 64, "duration": d,
           "timestamps": [int(round((i + 0.5) / 16 * d)) for i in range(16)]}
    v3 = {"n_frames": 3, "cols": 2, "tile": 96, "duration": 2.5, "timestamps": [0, 1, 2]}
    qs = {"moving": {"type": "noul", "instructions": "Something moves between the frames."},
          "what": {"type": "choice", "instructions": "What happens in the video?",
                   "options": [{"text": "a page loads"}, {"text": "nothing"}, {"abstain": True}]},
          "pace": {"type": "score", "instructions": "How fast is it?", "levels": ["slow", "fast"]}}
    return [("video_16_frames", (256, 256), v16, qs),
            ("video_3_frames", (200, 200), v3, {"q": {"type": "noul", "instructions": "A dialog opens."}})]


def video_bad():
    ok = {"n_frames": 2, "cols": 2, "tile": 32, "duration": 1, "timestamps": [0, 1]}
    return [
        ("video_17_frames", (64, 48), dict(ok, n_frames=17), "state.video.n_frames: must be an integer from 1 to 16"),
        ("video_float_timestamp", (64, 48), dict(ok, timestamps=[0, 1.5]), "state.video.timestamps[1]: must be an integer from 0"),
        ("video_short_timestamps", (64, 48), dict(ok, timestamps=[0]), "state.video.timestamps: must be an array of n_frames"),
        ("video_duration_below_1", (64, 48), dict(ok, duration=0.5), "state.video.duration: must be a number of seconds from"),
        ("video_unknown_field", (64, 48), dict(ok, fps=2), 'state.video.fps: unknown field; state.video takes "n_frames", "cols", "tile", "timestamps", "duration"'),
        ("video_mosaic_too_small", (48, 48), ok, "state.images[0]: a 48x48 mosaic cannot hold 2 frames"),
    ]


def thumbnail_size(w, h, side=448):
    """Pillow's Image.thumbnail((side, side)) size rule (spec §10.5)."""
    if side >= w and side >= h:
        return w, h
    aspect = w / h
    if 1 >= aspect:
        return max(min(math.floor(side * aspect), math.ceil(side * aspect),
                       key=lambda n: abs(aspect - n / side)), 1), side
    return side, max(min(math.floor(side / aspect), math.ceil(side / aspect),
                         key=lambda n: 0 if n == 0 else abs(aspect - side / n)), 1)


def panel_size(sizes):
    """The panel canvas of spec §10.5: grid rule, cells of the largest thumbnail, border 6, band 22."""
    n = len(sizes)
    cols, rows = (1, 1) if n == 1 else (2, 1) if n == 2 else (2, 2) if n <= 4 else (3, (n + 2) // 3)
    th = [thumbnail_size(w, h) for w, h in sizes]
    cw, ch = max(t[0] for t in th), max(t[1] for t in th)
    return cols * cw + (cols + 1) * 6, rows * (ch + 22) + (rows + 1) * 6


def panel_cases():
    """(name, still sizes, questions): several stills, no video -> one panel image."""
    return [
        ("panel_two_32", [(32, 32), (32, 32)], {"q": Q1}),
        ("panel_three", [(120, 80), (64, 200), (301, 151)],
         {"a": Q1, "b": {"type": "choice", "instructions": "Which panel shows the dialog?",
                         "options": [{"text": "1"}, {"text": "2"}, {"text": "3"}]}}),
        ("panel_thumbs", [(1900, 1000), (900, 700), (3000, 200), (100, 100), (470, 460)], {"q": Q1}),
        ("panel_sixteen", [(20 + 9 * k, 150 - 7 * k) for k in range(16)], {"q": Q1}),
    ]


def main():
    if sys.argv[1] == "tokenizer":
        build_tokenizer(sys.argv[2], sys.argv[3])
        return 0
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(sys.argv[2])
    assert tok.token_to_id(OPT) == 248077 and tok.token_to_id(OPT_END) == 248078, "option ids"
    assert tok.get_vocab_size(with_added_tokens=True) == 248079
    assert tok.token_to_id("<|image_pad|>") == 248056
    ok, bad = cases()
    specials = [a["content"] for a in json.load(open(sys.argv[2], encoding="utf-8"))["added_tokens"]
                if a["special"]]
    sp_ok, sp_bad = special_cases(specials)
    ok, bad = ok + sp_ok, bad + sp_bad
    lines = []
    for name, size, qs in ok:
        req = {"model": "omnijev", "state": {"images": [data_url(*size)]}, "questions": qs}
        lines.append(json.dumps({"name": name, "request": req, "size": list(size),
                                 "expect": compile_request(tok, req, size)}, ensure_ascii=False))
    for name, sizes, qs in panel_cases():
        req = {"state": {"images": [data_url(*sz) for sz in sizes]}, "questions": qs}
        size = panel_size(sizes)
        lines.append(json.dumps({"name": name, "request": req, "size": list(size),
                                 "expect": compile_request(tok, req, size)}, ensure_ascii=False))
    for name, size, video, qs in video_cases():
        req = {"state": {"images": [data_url(*size)], "video": video}, "questions": qs}
        lines.append(json.dumps({"name": name, "request": req, "size": list(size),
                                 "expect": compile_request(tok, req, size)}, ensure_ascii=False))
    for name, size, video, msg in video_bad():
        req = {"state": {"images": [data_url(*size)], "video": video}, "questions": {"q": Q1}}
        lines.append(json.dumps({"name": name, "request": req, "error": msg}, ensure_ascii=False))
    for name, qs, msg in bad:
        req = {"state": {"images": [data_url(64, 48)]}, "questions": qs}
        lines.append(json.dumps({"name": name, "request": req, "error": msg}, ensure_ascii=False))
    for name, req, msg in [
            ("seventeen_images", {"state": {"images": [data_url(8, 8)] * 17}, "questions": {"q": Q1}}, "state.images: holds 17 images, at most 16 (one panel)"),
            ("video_two_images", {"state": {"images": [data_url(8, 8)] * 2, "video": {"n_frames": 1, "cols": 1, "tile": 32, "timestamps": [0], "duration": 1.0}}, "questions": {"q": Q1}}, "state.images: must hold exactly one image (the mosaic)"),
            ("panel_second_too_wide", {"state": {"images": [data_url(8, 8), data_url(4097, 8)]}, "questions": {"q": Q1}}, "state.images[1]: image 1 is 4097x8"),
            ("not_a_data_url", {"state": {"images": ["aGVsbG8="]}, "questions": {"q": Q1}}, "state.images[0]: must be a data:image/png;base64 or data:image/jpeg;base64 URL"),
            ("state_text", {"state": {"images": [data_url(64, 48)], "text": "t"}, "questions": {"q": Q1}}, 'state.text: unknown field; state takes "images", "video"'),
            ("bad_top_field", {"state": {"images": [data_url(64, 48)]}, "questions": {"q": Q1}, "x": 1}, 'x: unknown field; body takes "model", "state", "questions"')]:
        lines.append(json.dumps({"name": name, "request": req, "error": msg}, ensure_ascii=False))
    text = "\n".join(lines) + "\n"
    out = sys.argv[3]
    if "--check" in sys.argv:
        with open(out, encoding="utf-8") as f:
            if f.read() != text:
                print("FAIL: %s is stale; regenerate with omnijev_compile.py fixtures" % out)
                return 1
        print("fixtures are fresh (%d cases)" % len(lines))
        return 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %d cases to %s" % (len(lines), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
