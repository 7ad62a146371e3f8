"""The real trio for the integration tests: the tiny random-weight Open-Jev model directory of the
GPU oracle (s1-mkmodel --seed 4242 + the committed upstream package in
tests/fixtures/open_jev/e2e/package, exported by s1-export --family open_jev), then s1-executor, s1-preprocessor and s1-frontend started as
separate processes (fork + exec) talking over ipc:// in a temporary directory, and HTTP helpers.
Every answer the helpers receive is checked against the OpenAPI document (openapi_check.py, with
Debian's python3-jsonschema); code that reads answers off its own socket calls check_answer().
Every test calls Trio.stop() (also on failure) and prints the process logs then."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import openapi_check

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "open_jev", "e2e")
MODEL_ID = "s1serve/open-jev-tiny-random"


class Trio:
    def __init__(self, build_root, shared_dir):
        self.build = build_root
        self.shared = shared_dir
        self.tmp = tempfile.mkdtemp(prefix="s1t-", dir="/tmp")
        self.procs = {}
        self.logs = {}
        self.port = free_port()
        self.fe_url = "ipc://%s/fe.sock" % self.tmp
        self.ex_url = "ipc://%s/ex.sock" % self.tmp
        self.model = None

    def bin(self, rel):
        return os.path.join(self.build, rel)

    def make_model(self, name="model", seed=4242):
        """s1-mkmodel tiny (real Qwen3 tokenizer) + the upstream package -> s1-export."""
        hf = os.path.join(self.tmp, name + "-hf")
        out = os.path.join(self.tmp, name)
        tokdir = os.path.join(self.shared, "tokenizers", "qwen3")
        run([self.bin("tools/mkmodel/s1-mkmodel"), "--shape", "tiny", "--seed", str(seed),
             "--tokenizer", os.path.join(tokdir, "tokenizer.json"), "--out", hf])
        shutil.copy(os.path.join(tokdir, "tokenizer_config.json"), hf)
        run([self.bin("tools/export/s1-export"), "--family", "open_jev", "--package",
             os.path.join(FIXTURES, "package"), "--base", hf, "--out", out])
        if self.model is None:
            self.model = out
        return out

    def make_demo_model(self, family, name=None):
        """A small random model directory of a family by its recipe/FAMILY/make-demo-model (OmniJev
        with the derived Qwen3.5 tokenizer of this build folder, made here when missing)."""
        out = os.path.join(self.tmp, name or family)
        maker = os.path.join(HERE, "..", "..", "recipe", family, "make-demo-model")
        if family == "omnijev":
            tok = os.path.join(self.build, "tests", "omnijev", "qwen35_tokenizer.json")
            run(["sh", os.path.join(HERE, "..", "oracle", "qwen35_tokenizer.sh"), tok])
            run([maker, tok, out, "--build", self.build])
        else:
            run([maker, out, "--build", self.build])
        return out

    def start_ex(self, name, model, url, record=None):
        """One more executor: `model` on `url` (ipc:// or tcp://)."""
        argv = [self.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                "--listen", url]
        if record:
            argv += ["--record", record]
        return self.start(name, argv)

    def start_pp(self, name, executors, models, credits=2, prefix=()):
        """A preprocessor dialling every URL of `executors`, loading every dir of `models`;
        `prefix` is put before the command (e.g. ip netns exec NS)."""
        argv = list(prefix) + [self.bin("preprocessor/s1-preprocessor"), "--frontend", self.fe_url,
                               "--credits", str(credits), "--id", name]
        for u in executors:
            argv += ["--executor", u]
        for m in models:
            argv += ["--model", m]
        return self.start(name, argv)

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "ab")
        self.logs[name] = log.name
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        return self.procs[name]

    def start_executor(self, name="ex", record=None, model=None):
        argv = [self.bin("executor/server/s1-executor"), "--model", model or self.model,
                "--device", "cpu", "--listen", self.ex_url]
        if record:
            argv += ["--record", record]
        return self.start(name, argv)

    def start_frontend(self, queue=64, timeout_ms=60000, max_body=None):
        """max_body: the --max-body cap; None leaves each model's own limit (its directory's
        limits.max_body_bytes) in force."""
        return self.start("fe", [self.bin("frontend/s1-frontend"), "--listen",
                                 "127.0.0.1:%d" % self.port, "--pool", self.fe_url, "--queue",
                                 str(queue), "--timeout-ms", str(timeout_ms)] +
                          (["--max-body", str(max_body)] if max_body else []))

    def start_preprocessor(self, name="pp", credits=2):
        return self.start(name, [self.bin("preprocessor/s1-preprocessor"), "--frontend",
                                 self.fe_url, "--executor", self.ex_url, "--model", self.model,
                                 "--credits", str(credits), "--id", name])

    def start_all(self, credits=2, queue=64, record=None, timeout_ms=60000):
        self.start_executor(record=record)
        self.start_frontend(queue=queue, timeout_ms=timeout_ms)
        self.client_timeout = timeout_ms / 1000 + 30
        self.start_preprocessor(credits=credits)
        self.wait_health(200)

    def wait_health(self, status, timeout=120, want=None):
        end = time.time() + timeout
        last = None
        while time.time() < end:
            try:
                s, _, b = self.http("GET", "/health", timeout=5)
                last = (s, b)
                if s == status and (want is None or json.loads(b).get("status") == want):
                    return json.loads(b)
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("health never became %s %s (last %r)" % (status, want, last))

    def wait_metric(self, line, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            s, _, m = self.http("GET", "/metrics", timeout=5)
            if s == 200 and line in m.decode().splitlines():
                return
            time.sleep(0.1)
        raise AssertionError("metric line %r never appeared" % line)

    def http(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            h = dict(headers or {})
            if isinstance(body, str):
                body = body.encode()
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            headers = {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()
        check_answer(method, path, r.status, headers, data, body)
        return r.status, headers, data

    def post(self, body, headers=None, timeout=None):
        timeout = timeout or max(120, getattr(self, "client_timeout", 0))
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        return self.http("POST", "/v1/systemone", body, h, timeout)

    def metric(self, name):
        """The value of one /metrics line (e.g. 's1_requests_total{status="200"}'), 0 if absent."""
        s, _, m = self.http("GET", "/metrics", timeout=10)
        assert s == 200, s
        for line in m.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs.get(name)
        if p and p.poll() is None:
            p.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return p.returncode if p else None

    def stop(self, failed=False):
        for name in ["fe"] + [n for n in self.procs if n.startswith("pp")] + ["ex"]:
            self.kill(name, signal.SIGTERM)
        for name, p in self.procs.items():
            if p.poll() is None:
                p.kill()
                p.wait()
        try:
            print(openapi_check.contract().summary())
        except AssertionError as e:  # no checker (only the GPU machine's scripts get this far)
            print("openapi: answers not checked: %s" % e)
        if failed:
            for name, path in self.logs.items():
                with open(path, errors="replace") as f:
                    sys.stderr.write("---- %s log ----\n%s\n" % (name, f.read()[-6000:]))
        shutil.rmtree(self.tmp, ignore_errors=True)


TIMING_KEYS = rb"latency_s|latency_total_s|latency_ms|inference_seconds"


def norm_timing(body):
    """The answer bytes with the values of the timing fields (OmniJev latency_s / latency_total_s,
    Open-Jev metadata.inference_seconds) set to 0: every other byte must repeat exactly."""
    return re.sub(rb'("(?:' + TIMING_KEYS + rb')": )[-0-9.eE+]+', rb"\g<1>0", body)


def check_answer(method, path, status, headers, body, request_body=None):
    """Checks one answer against frontend/openapi.json (openapi_check.Contract.check): the status
    documented for the route, the documented headers, the content type and the body's schema; for
    a 200 of POST /v1/systemone also the request against its family's request schema."""
    return openapi_check.check(method, path, status, headers, body, request_body)


def send_and_leave(port, data, keep=False):
    """A client that goes away: sends the raw request bytes on a new connection and never reads
    the answer; closes the connection at once, or (keep) returns the socket for the caller to
    close later. Nothing is read, so there is no answer to check."""
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(data)
    if keep:
        return c
    c.close()
    return None


def run(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise AssertionError("%s failed: %s" % (argv[0], r.stdout.decode(errors="replace")))
    return r.stdout.decode(errors="replace")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


VALID = {
    "state": {"weather": "sunny", "time": "noon", "notes": ["clear sky", "warm"]},
    "questions": {
        "color": {"type": "choice", "instructions": "What color is the sky?",
                  "criteria": {"blue": "The sky is blue.", "green": "The sky is green."}},
        "warmth": {"type": "score", "instructions": "How warm is it?",
                   "criteria": ["cold", "mild", "hot"]},
        "day": {"type": "noul", "instructions": "Is it daytime?"},
    },
}


MINI = {"state": "short", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}


def loaded_models(t, max_names=16, max_bytes=1024):
    """What an unknown-model error lists, from /v1/models: each model's id, then its aliases,
    '"A" (aliases "a1", "a2"), "B"'; at most max_names names and max_bytes bytes, then "…"."""
    s, _, b = t.http("GET", "/v1/models")
    assert s == 200, (s, b)
    out, names = "", 0
    for i, m in enumerate(json.loads(b)["models"]):
        for k, name in enumerate([m["id"]] + m["aliases"]):
            lead = (", " if i else "") if k == 0 else " (aliases " if k == 1 else ", "
            piece = lead + '"%s"' % name + (")" if k and k == len(m["aliases"]) else "")
            if names == max_names or len((out + piece).encode()) > max_bytes:
                return out + (", " if out else "") + "…" + (")" if k else "")
            out, names = out + piece, names + 1
    return out


def check_mini_answer(status, headers, body):
    """The one-sequence request's answer: 200, one noul probability, the wire.md headers."""
    assert status == 200, (status, body[:500])
    a = json.loads(body)
    assert a["model"] == MODEL_ID and list(a["answers"]) == ["q"], a
    assert 0.0 <= a["answers"]["q"]["noul"] <= 1.0 and a["metadata"]["candidate_sequences"] == 1
    assert headers.get("x-request-id") and headers.get("x-model-revision")
    return a


def check_valid_answer(status, headers, body):
    """A correct request's answer: 200, the Open-Jev shape, probabilities summing to one."""
    assert status == 200, (status, body[:500])
    a = json.loads(body)
    assert list(a.keys()) == ["answers", "model", "usage", "metadata"], a.keys()
    assert a["model"] == MODEL_ID
    ans = a["answers"]
    assert list(ans.keys()) == ["color", "warmth", "day"], ans.keys()
    p = ans["color"]["probabilities"]
    assert abs(sum(p.values()) - 1.0) < 1e-9, p
    assert ans["color"]["choice"] == max(p, key=lambda k: p[k])
    assert 0.0 <= ans["day"]["noul"] <= 1.0
    assert a["usage"]["input_tokens"] > 0 and a["metadata"]["candidate_sequences"] == 6
    assert headers.get("x-request-id") and headers.get("x-model-revision")
    assert headers.get("server-timing", "").startswith("queue;dur=")
    return a


def main(test_fn):
    build_root, shared = sys.argv[1], sys.argv[2]
    t = Trio(build_root, shared)
    ok = False
    try:
        test_fn(t)
        ok = True
    finally:
        t.stop(failed=not ok)
    print("PASS")
