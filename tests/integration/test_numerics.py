"""The two numerics modes on the real trio (tiny random Open-Jev model of tests/fixtures/open_jev/e2e):
every answer states the mode that computed it (x-numerics and a Server-Timing entry), /v1/models
names the mode served, and the mode is the model directory's default unless the executor is told
otherwise.

  1. a directory exported by default (manifest "numerics": "fp32"), executor without --numerics:
     x-numerics fp32, "numerics;desc=fp32" in Server-Timing, /v1/models numerics fp32, the answers
     those of the float32 reference (fixture answers_fp32, within 1e-5); a 422 answer has no
     x-numerics (no executor computed it);
  2. the same directory, executor --numerics bf16: x-numerics bf16, /v1/models bf16, the answers
     moved off the float32 ones (bf16 rounding inside) but within 0.05 of them;
  3. a directory exported with --numerics bf16, executor without --numerics: bf16 by default;
  4. refusals at start: --numerics fp16 (exit 2, the option named); --device cuda:0 --numerics
     fp32 (the CUDA engine serves bf16 only: the executor retires with that message).
Stdlib only."""
import json
import os
import subprocess
import time

import trio

TOL_FP32 = 1e-5     # the float32 answers against the fixture (as trio_e2e)
BF16_MAX = 0.05     # |bf16 answer - fp32 answer| (bf16 keeps 8 bits; the tiny model's spread)


def numbers(a, path=""):
    if isinstance(a, dict):
        out = {}
        for k, v in a.items():
            out.update(numbers(v, path + "." + k))
        return out
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return {path: float(a)}
    return {}


def models(t):
    s, _, b = t.http("GET", "/v1/models")
    assert s == 200, (s, b)
    return json.loads(b)


def wait_models_numerics(t, want, timeout=30):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = models(t)
        ms = last.get("models") or last.get("data") or []
        if ms and all(m.get("numerics") == want for m in ms):
            return last
        time.sleep(0.2)
    raise AssertionError("/v1/models never said numerics %s: %s" % (want, last))


def ask(t, fx, want_numerics):
    """Every fixture request; returns {request: answers}. Checks the headers."""
    out = {}
    for r in fx["requests"]:
        s, h, b = t.post(r["body"].encode())
        assert s == 200, (r["name"], s, b[:300])
        assert h.get("x-numerics") == want_numerics, (r["name"], h)
        assert ("numerics;desc=%s" % want_numerics) in h.get("server-timing", ""), h
        out[r["name"]] = json.loads(b)["answers"]
    return out


def restart_executor(t, model, extra):
    """A new executor on the same URL; returns once the preprocessor sends it a request. Another
    model directory gets a preprocessor that loads it too: programs go only to executors whose
    directory digest is one the preprocessor loads (recipe/serving.md)."""
    t.kill("ex")
    t.procs["ex"].wait()
    t.wait_health(503)
    if model != t.model:
        t.kill("pp")
        t.model = model
        t.start_preprocessor(credits=2)
    argv = [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
            "--listen", t.ex_url] + extra
    t.start("ex", argv)
    t.wait_health(200)
    end = time.time() + 60
    while time.time() < end:
        s, _, b = t.post(trio.MINI)
        if s == 200:
            return
        time.sleep(0.2)
    raise AssertionError("the restarted executor never answered: %s %s" % (s, b[:200]))


def test(t):
    with open(os.path.join(trio.FIXTURES, "e2e.json")) as f:
        fx = json.load(f)
    t.make_model()
    with open(os.path.join(t.model, "s1-model.json")) as f:
        assert json.load(f)["numerics"] == "fp32", "s1-export's default is not fp32"
    t.start_all(credits=2)
    wait_models_numerics(t, "fp32")
    fp32 = ask(t, fx, "fp32")
    worst = 0.0
    for r in fx["requests"]:
        got, want = numbers(fp32[r["name"]]), numbers(r["answers_fp32"])
        assert got.keys() == want.keys(), r["name"]
        worst = max([worst] + [abs(got[k] - want[k]) for k in want])
    assert worst <= TOL_FP32, "fp32 answers %.3g from the float32 reference" % worst
    s, h, b = t.post({"questions": {}})
    assert s == 422 and "x-numerics" not in h, (s, h, b)
    print("fp32: %d requests, x-numerics fp32, largest difference to the reference %.3g"
          % (len(fx["requests"]), worst))

    restart_executor(t, t.model, ["--numerics", "bf16"])
    wait_models_numerics(t, "bf16")
    bf16 = ask(t, fx, "bf16")
    moved = 0.0
    for r in fx["requests"]:
        a, b_ = numbers(fp32[r["name"]]), numbers(bf16[r["name"]])
        moved = max([moved] + [abs(a[k] - b_[k]) for k in a])
    assert 0.0 < moved <= BF16_MAX, "bf16 answers moved by %.3g from the fp32 ones" % moved
    print("bf16 (--numerics bf16): x-numerics bf16, answers moved by up to %.3g from fp32" % moved)

    bdir = os.path.join(t.tmp, "model-bf16")
    trio.run([t.bin("tools/export/s1-export"), "--family", "open_jev", "--package",
              os.path.join(trio.FIXTURES, "package"), "--base", os.path.join(t.tmp, "model-hf"),
              "--numerics", "bf16", "--out", bdir])
    with open(os.path.join(bdir, "s1-model.json")) as f:
        assert json.load(f)["numerics"] == "bf16"
    restart_executor(t, bdir, [])
    wait_models_numerics(t, "bf16")
    dflt = ask(t, fx, "bf16")
    assert dflt == bf16, "the bf16 directory's default answers differ from --numerics bf16"
    print("a directory exported with --numerics bf16 serves bf16 by default (same answers)")

    r = subprocess.run([t.bin("executor/server/s1-executor"), "--model", t.model, "--numerics",
                        "fp16", "--listen", "ipc://%s/x.sock" % t.tmp], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--numerics" in r.stderr, (r.returncode, r.stderr)
    p = subprocess.Popen([t.bin("executor/server/s1-executor"), "--model", t.model, "--device",
                          "cuda:0", "--numerics", "fp32", "--listen", "ipc://%s/y.sock" % t.tmp],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    assert "bf16 numerics only" in out, out[-2000:]
    print("refused: --numerics fp16; --device cuda:0 --numerics fp32")


if __name__ == "__main__":
    trio.main(test)
