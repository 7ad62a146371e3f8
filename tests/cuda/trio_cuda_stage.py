"""Stages the trio-on-CUDA test (tests/cuda/trio_cuda_check.py) on the build machine: builds each
family's tiny e2e model directory with the check's recipes (Open-Jev, OmniJev, JEMM with its
adapter kept), serves the family's e2e requests (images inlined) with the real trio on
`s1-executor --device cpu --numerics bf16` (the CPU model with the bf16 reference's rounding
points: the CPU answer the bf16 CUDA engine is held to) and records the answers, the requests and
the SHA-256 of the exported files (the GPU machine rebuilds the directories: they are too large to
carry). Also writes the tokenizers the recipes need, xz-compressed. Stdlib only.

usage: trio_cuda_stage.py BUILD_ROOT SHARED_DIR QWEN35_TOKENIZER_JSON OUT_DIR
  QWEN35_TOKENIZER_JSON: the file tests/oracle/tokenizer_qwen35.py writes (the omnijev tests'
  build/tests/omnijev/qwen35_tokenizer.json).
Writes OUT_DIR/cases.json ([{"family", "model_sha256", "max_body", "requests": [{"name", "body"}],
"cpu": [{"status", "answer"}]}]), OUT_DIR/qwen3/tokenizer.json.xz + tokenizer_config.json and
OUT_DIR/qwen35_tokenizer.json.xz (about 6 MB in all).
"""
import json
import lzma
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "omnijev"))
sys.path.insert(0, os.path.join(ROOT, "tests", "jemm"))
import trio  # noqa: E402
import trio_cuda_check as check  # noqa: E402
import test_omnijev_e2e as omni  # noqa: E402
import test_jemm_e2e as jemm  # noqa: E402

TOOLS = {"s1-mkmodel": "tools/mkmodel/s1-mkmodel", "s1-export": "tools/export/s1-export"}


def requests(family):
    """[{"name", "body"}] of the family's e2e fixture, images inlined; and the body limit."""
    if family == "open_jev":
        with open(os.path.join(trio.FIXTURES, "e2e.json")) as f:
            fx = json.load(f)
        return [{"name": r["name"], "body": r["body"]} for r in fx["requests"]], 4 << 20
    if family == "omnijev":
        fix, url = omni.fixture()
        return [{"name": r["name"], "body": json.dumps(omni.body_of(r, url))}
                for r in fix["requests"]], 4 << 20
    with open(os.path.join(ROOT, "tests", "fixtures", "jemm", "e2e", "e2e.json"),
              encoding="utf-8") as f:
        fix = json.load(f)
    image_dir = os.path.join(ROOT, "tests", "fixtures", "image", "sources")
    return [{"name": r["name"],
             "body": json.dumps(jemm.with_images(json.loads(r["body"]), image_dir))}
            for r in fix["requests"]], 8 << 20


def serve_cpu(build, shared, model, reqs, max_body):
    t = trio.Trio(build, shared)
    t.model = model
    ok = False
    out = []
    try:
        t.start("ex", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                       "--numerics", "bf16", "--listen", t.ex_url])
        t.start_frontend(max_body=max_body, timeout_ms=400000)  # 255 rows under ASan
        t.start_preprocessor()
        t.wait_health(200, timeout=300)
        for r in reqs:
            s, _, b = t.post(r["body"], timeout=600)
            assert s == 200, (r["name"], s, b[:300])
            out.append({"status": s, "answer": json.loads(b)})
        ok = True
    finally:
        t.stop(failed=not ok)
    return out


def xz(src, dst):
    with open(src, "rb") as f, lzma.open(dst, "wb", preset=6) as g:
        shutil.copyfileobj(f, g)


def main():
    build, shared, tok35, out = sys.argv[1:5]
    build, shared, tok35 = (os.path.abspath(p) for p in (build, shared, tok35))
    tokdir = os.path.join(shared, "tokenizers", "qwen3")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "qwen3"))
    work = tempfile.mkdtemp(prefix="s1-stage-", dir="/tmp")
    cases = []
    try:
        for fam in check.FAMILIES:
            model = check.build_model(fam, lambda n: os.path.join(build, TOOLS[n]), tokdir, tok35,
                                      work)
            reqs, max_body = requests(fam)
            cpu = serve_cpu(build, shared, model, reqs, max_body)
            cases.append({"family": fam, "model_sha256": check.model_hashes(model),
                          "max_body": max_body, "requests": reqs, "cpu": cpu})
            shutil.rmtree(model)
            print("%s: %d requests answered on the CPU" % (fam, len(reqs)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f)
    xz(os.path.join(tokdir, "tokenizer.json"), os.path.join(out, "qwen3", "tokenizer.json.xz"))
    shutil.copy(os.path.join(tokdir, "tokenizer_config.json"), os.path.join(out, "qwen3"))
    xz(tok35, os.path.join(out, "qwen35_tokenizer.json.xz"))
    print("staged in %s" % out)


if __name__ == "__main__":
    main()
