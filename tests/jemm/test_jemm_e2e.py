"""JEMM end to end over HTTP against transformers + PEFT (tests/oracle/jemm_e2e.py, run on the GPU
machine; answers in tests/fixtures/jemm/e2e/e2e.json). Rebuilds the oracle's tiny random base and
rank-16 adapter with s1-mkmodel (a SHA-256 mismatch fails as checkpoint drift), exports it with
s1-export --family jemm (adapter kept, fp32, unmerged), serves it with the real trio on the float32
CPU executor in the fp32 numerics (the directory's default; tests/integration/trio.py) and posts
the oracle's requests (text only, 1, 2 and 4 real images; 2 to 32 candidates; choice, score and
noul). Every answer must have the probabilities, confidence, noul and expected value of the
reference run in float32 (the softmax of its float32 label logits, nothing rounded) within 5e-5,
its decision (a different one only where the reference's two probabilities are within 1e-6: an
exact float32 near-tie), and its usage, with x-numerics fp32. Then the same with --lora merge
against the oracle's merged fp32 run. Last, the kept-adapter directory served with --numerics bf16
(x-numerics bf16): its distance to the bf16 GPU reference (the released numerics) is printed, as
are fp32 against bf16 and merged against unmerged; not asserted (the bf16 roundings are checked
by the CPU twins, trio_packed_cpu and jemm_cpu_end_to_end). Stdlib only.

usage: test_jemm_e2e.py BUILD_ROOT SHARED_DIR FIXTURE_DIR IMAGE_DIR
"""
import base64
import hashlib
import itertools
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import trio  # noqa: E402

TOL = 5e-5        # |served - float32 reference| per probability (issue 15's bound for every family)
NEAR_TIE = 1e-6   # a decision may differ only between reference probabilities this close
MEDIA = {".png": "image/png", ".jpg": "image/jpeg", ".webp": "image/webp"}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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
    """got: the served answer; raw: the oracle's float32 label logits of this question."""
    kind = q.get("type", "choice")
    keys = list(got["probabilities"])
    p = [got["probabilities"][k] for k in keys]
    ref = softmax(list(raw), temperature)
    d = max(abs(a - b) for a, b in zip(p, ref))
    where = "%s/%s" % (name, qid)
    assert d <= TOL, (where, "probabilities differ by", d, p, ref)
    stats["worst"] = max(stats["worst"], d)
    top = max(range(len(ref)), key=lambda i: (ref[i], -i))
    assert got["confidence"] == max(p) and abs(got["confidence"] - ref[top]) <= TOL, (where, got)
    for i, j in itertools.combinations(range(len(raw)), 2):
        if raw[i] == raw[j]:
            assert p[i] == p[j], (where, "an exact tie of the reference not kept", keys[i], keys[j])
            stats["ties"] += 1
    if kind == "choice":
        g = keys.index(got["choice"])
        assert g == top or abs(ref[g] - ref[top]) <= NEAR_TIE, (where, got["choice"], keys[top])
        stats["near_ties"] += g != top
    elif kind == "noul":
        assert keys == ["yes", "no"] and got["noul"] == p[0], (where, got)
    else:
        ev = sum(i * v for i, v in enumerate(ref))
        assert keys == [str(i) for i in range(len(p))] and abs(got["expected_value"] - ev) <= TOL, (where, got)
    stats["questions"] += 1


def serve_and_compare(t, model, fix, image_dir, kind, numerics="fp32"):
    """Starts the trio on `model` in `numerics`, posts every request, checks against the float32
    run `kind` (fp32, merged_fp32); numerics bf16: only serves (returns the answers)."""
    t.model = model
    t.start("ex", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                   "--listen", t.ex_url, "--numerics", numerics])
    t.start_frontend(max_body=8 << 20)
    t.start_preprocessor()
    t.wait_health(200)
    dec = fix["decision_config"]
    stats = {"questions": 0, "near_ties": 0, "ties": 0, "worst": 0.0}
    served = {}
    for rec in fix["requests"]:
        body = json.loads(rec["body"])
        s, h, b = t.post(json.dumps(with_images(body, image_dir)), timeout=300)
        assert s == 200, (rec["name"], s, b[:400])
        assert h.get("x-numerics") == numerics, (rec["name"], h.get("x-numerics"))
        a = json.loads(b)
        assert a["model"] == "JEMM" and list(a["answers"]) == list(body["questions"]), a
        assert a["usage"]["input_tokens"] == rec["input_tokens"], (rec["name"], a["usage"], rec["input_tokens"])
        assert a["usage"]["output_tokens"] == 0
        temperature = dec["mm_temperature"] if body.get("images") else dec["temperature"]
        for (qid, q), raw in zip(body["questions"].items(), rec["raw_" + kind]):
            got = a["answers"][qid]
            want = rec["answers_" + kind][qid]
            assert list(got) == list(want) and list(got["probabilities"]) == list(want["probabilities"]), (got, want)
            if numerics == "fp32":
                check_question(rec["name"], qid, q, got, raw, temperature, stats)
        served[rec["name"]] = a["answers"]
    t.stop()
    if numerics == "fp32":
        print("%s: %d questions in %d requests, probabilities within %.3g of the float32 reference "
              "(tolerance %g), %d exact ties kept, %d decisions at a float32 near-tie"
              % (kind, stats["questions"], len(fix["requests"]), stats["worst"], TOL, stats["ties"],
                 stats["near_ties"]))
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
    trio.run([os.path.join(build, "tools/mkmodel/s1-mkmodel"), *fix["base"]["mkmodel_args"],
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
        trio.run([os.path.join(build, "tools/export/s1-export"), "--family", "jemm", "--base", base,
                  "--adapter", adapter, "--lora", lora, "--out", models[lora]])
    served = {}
    for lora, kind, nm in (("keep", "fp32", "fp32"), ("merge", "merged_fp32", "fp32"),
                           ("keep", "fp32", "bf16")):
        t = trio.Trio(build, shared)
        ok = False
        try:
            served[kind if nm == "fp32" else "cpu_bf16"] = serve_and_compare(
                t, models[lora], fix, image_dir, kind, nm)
            ok = True
        finally:
            t.stop(failed=not ok)
    for kind, ref in (("fp32", "bf16"), ("cpu_bf16", "bf16"), ("merged_fp32", "merged_bf16"),
                      ("merged_fp32", "fp32")):
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
