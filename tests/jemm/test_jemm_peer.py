"""The JEMM speed peer (tests/cuda/jemm_peer.py, the reference procedure with transformers + PEFT,
adapter unmerged) computes what s1 computes: its float32 CPU answers on a tiny model
(tests/fixtures/jemm/peer/peer.json, written by tests/oracle/jemm_peer_fixture.py) against s1's.
Rebuilds the fixture's directory with s1-mkmodel --s1-out --family jemm (the adapter kept; a
SHA-256 mismatch fails as checkpoint drift), serves it with the real trio on the float32 CPU
executor (the directory's default numerics) and posts the fixture's requests (text only, 1, 2 and
4 real images; 2 to 32 candidates; choice, score and noul). Every answer must have the input tokens
of the peer and its probabilities, confidence, noul and expected value within 5e-5 of the softmax
of the peer's float32 label logits (issue 15's float32 bound, as jemm_e2e_http), its exact ties and
its decisions (a different decision only at a float32 near-tie). So the issue-18 peer reads the
same directory, the same adapter and the same inputs as s1 before its times are compared.
Stdlib only.

usage: test_jemm_peer.py BUILD_ROOT SHARED_DIR FIXTURE_FILE IMAGE_DIR
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import trio  # noqa: E402
import test_jemm_e2e as e2e  # noqa: E402


def main():
    build, shared, fix_path, image_dir = sys.argv[1:5]
    with open(fix_path, encoding="utf-8") as f:
        fix = json.load(f)
    tokdir = os.path.join(shared, "tokenizers", "qwen3")
    work = os.path.join(build, "tests", "jemm", "peer-work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "jemm")
    trio.run([os.path.join(build, "tools/mkmodel/s1-mkmodel"), *fix["mkmodel_args"],
              "--tokenizer", os.path.join(tokdir, "tokenizer.json"), "--tokenizer-config",
              os.path.join(tokdir, "tokenizer_config.json"), "--s1-out", model])
    for name, want in fix["sha256"].items():
        got = e2e.sha256(os.path.join(model, name))
        assert got == want, "checkpoint drift: %s is %s, the peer used %s" % (name, got, want)
    with open(os.path.join(model, "s1-model.json")) as f:
        jm = json.load(f)["jemm"]
    t = trio.Trio(build, shared)
    ok = False
    stats = {"questions": 0, "near_ties": 0, "ties": 0, "worst": 0.0}
    try:
        t.model = model
        t.start("ex", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                       "--listen", t.ex_url])
        t.start_frontend(max_body=8 << 20)
        t.start_preprocessor()
        t.wait_health(200)
        for rec in fix["requests"]:
            body = json.loads(rec["body"])
            s, h, b = t.post(json.dumps(e2e.with_images(body, image_dir)), timeout=300)
            assert s == 200, (rec["name"], s, b[:400])
            assert h.get("x-numerics") == "fp32", (rec["name"], h.get("x-numerics"))
            a = json.loads(b)
            assert list(a["answers"]) == list(body["questions"]), (rec["name"], a)
            assert a["usage"]["input_tokens"] == rec["input_tokens"], (
                rec["name"], a["usage"], "peer", rec["input_tokens"])
            temperature = jm["mm_temperature"] if body.get("images") else jm["temperature"]
            for (qid, q), raw in zip(body["questions"].items(), rec["raw_fp32"]):
                got, want = a["answers"][qid], rec["answers_fp32"][qid]
                assert list(got) == list(want) and \
                    list(got["probabilities"]) == list(want["probabilities"]), (got, want)
                e2e.check_question(rec["name"], qid, q, got, raw, temperature, stats)
        ok = True
    finally:
        t.stop(failed=not ok)
    shutil.rmtree(work, ignore_errors=True)
    print("s1 (CPU, float32) against the JEMM peer (%s): %d questions in %d requests, "
          "probabilities within %.3g (tolerance %g), %d exact ties kept, %d decisions at a float32 "
          "near-tie" % (", ".join("%s %s" % (k, fix["env"][k]) for k in ("torch", "transformers",
                                                                        "peft")),
                        stats["questions"], len(fix["requests"]), stats["worst"], e2e.TOL,
                        stats["ties"], stats["near_ties"]))
    print("PASS")


if __name__ == "__main__":
    main()
