"""JEMM end to end over HTTP against transformers + PEFT (tests/oracle/jemm_e2e.py, run on the GPU
machine; answers in tests/fixtures/jemm/e2e/e2e.json). Rebuilds the oracle's tiny random base and
rank-16 adapter with s1-mkmodel (a SHA-256 mismatch fails as checkpoint drift), exports it with
s1-export --family jemm (adapter kept, fp32, unmerged), serves it with the real trio on the float32
CPU executor (tests/integration/trio.py) and posts the oracle's requests (text only, 1, 2 and 4
real images; 2 to 32 candidates; choice, score and noul). Every answer must have the oracle's
decision, its probabilities, confidence, noul and expected value within 1e-4, identical
probabilities where the oracle's bf16 label logits tie, and its usage. The oracle's fp32 logits are
rounded to bf16 as the reference's LM head leaves them; a raw logit that lies within 2e-5 of a
bf16 rounding midpoint may round either way (float32 sums in another order), so both roundings are
accepted for it, and the count is printed. Then the same with --lora merge against the oracle's
merged fp32 answers. The largest differences to the bf16 GPU reference (the released numerics)
and merged-vs-unmerged are printed, not asserted. Stdlib only.

usage: test_jemm_e2e.py BUILD_ROOT SHARED_DIR FIXTURE_DIR IMAGE_DIR
"""
import base64
import hashlib
import itertools
import json
import math
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import trio  # noqa: E402

TOL = 1e-4
MIDPOINT_EPS = 2e-5
MEDIA = {".png": "image/png", ".jpg": "image/jpeg", ".webp": "image/webp"}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def bf16_options(x):
    """The bf16 values x may round to: one, or both neighbours when x is within MIDPOINT_EPS of
    the midpoint between them (round to nearest even otherwise)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    lo = struct.unpack("<f", struct.pack("<I", u & 0xFFFF0000))[0]
    hi = struct.unpack("<f", struct.pack("<I", (u & 0xFFFF0000) + 0x10000))[0]
    if abs(x - (lo + hi) / 2) < MIDPOINT_EPS:
        return [lo, hi]
    return [struct.unpack("<f", struct.pack("<I", (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000))[0]]


def softmax(scores, temperature):
    """jemm/model.py: z / T, log-sum-exp as a left fold, exp(z - L)."""
    z = [s / temperature for s in scores]
    acc = z[0]
    for v in z[1:]:
        m = max(acc, v)
        acc = m + math.log1p(math.exp(-abs(acc - v)))
    return [math.exp(v - acc) for v in z]


def with_images(body, image_dir):
    out = dict(body)
    if "images" in body:
        urls = []
        for ref in body["images"]:
            path = os.path.join(image_dir, ref[1:])
            with open(path, "rb") as f:
                urls.append("data:%s;base64,%s" % (MEDIA[os.path.splitext(path)[1]],
                                                   base64.b64encode(f.read()).decode()))
        out["images"] = urls
    return out


def check_question(name, qid, q, got, raw, temperature, stats):
    """got: the served answer; raw: the oracle's fp32 label logits of this question."""
    kind = q.get("type", "choice")
    keys = list(got["probabilities"])
    p = [got["probabilities"][k] for k in keys]
    options = [bf16_options(x) for x in raw]
    stats["ambiguous"] += sum(1 for o in options if len(o) > 1)
    combos = list(itertools.product(*options))
    assert len(combos) <= 64, (name, qid, "too many rounding-ambiguous logits")
    best = None
    for s in combos:
        ref = softmax(list(s), temperature)
        d = max(abs(a - b) for a, b in zip(p, ref))
        if best is None or d < best[0]:
            best = (d, s, ref)
    d, s, ref = best
    where = "%s/%s" % (name, qid)
    assert d <= TOL, (where, "probabilities differ by", d, p, ref)
    stats["worst"] = max(stats["worst"], d)
    top = max(range(len(ref)), key=lambda i: (ref[i], -i))
    assert got["confidence"] == max(p) and abs(got["confidence"] - ref[top]) <= TOL, (where, got)
    for i, j in itertools.combinations(range(len(s)), 2):
        if s[i] == s[j]:
            assert p[i] == p[j], (where, "bf16 tie not kept", keys[i], keys[j], p[i], p[j])
            stats["ties"] += 1
    if kind == "choice":
        assert got["choice"] == keys[top], (where, got["choice"], keys[top])
    elif kind == "noul":
        assert keys == ["yes", "no"] and got["noul"] == p[0], (where, got)
    else:
        ev = sum(i * v for i, v in enumerate(ref))
        assert keys == [str(i) for i in range(len(p))] and abs(got["expected_value"] - ev) <= TOL, (where, got)
    stats["questions"] += 1


def serve_and_compare(t, model, fix, image_dir, kind):
    """Starts the trio on `model`, posts every request, checks against answers_`kind`."""
    t.model = model
    t.start("ex", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                   "--listen", t.ex_url])
    t.start_frontend(max_body=8 << 20)
    t.start_preprocessor()
    t.wait_health(200)
    dec = fix["decision_config"]
    stats = {"questions": 0, "ambiguous": 0, "ties": 0, "worst": 0.0}
    served = {}
    for rec in fix["requests"]:
        body = json.loads(rec["body"])
        s, _, b = t.post(json.dumps(with_images(body, image_dir)), timeout=300)
        assert s == 200, (rec["name"], s, b[:400])
        a = json.loads(b)
        assert a["model"] == "JEMM" and list(a["answers"]) == list(body["questions"]), a
        assert a["usage"]["input_tokens"] == rec["input_tokens"], (rec["name"], a["usage"], rec["input_tokens"])
        assert a["usage"]["output_tokens"] == 0
        temperature = dec["mm_temperature"] if body.get("images") else dec["temperature"]
        for (qid, q), raw in zip(body["questions"].items(), rec["raw_" + kind]):
            got = a["answers"][qid]
            want = rec["answers_" + kind][qid]
            assert list(got) == list(want) and list(got["probabilities"]) == list(want["probabilities"]), (got, want)
            check_question(rec["name"], qid, q, got, raw, temperature, stats)
        served[rec["name"]] = a["answers"]
    t.stop()
    print("%s: %d questions in %d requests, probabilities within %.3g of the fp32 oracle "
          "(tolerance %g), %d bf16 ties kept, %d rounding-ambiguous logits"
          % (kind, stats["questions"], len(fix["requests"]), stats["worst"], TOL, stats["ties"],
             stats["ambiguous"]))
    return served


def max_diff(fix, served, kind):
    worst, same = 0.0, 0
    total = 0
    for rec in fix["requests"]:
        for qid, want in rec["answers_" + kind].items():
            got = served[rec["name"]][qid]
            total += 1
            same += got.get("choice", "") == want.get("choice", "") and \
                max(got["probabilities"], key=got["probabilities"].get) == \
                max(want["probabilities"], key=want["probabilities"].get)
            for k, v in want["probabilities"].items():
                worst = max(worst, abs(v - got["probabilities"][k]))
    return worst, same, total


def main():
    build, shared, fixdir, image_dir = sys.argv[1:5]
    with open(os.path.join(fixdir, "e2e.json"), encoding="utf-8") as f:
        fix = json.load(f)
    assert "error" not in fix, fix["error"]
    tokdir = os.path.join(shared, "tokenizers", "qwen3")
    work = os.path.join(build, "tests", "jemm", "e2e-work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base, adapter = os.path.join(work, "base"), os.path.join(work, "adapter")
    trio.run([os.path.join(build, "executor/mkmodel/s1-mkmodel"), *fix["base"]["mkmodel_args"],
              "--tokenizer", os.path.join(tokdir, "tokenizer.json"), "--out", base, "--adapter-out", adapter])
    for name, want in fix["base"]["sha256"].items():
        got = sha256(os.path.join(adapter if name.startswith("adapter") else base, name))
        assert got == want, "checkpoint drift: %s is %s, the oracle used %s" % (name, got, want)
    shutil.copy(os.path.join(tokdir, "tokenizer_config.json"), base)
    with open(os.path.join(adapter, "decision_config.json"), "w") as f:
        json.dump(fix["decision_config"], f)
    models = {}
    for lora in ("keep", "merge"):
        models[lora] = os.path.join(work, lora)
        trio.run([os.path.join(build, "executor/export/s1-export"), "--family", "jemm", "--base", base,
                  "--adapter", adapter, "--lora", lora, "--out", models[lora]])
    served = {}
    for lora, kind in (("keep", "fp32"), ("merge", "merged_fp32")):
        t = trio.Trio(build, shared)
        ok = False
        try:
            served[kind] = serve_and_compare(t, models[lora], fix, image_dir, kind)
            ok = True
        finally:
            t.stop(failed=not ok)
    for kind, ref in (("fp32", "bf16"), ("merged_fp32", "merged_bf16"), ("merged_fp32", "fp32")):
        if "answers_" + ref in fix["requests"][0]:
            worst, same, total = max_diff(fix, served[kind], ref)
            print("served %s vs oracle %s: largest probability difference %.6f, %d/%d top candidates agree"
                  % (kind, ref, worst, same, total))
    for a, b in (("merged_fp32", "fp32"), ("merged_bf16", "bf16"), ("bf16", "fp32")):
        if "raw_" + a in fix["requests"][0]:
            worst = max(abs(x - y) for rec in fix["requests"]
                        for sa, sb in zip(rec["raw_" + a], rec["raw_" + b]) for x, y in zip(sa, sb))
            print("oracle label logits %s vs %s: largest difference %.6f" % (a, b, worst))
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
