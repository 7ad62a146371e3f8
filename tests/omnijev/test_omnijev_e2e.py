"""OmniJev end to end against the float32 oracle (tests/oracle/omnijev_e2e.py: transformers in
float32, nothing rounded to bf16; fixtures in tests/fixtures/omnijev/e2e): the tiny random
checkpoint is rebuilt here (s1-mkmodel with the oracle's arguments, SHA-256 checked, plus the
committed torch-written heads and bare-tensor new_tok_emb.pt, whose values are not bf16-exact) and
exported with s1-export --family omnijev; the trio serves it in the fp32 numerics (the directory's
default). Parts:

  http      the trio (CPU executor) answers every oracle request over HTTP (stills and the video
            form): identical decisions, valid flags, keys and order, usage exactly, x-numerics
            fp32; probabilities, abstain, confidence and noul within one step of the 4-decimal
            rounding (1e-4).
  invariance  reordered questions, reversed Choice options (keys made explicit) and a dropped
            question give the same answers per key within 1e-4 (decisions equal up to ties, where
            the first key in the new order wins) and the usage the formula L + Σ rows predicts.
  bad       HTTP-level refusals of spec/omnijev.md §12 and §2.5: status, error type, the field
            or limit named in the message; a correct request still answers after them.
  features  in process (test_omnijev_run: family compile, CPU executor, finish): μ within 1e-5
            and the six LM features within 1e-5 of the oracle's (relative for values above one),
            per question; every question's first row equals a full forward of prefix + row.
  video     the oracle's video requests (16 frames of a mosaic): rows equal full forwards of the
            16-image prefix + row in process, μ and features within 1e-5 of the oracle's, and HTTP
            answers the oracle's within 1e-4 (as the stills in http).
  panels    several stills (no video) over HTTP, for the Pillow panel fixtures of
            tests/oracle/omnijev_panels.py: the answers equal the in-process run's, the usage
            equals that of the same request sent with Pillow's panel JPEG as its one image (same
            grid and prompt), and the answers equal the Pillow's-panel answers exactly
            (PANEL_TOL 0: our panel is Pillow's bit for bit, numerals included).

  all       every part above on one model and one trio (two executors behind it), in three
            streams at once (STREAMS; the sanitizer build runs this form).

Stdlib only. usage: test_omnijev_e2e.py PART BUILD_ROOT SHARED_DIR QWEN35_TOKENIZER [RUNNER]
(RUNNER, test_omnijev_run: features, video, panels, all)
"""
import base64
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import trio  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures", "omnijev", "e2e")
TOL_ANSWER = 1e-4 + 1e-9   # probabilities are rounded to 4 places on both sides
TOL_FEATS = 1e-5
PANEL_TOL = 0.0            # |answer(our panel) - answer(Pillow's panel)|: the panels are Pillow's bit for bit
PANELS = os.path.join(HERE, "..", "fixtures", "omnijev", "panels")
MODEL = "tinnel123/OmniJev"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fixture():
    """The oracle's fixture and its two images as data URLs: (fix, {"@IMAGE@": ..., "@VIDEO@": ...})."""
    with open(os.path.join(FIX, "e2e.json"), encoding="utf-8") as f:
        fix = json.load(f)
    assert "error" not in fix and "errors" not in fix, "the oracle run failed: %s" % fix.get("log")
    urls = {}
    for key, tag in (("image", "@IMAGE@"), ("video", "@VIDEO@")):
        with open(os.path.join(FIX, fix[key]), "rb") as f:
            urls[tag] = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        assert sha256(os.path.join(FIX, fix[key])) == fix[key + "_sha256"]
    return fix, urls


def make_model(build, tok35, work, fix):
    """s1-mkmodel with the oracle's arguments (hashes checked) + the committed package -> export."""
    base, ckpt, out = (os.path.join(work, n) for n in ("base", "ckpt", "model"))
    a = fix["mkmodel_args"]
    trio.run([os.path.join(build, "tools/mkmodel/s1-mkmodel"), *a[:6], "--tokenizer", tok35,
              "--out", base, "--adapter-out", ckpt, *a[6:]])
    for name, want in fix["sha256"].items():
        if name.endswith("adapter_config.json"):
            continue  # names the base's path
        got = sha256(os.path.join(work, name))
        assert got == want, "s1-mkmodel output drifted: %s is %s, the oracle used %s" % (name, got, want)
    for f in os.listdir(os.path.join(FIX, "package")):
        shutil.copy(os.path.join(FIX, "package", f), ckpt)
    trio.run([os.path.join(build, "tools/export/s1-export"), "--family", "omnijev", "--base", base,
              "--checkpoint", ckpt, "--out", out])
    return out


def body_of(req, urls):
    b = req["body"]
    for tag, u in urls.items():
        b = b.replace(tag, u)
    return json.loads(b)


def compare_answer(where, got, want, fails, by_key=False):
    """got, want: one answer object. Decisions and flags exact; numbers within TOL_ANSWER."""
    for k in ("latency_s", "latency_total_s"):
        if not (isinstance(got.get(k), (int, float)) and got[k] >= 0):
            fails.append("%s: %s missing or negative" % (where, k))
    keys = [k for k in got if not k.startswith("latency")]
    if keys != list(want):
        fails.append("%s: fields %s, want %s" % (where, keys, list(want)))
        return
    for k, w in want.items():
        g = got[k]
        if k == "probabilities":
            if (sorted(g) if by_key else list(g)) != (sorted(w) if by_key else list(w)):
                fails.append("%s: probability keys %s, want %s" % (where, list(g), list(w)))
                continue
            for key in w:
                if abs(g[key] - w[key]) > TOL_ANSWER:
                    fails.append("%s: P(%s) %.4f, want %.4f" % (where, key, g[key], w[key]))
        elif isinstance(w, bool) or w is None or isinstance(w, str):
            if g != w and not (by_key and k in ("choice", "score")):
                fails.append("%s: %s %r, want %r" % (where, k, g, w))
        elif abs(g - w) > TOL_ANSWER:
            fails.append("%s: %s %.4f, want %.4f" % (where, k, g, w))


def is_video(req):
    return req["name"].startswith("video_")


def post_ok(t, body, where, fails):
    s, h, b = t.post(body)
    if s != 200:
        fails.append("%s: HTTP %d %s" % (where, s, b[:300]))
        return None
    if h.get("x-numerics") != "fp32":
        fails.append("%s: x-numerics %r, want fp32 (the directory's default)" % (where, h.get("x-numerics")))
    a = json.loads(b)
    if a.get("model") != MODEL:
        fails.append("%s: model %r" % (where, a.get("model")))
    return a


def part_http(t, fix, urls, fails, video=False):
    """Every oracle request of the stills (video: of the video form) over HTTP."""
    worst = 0.0
    reqs = [r for r in fix["requests"] if is_video(r) == video]
    for req in reqs:
        a = post_ok(t, body_of(req, urls), req["name"], fails)
        if a is None:
            continue
        if a["usage"] != req["usage"]:
            fails.append("%s: usage %s, want %s" % (req["name"], a["usage"], req["usage"]))
        if list(a["answers"]) != list(req["answers"]):
            fails.append("%s: answer ids %s" % (req["name"], list(a["answers"])))
            continue
        for qid, want in req["answers"].items():
            got = a["answers"][qid]
            compare_answer("%s.%s" % (req["name"], qid), got, want, fails)
            for k, w in want.items():
                if isinstance(w, float) and isinstance(got.get(k), (int, float)):
                    worst = max(worst, abs(got[k] - w))
                if k == "probabilities" and isinstance(got.get(k), dict):
                    worst = max([worst] + [abs(got[k].get(x, 9) - v) for x, v in w.items()])
    print("%s: %d requests, max |answer - oracle| = %.3g" % ("video http" if video else "http", len(reqs), worst))


def permuted(body, oracle_q):
    """Questions reversed; Choice options reversed with their keys made explicit; criteria maps
    reversed; Score levels kept (the ordinal head is not permutation-invariant)."""
    keys = {q["id"]: q["keys"] for q in oracle_q}
    out = dict(body)
    qs = {}
    for qid in reversed(list(body["questions"])):
        q = json.loads(json.dumps(body["questions"][qid]))
        if q["type"] == "choice" and "options" in q:
            kept = [e for e in q["options"] if not e.get("abstain")]
            for e, k in zip(kept, keys[qid]):
                e["key"] = k
            q["options"] = list(reversed(q["options"]))
        elif q["type"] == "choice" and "criteria" in q:
            q["criteria"] = dict(reversed(list(q["criteria"].items())))
        qs[qid] = q
    out["questions"] = qs
    return out


def check_decision(where, got, fails):
    p = got.get("probabilities") or {}
    if not p:
        return
    k = "choice" if "choice" in got else "score"
    best = max(p.values())
    first = next(key for key, v in p.items() if v == best)
    # the winner holds the largest (rounded) probability; among exact ties the first in order
    if abs(p[got[k]] - best) > TOL_ANSWER or (list(p.values()).count(best) > 1 and got[k] != first):
        fails.append("%s: decision %r, probabilities %s" % (where, got[k], p))


def part_invariance(t, fix, urls, fails):
    n = 0
    for req in fix["requests"]:
        if is_video(req):
            continue
        body = permuted(body_of(req, urls), req["questions"])
        a = post_ok(t, body, req["name"] + "/permuted", fails)
        if a is None:
            continue
        n += 1
        if a["usage"] != req["usage"]:
            fails.append("%s/permuted: usage %s, want %s" % (req["name"], a["usage"], req["usage"]))
        if list(a["answers"]) != list(body["questions"]):
            fails.append("%s/permuted: answer order %s" % (req["name"], list(a["answers"])))
        for qid, want in req["answers"].items():
            got = a["answers"].get(qid, {})
            where = "%s/permuted.%s" % (req["name"], qid)
            compare_answer(where, got, want, fails, by_key=True)
            check_decision(where, got, fails)
            if "probabilities" in want and got.get("probabilities"):
                order = list(got["probabilities"])
                want_order = list(want["probabilities"])
                if body["questions"][qid]["type"] == "choice" and order != list(reversed(want_order)):
                    fails.append("%s: option order %s" % (where, order))
            if want.get("choice") and got.get("choice") != want["choice"]:
                p = want["probabilities"]
                if p[got.get("choice")] != p[want["choice"]]:  # only a tie may move the winner
                    fails.append("%s: choice %r, want %r" % (where, got.get("choice"), want["choice"]))
    # dropping a question: the others unchanged, usage = L + the remaining rows (L unchanged here)
    req = next(r for r in fix["requests"] if r["name"] == "twelve")
    body = body_of(req, urls)
    drop = list(body["questions"])[0]
    del body["questions"][drop]
    q0 = next(q for q in req["questions"] if q["id"] == drop)
    rows = req["rows"]
    want_tokens = req["input_tokens"] - sum(len(r) for r in rows[q0["first_row"]:q0["first_row"] + q0["n_rows"]])
    a = post_ok(t, body, "twelve/dropped", fails)
    if a is not None:
        n += 1
        if a["usage"]["input_tokens"] != want_tokens:
            fails.append("twelve/dropped: input_tokens %d, want %d" % (a["usage"]["input_tokens"], want_tokens))
        for qid in body["questions"]:
            compare_answer("twelve/dropped.%s" % qid, a["answers"][qid], req["answers"][qid], fails)
    print("invariance: %d permuted / reduced requests" % n)


def bad_cases(url):
    def rq(qs, **top):
        b = {"state": {"images": [url]}, "questions": qs}
        b.update(top)
        return b
    noul = {"type": "noul", "instructions": "A page is shown."}
    png1 = "data:image/png;base64," + base64.b64encode(tiny_png(5000, 10)).decode()
    png2 = "data:image/png;base64," + base64.b64encode(tiny_png(2, 500)).decode()
    return [
        # (name, body, status, type, words the message must hold)
        ("bad model", rq({"q": noul}, model="gpt"), 422, "invalid_request", ["model"]),
        ("no state", {"questions": {"q": noul}}, 422, "invalid_request", ["state"]),
        ("17 images", {"state": {"images": [url] * 17}, "questions": {"q": noul}}, 422, "invalid_request", ["state.images", "at most 16"]),
        ("video with two images", {"state": {"images": [url, url], "video": {"n_frames": 1, "cols": 1, "tile": 32, "duration": 1.0, "timestamps": [0]}}, "questions": {"q": noul}}, 422, "invalid_request", ["exactly one image (the mosaic)"]),
        ("panel, bad second image", {"state": {"images": [url, "data:image/png;base64," + base64.b64encode(b"hello world").decode()]}, "questions": {"q": noul}}, 422, "invalid_request", ["state.images[1]"]),
        ("no image", {"state": {"images": []}, "questions": {"q": noul}}, 422, "invalid_request", ["state.images"]),
        ("state.text", {"state": {"images": [url], "text": "task"}, "questions": {"q": noul}}, 422, "invalid_request", ["text"]),
        ("video without cols", {"state": {"images": [url], "video": {"n_frames": 16}}, "questions": {"q": noul}}, 422, "invalid_request", ["state.video.cols"]),
        ("video mosaic too small", {"state": {"images": [url], "video": {"n_frames": 16, "cols": 4, "tile": 384, "duration": 9.7, "timestamps": list(range(16))}}, "questions": {"q": noul}}, 422, "invalid_request", ["state.images[0]", "cannot hold 16 frames"]),
        ("http url", rq({"q": noul}, state={"images": ["http://x/a.png"]}), 422, "invalid_request", ["state.images[0]"]),
        ("gif url", rq({"q": noul}, state={"images": ["data:image/gif;base64,R0lGODlhAQABAAAAACw="]}), 422, "invalid_request", ["state.images[0]"]),
        ("bad base64", rq({"q": noul}, state={"images": ["data:image/png;base64,@@@@"]}), 422, "invalid_request", ["state.images[0]"]),
        ("not an image", rq({"q": noul}, state={"images": ["data:image/png;base64," + base64.b64encode(b"hello world").decode()]}), 422, "invalid_request", ["state.images[0]"]),
        ("side over 4096", rq({"q": noul}, state={"images": [png1]}), 422, "invalid_request", ["state.images[0]"]),
        ("aspect over 200", rq({"q": noul}, state={"images": [png2]}), 422, "invalid_request", ["state.images[0]"]),
        ("empty questions", rq({}), 422, "invalid_request", ["questions"]),
        ("65 questions", rq({"q%d" % i: noul for i in range(65)}), 422, "invalid_request", ["64 questions"]),
        ("id over 256", rq({"x" * 257: noul}), 422, "invalid_request", ["256"]),
        ("unknown type", rq({"q": {"type": "rank", "instructions": "a"}}), 422, "invalid_request", ["questions.q.type"]),
        ("missing instructions", rq({"q": {"type": "noul"}}), 422, "invalid_request", ["instructions"]),
        ("instructions number", rq({"q": {"type": "noul", "instructions": 5}}), 422, "invalid_request", ["questions.q.instructions"]),
        ("text over 8192", rq({"q": {"type": "noul", "instructions": "y" * 8193}}), 422, "invalid_request", ["8192"]),
        ("marker in instructions", rq({"q": {"type": "noul", "instructions": "a <|opt|> b"}}), 422, "invalid_request", ["questions.q.instructions"]),
        ("marker in option", rq({"q": {"type": "choice", "instructions": "a", "options": [{"text": "<|/opt|>"}]}}), 422, "invalid_request", ["questions.q.options[0].text"]),
        ("image pad in level", rq({"q": {"type": "score", "instructions": "a", "levels": ["<|image_pad|>"]}}), 422, "invalid_request", ["questions.q.levels[0]"]),
        ("noul criteria", rq({"q": {"type": "noul", "instructions": "a", "criteria": {"x": None}}}), 422, "invalid_request", ["criteria"]),
        ("unknown question field", rq({"q": {"type": "noul", "instructions": "a", "hint": 1}}), 422, "invalid_request", ["hint"]),
        ("options and criteria", rq({"q": {"type": "choice", "instructions": "a", "options": [{"text": "x"}], "criteria": {"x": None}}}), 422, "invalid_request", ["exactly one of"]),
        ("levels and criteria", rq({"q": {"type": "score", "instructions": "a", "levels": ["x"], "criteria": {"x": None}}}), 422, "invalid_request", ["questions.q"]),
        ("unknown option field", rq({"q": {"type": "choice", "instructions": "a", "options": [{"text": "x", "color": "red"}]}}), 422, "invalid_request", ["color"]),
        ("abstain not boolean", rq({"q": {"type": "choice", "instructions": "a", "options": [{"text": "x", "abstain": 1}]}}), 422, "invalid_request", ["questions.q.options[0].abstain: must be a boolean"]),
        ("duplicate keys", rq({"q": {"type": "choice", "instructions": "a", "options": [{"key": "x"}, {"key": "x"}]}}), 422, "invalid_request", ["duplicate key"]),
        ("256 options", rq({"q": {"type": "choice", "instructions": "a", "options": [{"text": str(i)} for i in range(256)]}}), 422, "invalid_request", ["255 options"]),
        ("1200 rows", rq({"q%d" % i: {"type": "choice", "instructions": "a", "options": [{"text": str(j)} for j in range(200)]} for i in range(6)}), 422, "invalid_request", ["1024"]),
        ("numeric level", rq({"q": {"type": "score", "instructions": "a", "levels": [1, 2]}}), 422, "invalid_request", ["questions.q.levels[0]"]),
        ("score no levels", rq({"q": {"type": "score", "instructions": "a", "levels": []}}), 422, "invalid_request", ["no levels"]),
        ("box of 3", rq({"q": {"type": "noul", "instructions": "a", "region": {"box": [1, 2, 3]}}}), 422, "invalid_request", ["4 numbers"]),
        ("box of strings", rq({"q": {"type": "noul", "instructions": "a", "region": {"box": ["1", 2, 3, 4]}}}), 422, "invalid_request", ["region"]),
        ("region without box", rq({"q": {"type": "noul", "instructions": "a", "region": {"xy": [1, 2]}}}), 422, "invalid_request", ["region"]),
    ]


def tiny_png(w, h):
    import zlib
    raw = zlib.compress((b"\x00" + b"\x80" * (3 * w)) * h)

    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def part_bad(t, fix, urls, fails):
    url = urls["@IMAGE@"]
    good = body_of(fix["requests"][0], urls)
    for name, body, status, typ, words in bad_cases(url):
        s, _, b = t.post(body)
        try:
            err = json.loads(b)["error"]
        except (ValueError, KeyError, TypeError):
            fails.append("%s: HTTP %d, body %r" % (name, s, b[:200]))
            continue
        if s != status or err.get("type") != typ or not all(w in err.get("message", "") for w in words):
            fails.append("%s: HTTP %d %s, want %d %s naming %s" % (name, s, err, status, typ, words))
    for name, raw, status, typ in [("not json", b"{", 400, "invalid_json"),
                                   ("NaN", b'{"state":{"images":[]},"questions":NaN}', 400, "invalid_json")]:
        s, _, b = t.post(raw)
        if s != status or json.loads(b)["error"]["type"] != typ:
            fails.append("%s: HTTP %d %s" % (name, s, b[:200]))
    s, _, b = t.post(body_of(fix["requests"][0], urls), headers={"Content-Type": "text/plain"})
    if s != 415:
        fails.append("text/plain: HTTP %d" % s)
    a = post_ok(t, good, "good after bad", fails)
    want = fix["requests"][0]["answers"]
    if a is not None and list(a["answers"]) != list(want):
        fails.append("good after bad: answer ids %s" % list(a["answers"]))
    elif a is not None:
        for qid in want:
            compare_answer("good after bad.%s" % qid, a["answers"][qid], want[qid], fails)
    # /v1/models: 1 to 16 stills, and the family's 12 MiB body limit (issue 16)
    s, _, b = t.http("GET", "/v1/models")
    m = json.loads(b)["models"][0]
    if m["image_limits"]["images"] != [1, 16] or m.get("max_body_bytes") != 12582912:
        fails.append("/v1/models: images %s, max_body_bytes %s" % (m["image_limits"]["images"],
                                                                   m.get("max_body_bytes")))
    print("bad input: %d cases" % (len(bad_cases(url)) + 3))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "F32"
        out[k] = list(struct.unpack("<%df" % ((b - a) // 4), data[a:b]))
    return out


def part_features(runner, model, work, fix, urls, fails, video=False):
    """In process, the stills' requests (video: the video form's)."""
    worst_mu = worst_f = worst_rel = 0.0
    for req in fix["requests"]:
        if is_video(req) != video:
            continue
        d = os.path.join(work, req["name"])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "request.json"), "w", encoding="utf-8") as f:
            json.dump(body_of(req, urls), f, ensure_ascii=False)
        r = subprocess.run([runner, model, os.path.join(d, "request.json"), d], capture_output=True, text=True)
        if r.returncode != 0:
            fails.append("%s: test_omnijev_run failed: %s%s" % (req["name"], r.stdout, r.stderr))
            continue
        out = read_safetensors(os.path.join(d, "run.safetensors"))
        got = []  # one output per question with options, in question order
        while "q%d.meta" % len(got) in out:
            i = len(got)
            typ, k, _ = (int(x) for x in out["q%d.meta" % i])
            got.append((typ, k, out["q%d.out" % i]))
        qs = [q for q in req["questions"] if q["keys"]]
        if len(got) != len(qs):
            fails.append("%s: %d executor outputs, want %d" % (req["name"], len(got), len(qs)))
            continue
        for q, (typ, k, vals) in zip(qs, got):
            where = "%s.%s" % (req["name"], q["id"])
            if typ != {"noul": 0, "choice": 1, "score": 2}[q["type"]]:
                fails.append("%s: type id %d" % (where, typ))
            if k != len(q["keys"]):
                fails.append("%s: %d outputs, want %d" % (where, k, len(q["keys"])))
                continue
            dm = max(abs(a - b) for a, b in zip(vals[:k], q["mu"]))
            worst_mu = max(worst_mu, dm)
            if dm > TOL_FEATS:
                fails.append("%s: mu differs by %.3g" % (where, dm))
            if q["type"] != "score":
                # absolute below one, relative above (a float32 sum S of magnitude > 128 has
                # ulps of 1.5e-5, and S/10 and dist inherit them)
                feats = [x for row in q["feats"] for x in row]
                df = max(abs(a - b) for a, b in zip(vals[k:], feats))
                dr = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(vals[k:], feats))
                worst_f, worst_rel = max(worst_f, df), max(worst_rel, dr)
                if len(vals) != k * 7 or dr > TOL_FEATS:
                    fails.append("%s: features differ by %.3g (relative above one %.3g)" % (where, df, dr))
    print("features: max |mu - oracle| = %.3g; features: max |diff| = %.3g, max |diff|/max(1, |oracle|)"
          " = %.3g" % (worst_mu, worst_f, worst_rel))


def part_video(t, runner, model, work, fix, urls, fails):
    """The oracle's video requests (16 frames of a mosaic): in process, the rows equal full
    forwards of the 16-image prefix + row and μ and the features are the oracle's
    (part_features); over HTTP, the oracle's answers and usage (part_http)."""
    n = sum(1 for r in fix["requests"] if is_video(r))
    if n < 2:
        fails.append("video: %d oracle requests of the video form, want 2" % n)
    part_features(runner, model, work, fix, urls, fails, video=True)
    part_http(t, fix, urls, fails, video=True)


def panel_requests():
    """(case, body with the stills, body with Pillow's panel.jpg) for the fixtures with a panel.jpg."""
    with open(os.path.join(PANELS, "panels.json")) as f:
        meta = json.load(f)
    qs = {"who": {"type": "noul", "instructions": "A person is visible in panel 1."},
          "which": {"type": "choice", "instructions": "Which panel shows the dialog?",
                    "options": [{"text": "panel 1"}, {"text": "panel 2"}, {"text": "none"}]},
          "busy": {"type": "score", "instructions": "How busy is the screen?", "levels": ["calm", "busy", "chaotic"]}}
    out = []
    for c in meta["cases"]:
        jpg = os.path.join(PANELS, c["name"], "panel.jpg")
        if not os.path.exists(jpg):
            continue
        urls = []
        for fn in c["inputs"]:
            with open(os.path.join(PANELS, c["name"], fn), "rb") as f:
                kind = "jpeg" if fn.endswith(".jpg") else "png"
                urls.append("data:image/%s;base64,%s" % (kind, base64.b64encode(f.read()).decode()))
        with open(jpg, "rb") as f:
            pil = "data:image/jpeg;base64," + base64.b64encode(f.read()).decode()
        out.append((c["name"], {"state": {"images": urls}, "questions": qs},
                    {"state": {"images": [pil]}, "questions": qs}))
    return out


def answer_numbers(a):
    """Every number of an answers map, by (question, field[, key])."""
    out = {}
    for qid, ans in a["answers"].items():
        for k, v in ans.items():
            if k.startswith("latency"):
                continue
            if isinstance(v, dict):
                for key, x in v.items():
                    out[(qid, k, key)] = x
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[(qid, k)] = v
    return out


def part_panels(t, runner, model, work, fails):
    cases = panel_requests()
    if len(cases) < 3:
        fails.append("panels: %d fixtures with panel.jpg, want 3" % len(cases))
    worst = 0.0
    for name, ours, pil in cases:
        path = os.path.join(work, name + ".json")
        with open(path, "w") as f:
            json.dump(ours, f)
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        r = subprocess.run([runner, model, path, d], capture_output=True, text=True)
        if r.returncode != 0:
            fails.append("panels %s in process: %s%s" % (name, r.stdout, r.stderr))
            continue
        with open(os.path.join(d, "response.json")) as f:
            want = json.load(f)
        a = post_ok(t, ours, "panels " + name, fails)
        b = post_ok(t, pil, "panels %s (Pillow's panel)" % name, fails)
        if a is None or b is None:
            continue
        for qid, w in want["answers"].items():
            compare_answer("panels %s.%s" % (name, qid), a["answers"].get(qid, {}),
                           {k: v for k, v in w.items() if not k.startswith("latency")}, fails)
        if a["usage"] != want["usage"] or a["usage"] != b["usage"]:
            fails.append("panels %s: usage %s, in process %s, Pillow's panel %s" % (name, a["usage"], want["usage"], b["usage"]))
        na, nb = answer_numbers(a), answer_numbers(b)
        key = max(na, key=lambda k: abs(na[k] - nb.get(k, 9)))
        diff = abs(na[key] - nb.get(key, 9))
        same = all(a["answers"][q].get(f) == b["answers"][q].get(f) for q in a["answers"] for f in ("choice", "score"))
        pdiff = max(abs(na[k] - nb.get(k, 9)) for k in na if k[1] != "confidence")
        worst = max(worst, diff)
        print("panels %-12s %d stills, %d input tokens; vs Pillow's panel: max |answer diff| %.4f (%s), "
              "probabilities and noul %.4f, decisions %s"
              % (name, len(ours["state"]["images"]), a["usage"]["input_tokens"], diff, ".".join(key), pdiff,
                 "equal" if same else "DIFFER"))
        if diff > PANEL_TOL:
            fails.append("panels %s: answers differ from Pillow's panel by %.4f > %g" % (name, diff, PANEL_TOL))
    print("panels: max |answer(our panel) - answer(Pillow's panel)| = %.4f" % worst)


PARTS = ("http", "invariance", "bad", "features", "video", "panels")
TRIO_PARTS = ("http", "invariance", "bad", "video", "panels")


def run_part(part, t, runner, model, work, fix, urls, fails):
    work = os.path.join(work, part)  # the parts' files apart (request and panel names overlap)
    os.makedirs(work)
    if part == "features":
        part_features(runner, model, work, fix, urls, fails)
    elif part == "video":
        part_video(t, runner, model, work, fix, urls, fails)
    elif part == "panels":
        part_panels(t, runner, model, work, fails)
    else:
        {"http": part_http, "invariance": part_invariance, "bad": part_bad}[part](t, fix, urls, fails)


def timed_part(p, t, runner, model, work, fix, urls, fails, prefix):
    """Runs one part; its failures go to fails (named by part when prefix); an exception is one."""
    t0 = time.time()
    part_fails = []
    try:
        run_part(p, t, runner, model, work, fix, urls, part_fails)
    except Exception as e:  # noqa: BLE001 (reported as this part's failure)
        if not prefix:
            raise
        part_fails.append("%s: %r" % (p, e))
    fails += ["[%s] %s" % (p, f) for f in part_fails] if prefix else part_fails
    if prefix:
        print("%s: %s (%d failures) in %.1f s" % (p, "PASS" if not part_fails else "FAIL",
                                                 len(part_fails), time.time() - t0), flush=True)


# all: the parts in three streams at once, each a thread: two post to the one trio, whose frontend
# hands each request to one of two preprocessor + executor pairs (one credit each), the third runs
# test_omnijev_run processes. Sums of the ASan build's part times: about even.
STREAMS = (("http", "bad", "video"), ("invariance", "panels"), ("features",))


def start_two_executors(t, model):
    """The trio with a second s1-executor (ex2) and s1-preprocessor (pp2) on the same frontend; one
    credit per preprocessor, so two requests at once go one to each executor."""
    ex2_url = "ipc://%s/ex2.sock" % t.tmp
    t.start_executor()
    t.start("ex2", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                    "--listen", ex2_url])
    # the 255-row Choice runs for minutes in the ASan build on a small machine, sharing its cores
    # with the other tests (scripts/test)
    t.start_frontend(timeout_ms=1200000)
    t.client_timeout = 1230
    t.start_preprocessor(credits=1)
    t.start("pp2", [t.bin("preprocessor/s1-preprocessor"), "--frontend", t.fe_url, "--executor",
                    ex2_url, "--model", model, "--credits", "1", "--id", "pp2"])
    t.wait_health(200)
    t.wait_metric("s1_preprocessors_ready 2")


def main():
    """PART one of PARTS, or all: every part on one model and one trio (the sanitizer build's
    form, where each part's start costs tens of seconds), in STREAMS; failures name their part."""
    part, build, shared, tok35 = sys.argv[1:5]
    runner = sys.argv[5] if len(sys.argv) > 5 else None
    every = part == "all"
    assert every or part in PARTS, "unknown part %r" % part
    fix, urls = fixture()
    work = tempfile.mkdtemp(prefix="s1-omni-", dir="/tmp")
    fails = []
    t = None
    try:
        t0 = time.time()
        model = make_model(build, tok35, work, fix)
        print("model made and exported in %.1f s" % (time.time() - t0), flush=True)
        if part in TRIO_PARTS or every:
            t0 = time.time()
            t = trio.Trio(build, shared)
            t.model = model
            if every:
                start_two_executors(t, model)
                print("trio healthy in %.1f s" % (time.time() - t0), flush=True)
            else:
                t.start_all(timeout_ms=1200000)  # as above
        if every:
            got = [[] for _ in STREAMS]
            def stream(parts, out):
                for p in parts:
                    timed_part(p, t, runner, model, work, fix, urls, out, True)
            th = [threading.Thread(target=stream, args=(ps, o)) for ps, o in zip(STREAMS, got)]
            for x in th:
                x.start()
            for x in th:
                x.join()
            fails += [f for o in got for f in o]
        else:
            timed_part(part, t, runner, model, work, fix, urls, fails, False)
    finally:
        if t is not None:
            t.kill("ex2", signal.SIGTERM)
            t.stop(failed=bool(fails))
        shutil.rmtree(work, ignore_errors=True)
    for f in fails[:60]:
        print("FAIL", f)
    print("%s: %s (%d failures)" % (part, "PASS" if not fails else "FAIL", len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
