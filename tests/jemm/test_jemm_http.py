"""JEMM over HTTP on the real trio (s1-executor --device cpu --bf16-rounding, s1-preprocessor,
s1-frontend; tests/integration/trio.py) with the small random JEMM directory of
recipe/jemm/make-demo-model: the recipe's example requests answer 200 in the reference's shape,
usage equals the render oracle's token counts, refusals carry the reference's wording in the one
error shape (spec/wire.md), bad input (spec §8) names the field before the reference's detail, and
/v1/models describes the family. Stdlib only.

usage: test_jemm_http.py BUILD_ROOT SHARED_DIR RENDER.jsonl
"""
import base64
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import trio  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
import jemm_render as jr  # noqa: E402  (stdlib only: small PNGs)

KEYS = {"choice": ["type", "choice", "probabilities", "confidence"],
        "noul": ["type", "noul", "probabilities", "confidence"],
        "score": ["type", "probabilities", "confidence", "expected_value"]}


def check_answer(body, answer):
    a = json.loads(answer)
    assert list(a) == ["model", "answers", "usage"] and a["model"] == "JEMM", a
    assert list(a["usage"]) == ["input_tokens", "output_tokens", "latency_ms"], a["usage"]
    assert a["usage"]["output_tokens"] == 0 and a["usage"]["latency_ms"] > 0
    assert list(a["answers"]) == list(body["questions"]), (list(a["answers"]), list(body["questions"]))
    for qid, q in body["questions"].items():
        ans, kind = a["answers"][qid], q.get("type", "choice")
        assert list(ans) == KEYS[kind] and ans["type"] == kind, ans
        p = ans["probabilities"]
        assert abs(sum(p.values()) - 1.0) < 1e-12 and ans["confidence"] == max(p.values()), ans
        if kind == "choice":
            assert list(p) == list(q["criteria"]) and ans["choice"] == max(p, key=p.get), ans
        elif kind == "noul":
            assert list(p) == ["yes", "no"] and ans["noul"] == p["yes"], ans
        else:
            assert list(p) == [str(i) for i in range(len(q["criteria"]))]
            assert abs(ans["expected_value"] - sum(i * v for i, v in enumerate(p.values()))) < 1e-12
    return a


def test(t, render):
    model = os.path.join(t.tmp, "jemm")
    subprocess.run([os.path.join(ROOT, "recipe", "jemm", "make-demo-model"), model, "--build", t.build],
                   check=True, capture_output=True, env=dict(os.environ, S1_SHARED=t.shared))
    t.model = model
    t.start("ex", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                   "--listen", t.ex_url, "--bf16-rounding"])
    t.start_frontend()
    t.start_preprocessor()
    t.wait_health(200)

    s, _, b = t.http("GET", "/v1/models")
    m = json.loads(b)["models"][0]
    assert s == 200 and m["id"] == "JEMM" and m["family"] == "jemm" and "MaestroYan/JEMM" in m["aliases"], m

    examples = os.path.join(ROOT, "recipe", "jemm", "examples")
    for name in sorted(os.listdir(examples)):
        with open(os.path.join(examples, name), encoding="utf-8") as f:
            body = json.load(f)
        s, h, b = t.post(body)
        assert s == 200, (name, s, b[:300])
        assert h.get("x-model-revision") not in (None, "", "unknown"), h
        check_answer(body, b)
        print("ok", name)

    cases = [json.loads(line) for line in open(render, encoding="utf-8")][1:]
    n_ok = n_err = 0
    for c in cases:
        if c["name"] in ("image_budget", "image_too_many_pixels", "j14_budget"):
            continue  # large bodies: the render test covers them
        s, h, b = t.post(c["body"])
        if "error" in c:
            e = json.loads(b)
            assert s == 422 and e["error"]["type"] == "invalid_request", (c["name"], s, b)
            # a non-object body is refused by the preprocessor itself, in its own words
            assert c["error"] in e["error"]["message"] or c["name"] == "body_not_object", (
                c["name"], e, c["error"])
            n_err += 1
        elif c["name"] in ("text_multi_structured", "image_one_256", "j13_special_in_description",
                           "j6_32_labels"):
            assert s == 200, (c["name"], s, b[:300])
            a = check_answer(json.loads(c["body"]), b)
            assert a["usage"]["input_tokens"] == c["input_tokens"], (c["name"], a["usage"])
            n_ok += 1
    assert n_ok == 4 and n_err >= 55, (n_ok, n_err)
    # the body limit is the model's (its directory's limits.max_body_bytes: the reference's
    # 16,000,000 bytes), listed by /v1/models: 15.9 MB answered, one byte over 16,000,000 refused
    s, _, b = t.http("GET", "/v1/models")
    assert json.loads(b)["models"][0]["max_body_bytes"] == 16000000, b[:500]
    small = json.dumps({"questions": {"q": {"type": "noul"}}}).encode()
    for size, want in ((15900000, 200), (16000000, 200), (16000001, 413)):
        s, h, b = t.post(small + b" " * (size - len(small)))
        assert s == want, (size, s, b[:300])
        if want == 413:
            e = json.loads(b)["error"]
            # the largest limit of the models here: refused at the head, before the body
            assert e["type"] == "too_large" and e["message"] == (
                "body: 16000001 bytes; no model here accepts more than 16000000"), e
    # issue 16 F5: the attack's vision-marker texts in requests with an image are refused
    attack = os.path.join(t.shared, "findings", "2026-12-01-attack")
    for marker in ("vision_start", "vision_end", "video_pad"):
        with open(os.path.join(attack, "jemm_%s_text_with_image_accepted.json" % marker), "rb") as f:
            s, h, b = t.post(f.read())
        e = json.loads(b)["error"]
        assert s == 422 and e["type"] == "invalid_request" and \
            "unexpected image placeholders" in e["message"], (marker, s, b)
    for raw, why in (('{"questions": {"q": {"type": "noul"}, "q": {}}}', "duplicate key"),
                     ('{"state": NaN, "questions": {"q": {"type": "noul"}}}', "NaN"),
                     ('{"questions": ', "truncated")):
        s, _, b = t.post(raw)
        assert s == 400 and json.loads(b)["error"]["type"] == "invalid_json", (why, s, b)
    s, _, b = t.post(json.dumps({"model": "jemm", "questions": {"q": {"type": "noul"}}}))
    assert s == 200, (s, b)
    n_bad = bad_input(t)
    print(f"jemm http: {n_ok} answers, {n_err} refusals as the oracle, {n_bad} bad inputs")


def bad_input(t):
    """Bad input per spec/jemm.md §8 in the one error shape of spec/wire.md: status, type, and a
    message that names the field before the reference's detail. Each is followed by a good request,
    which must still be answered."""
    png = jr.b64png(8, 8, url=False)
    noul = {"q": {"type": "noul"}}
    gif = base64.b64encode(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;").decode()
    tool = '{"name":"x","parameters":{"required":[["a"]]}}'
    cases = [
        ({"questions": {"q": {"type": None}}}, "questions.q: unsupported question type: None"),
        ({"questions": {"q": {"type": "generation"}}}, "questions.q: unsupported question type: 'generation'"),
        ({"questions": {"a": 1}}, "questions.a: question 'a' is not an object"),
        ({"state": "x"}, "questions: no questions"),
        ({"questions": {"q": {"criteria": {"a": "x"}}}},
         "questions.q.criteria: choice question needs a criteria map with at least two options"),
        ({"questions": {"q": {"criteria": {str(i): "x" for i in range(33)}}}},
         "questions.q.criteria: UNSUPPORTED: candidate count"),
        ({"questions": {"q": {"type": "score", "criteria": {"a": 1}}}},
         "questions.q.criteria: score question needs a list of at least two levels"),
        ({"questions": {"q": {"type": "score", "criteria": ["x"] * 33}}},
         "questions.q.criteria: UNSUPPORTED: candidate count"),
        ({"questions": {f"q{i}": {"type": "noul"} for i in range(65)}}, "questions: 65 questions; 1 to 64"),
        ({"questions": {"q": {"type": "noul", "instructions": "x " * 8192}}},
         "questions.q: UNSUPPORTED: input exceeds token budget"),
        ({"questions": {"q": {"criteria": {"t": {"description": tool, "action": {"tool_name": "x"}}, "u": "y"}}}},
         "questions.q.criteria: unhashable type: 'list'"),
        ({"images": ["data:image/png;base64," + png] * 5, "questions": noul},
         "images: images must be a list of at most 4 base64 strings"),
        ({"images": "x", "questions": noul}, "images: images must be a list of at most 4 base64 strings"),
        ({"images": [3], "questions": noul}, "images[0]: image 0 is not a base64 string"),
        ({"images": [png, "data:image/png," + png], "questions": noul}, "images[1]: image 1 is not a base64 data URL"),
        ({"images": ["data:image/png;base64,@@@"], "questions": noul}, "images[0]: image 0 could not be decoded"),
        ({"images": ["data:image/png;base64,\u00e9"], "questions": noul}, "images[0]: image 0 could not be decoded"),
        ({"images": ["data:image/gif;base64," + gif], "questions": noul}, "images[0]: image 0 is not PNG, JPEG or WebP"),
        ({"images": [jr.b64png(3073, 1024)], "questions": noul}, "images[0]: image 0 exceeds 3145728 pixels"),
        ({"images": [jr.b64png(1024, 1024)] * 3, "questions": noul},
         "questions.q: UNSUPPORTED: input exceeds token budget"),
        ({"images": [png], "questions": {"q": {"type": "noul", "instructions": "see <|image_pad|>"}}},
         "questions.q: unexpected image placeholders"),
        ({"images": ["bad"], "questions": {}}, "images[0]: image 0 could not be decoded"),  # images first (§8.3)
        ({"model": "other", "questions": noul}, "model: unknown model"),
    ]
    for body, want in cases:
        s, _, b = t.post(json.dumps(body))
        e = json.loads(b)
        assert s == 422 and list(e) == ["error"] and e["error"]["type"] == "invalid_request", (want, s, b)
        assert e["error"]["message"].startswith(want), (e["error"]["message"], want)
        s, _, b = t.post({"questions": noul})
        assert s == 200, ("good request after", want, s, b)
    s, _, b = t.post(json.dumps({"questions": noul}), headers={"Content-Type": "text/plain"})
    assert s == 415 and json.loads(b)["error"]["type"] == "unsupported_media_type", (s, b)
    return len(cases) + 1


if __name__ == "__main__":
    render = sys.argv.pop(3)
    trio.main(lambda t: test(t, render))
