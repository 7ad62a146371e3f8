#!/usr/bin/env python3
"""Service latency at concurrency 1 through the real trio (issue 18; spec/benchmark.md procedure):
starts s1-executor (--device cuda:0, or cpu for a dry run) + s1-preprocessor + s1-frontend from a
bin/ folder on one family's model directory, waits for /health, sends one excluded feasibility run
of every workload, then RUNS measured runs of REPS requests per workload from a closed-loop client
at concurrency 1 (Python's http.client, one connection per request; the route engineer's
`scripts/bench serve` was not there yet). Between measured runs it writes <label>_partial.json
(the summary so far: the token counts the peer sizes its prompts from) and calls --between (a
shell command: the peer's run), so that s1 and the peer alternate (s1, peer, peer, s1 with --runs 2
and a peer command of two rounds).

Per request it records the client wall time, the server-timing header (queue, preprocess, execute,
finish) and the executor's own split (queue, vision, prefix, rows, readout: S1_EXECUTOR_TIMINGS
lines of its log, matched by x-request-id). Reported: process-to-ready, first-request latency,
warm p50 / p95 (nearest rank) per workload and run, requests/s and decisions/s (questions) at c=1,
failures, peak GPU memory (nvidia-smi, sampled every 0.2 s, executor alone). A non-200 answer, or
one outside frontend/openapi.json (trio.check_answer, where its checker loads), is a failure and is
counted and printed; the run goes on.

Workloads (spec/benchmark.md; texts are seeded pseudo-words, the token counts are s1's usage):
  omnijev   one 1600x900 PNG with u1/u3/u6/u12 (questions of 3 options of ~8 words each), b12
            (the 12 mixed validation questions of omnijev_compile.cases), c32 and c255 (one Choice)
  open_jev  single-candidate noul requests of ~80..3400 tokens (n80 ... n3400), q4 and q8 (4 / 8
            mixed noul, choice of 3, score of 3 on a ~600-token state)
  jemm      text with 2 / 8 / 32 candidates, 1 image (1600x900) and 4 images (800x450) with 4
            candidates

usage: serve_latency.py --bin BIN --model DIR --family F --out DIR [--device cuda:0] [--runs 2]
         [--reps 10] [--between CMD] [--only w1,w2] [--label NAME]
Writes DIR/<label>_requests.jsonl (raw, one line per request) and DIR/<label>_summary.json.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))


try:  # the documented HTTP contract (frontend/openapi.json), as every test that talks HTTP
    from trio import check_answer
    CHECK_OFF = None
except Exception as e:  # noqa: BLE001
    check_answer, CHECK_OFF = None, f"{type(e).__name__}: {e}"


class AnswerCheck:
    """Every answer against frontend/openapi.json (trio.check_answer), after its time is taken; a
    violation counts as a failure. Where the checker cannot load (no jsonschema or no document:
    the GPU machine has no Debian packages) it says why once and the answers stay unchecked."""

    def __init__(self):
        self.off, self.n = CHECK_OFF, 0

    def __call__(self, status, headers, body, request):
        if self.off:
            return None
        try:
            check_answer("POST", "/v1/systemone", status, headers, body, request)
            self.n += 1
            return None
        except AssertionError as e:
            if "jsonschema is missing" in str(e):
                self.off = str(e)
                return None
            return str(e)[:400]


WORDS = ("state screen button window menu page form field value error warning dialog text image "
         "chart table list item order price account user account login payment refund invoice "
         "server network request response status report summary detail record entry update "
         "change version option setting profile message email address phone number date time "
         "city country street building room door light color shape size weight height level "
         "score result answer question problem issue task step action event signal").split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def png_1600x900(seed=7, w=1600, h=900):
    """A deterministic w x h RGB PNG (smooth bands plus a pseudo-random pattern), stdlib."""
    rng = random.Random(seed)
    noise = bytes(rng.randrange(0, 24) for _ in range(4096))
    rows = []
    for y in range(h):
        row = bytearray(1 + 3 * w)  # filter 0
        for x in range(w):
            n = noise[(x * 7 + y * 13) & 4095]
            row[1 + 3 * x] = (x * 255 // w + n) & 255
            row[2 + 3 * x] = (y * 255 // h + n) & 255
            row[3 + 3 * x] = ((x + y) * 3 + 2 * n) & 255
        rows.append(bytes(row))
    raw = zlib.compress(b"".join(rows), 6)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def data_url(png):
    import base64
    return "data:image/png;base64," + base64.b64encode(png).decode()


def workloads(family, url, small_url=None):
    """{name: (body dict, n_questions)} in a fixed order."""
    rng = random.Random(1234)
    W = {}
    if family == "omnijev":
        st = {"images": [url]}

        def q3(i):
            return {"type": "choice", "instructions": f"Question {i}: " + words(rng, 14),
                    "options": [{"text": words(rng, 8)} for _ in range(3)]}
        for q in (1, 3, 6, 12):
            W[f"u{q}"] = ({"state": st, "questions": {f"q{i}": q3(i) for i in range(q)}}, q)
        try:
            import omnijev_compile as oc
            bench = next(c[2] for c in oc.cases()[0] if c[0] == "bench_12")
            W["b12"] = ({"state": st, "questions": bench}, len(bench))
        except Exception:  # noqa: BLE001  (the oracle module is optional)
            pass
        for n in (32, 255):
            W[f"c{n}"] = ({"state": st, "questions": {"pick": {
                "type": "choice", "instructions": "Which one is shown? " + words(rng, 10),
                "options": [{"text": words(rng, 6)} for _ in range(n)]}}}, 1)
    elif family == "open_jev":
        for n in (80, 200, 400, 800, 1600, 2400, 3400):
            W[f"n{n}"] = ({"state": words(rng, max(1, int(n / 1.05) - 30)), "questions": {
                "q": {"type": "noul", "instructions": "Is the statement above true? " +
                      words(rng, 6)}}}, 1)
        for k in (4, 8):
            qs = {}
            for i in range(k):
                t = ("noul", "choice", "score")[i % 3]
                q = {"type": t, "instructions": f"Question {i}: " + words(rng, 12)}
                if t == "choice":
                    q["criteria"] = {words(rng, 1) + str(j): words(rng, 6) for j in range(3)}
                elif t == "score":
                    q["criteria"] = ["low", "medium", "high"]
                qs[f"q{i}"] = q
            W[f"q{k}"] = ({"state": words(rng, 560), "questions": qs}, k)
    elif family == "jemm":
        for n in (2, 8, 32):
            W[f"t{n}"] = ({"state": words(rng, 300), "questions": {"pick": {
                "instructions": "Which fits best? " + words(rng, 10),
                "criteria": {f"c{j:02d}": words(rng, 4) for j in range(n)}}}}, 1)
        for k in (1, 4):  # 4 images of 800x450: JEMM's budget is 3072 tokens with images
            W[f"i{k}"] = ({"state": words(rng, 60), "images": [url if k == 1 else small_url] * k,
                           "questions": {
                "pick": {"instructions": "Which fits best? " + words(rng, 10),
                         "criteria": {f"c{j:02d}": words(rng, 4) for j in range(4)}}}}, 1)
    return W


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Trio:
    def __init__(self, bindir, model, device, max_body):
        self.bindir, self.model, self.device = bindir, model, device
        self.tmp = tempfile.mkdtemp(prefix="s1lat-", dir="/tmp")
        self.port = free_port()
        self.fe = f"ipc://{self.tmp}/fe.sock"
        self.ex = f"ipc://{self.tmp}/ex.sock"
        self.procs, self.logs = {}, {}
        self.max_body = max_body

    def start(self, name, argv, env=None):
        path = os.path.join(self.tmp, name + ".log")
        log = open(path, "ab")
        self.logs[name] = path
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                            env=env)
        log.close()

    def up(self, timeout):
        b = lambda n: os.path.join(self.bindir, n)  # noqa: E731
        env = dict(os.environ, S1_EXECUTOR_TIMINGS="1")
        t0 = time.monotonic()
        self.start("ex", [b("s1-executor"), "--model", self.model, "--device", self.device,
                          "--listen", self.ex], env)
        self.start("fe", [b("s1-frontend"), "--listen", f"127.0.0.1:{self.port}", "--pool",
                          self.fe, "--queue", "64", "--timeout-ms", "120000", "--max-body",
                          str(self.max_body)])
        self.start("pp", [b("s1-preprocessor"), "--frontend", self.fe, "--executor", self.ex,
                          "--model", self.model, "--credits", "2", "--id", "pp"])
        end = t0 + timeout
        while time.monotonic() < end:
            if self.procs["ex"].poll() is not None:
                raise RuntimeError("s1-executor exited: " + self.tail("ex"))
            try:
                s, _, _ = self.http("GET", "/health", timeout=2)
                if s == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("not ready in %d s: %s" % (timeout, self.tail("ex")))

    def tail(self, name, n=3000):
        try:
            with open(self.logs[name], errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def http(self, method, path, body=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers={"Content-Type": "application/json"}
                      if body is not None else {})
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def exec_timings(self):
        """{request_id: {queue_us, vision_us, ...}} from the executor log (a program's request id
        is the client's x-request-id, then @worker#job)."""
        out = {}
        for m in re.finditer(r"timings request=([^@\s]+)\S* (.*)", self.tail("ex", 1 << 26)):
            out[m.group(1)] = {k: int(v) for k, v in (x.split("=") for x in m.group(2).split())}
        return out

    def stop(self):
        for name in ("fe", "pp", "ex"):
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


class GpuMem(threading.Thread):
    """Peak memory.used (MiB) of the GPU, sampled every 0.2 s while `on`."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.on, self.stop_ = 0, True, False
        self.ok = shutil.which("nvidia-smi") is not None

    def run(self):
        while self.ok and not self.stop_:
            if self.on:
                try:
                    v = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                        "--format=csv,noheader,nounits"], capture_output=True,
                                       text=True, timeout=5).stdout.split()
                    self.peak = max(self.peak, int(v[0]))
                except Exception:  # noqa: BLE001
                    pass
            time.sleep(0.2)


def nearest_rank(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, -(-len(xs) * p // 100) - 1))] if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--family", required=True, choices=["omnijev", "open_jev", "jemm"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--between", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--label", default="")
    ap.add_argument("--ready-timeout", type=float, default=300)
    a = ap.parse_args()
    label = a.label or a.family
    os.makedirs(a.out, exist_ok=True)
    url = data_url(png_1600x900())
    W = workloads(a.family, url, data_url(png_1600x900(w=800, h=450)) if a.family == "jemm" else None)
    if a.only:
        W = {k: v for k, v in W.items() if k in a.only.split(",")}
    bodies = {k: json.dumps(b) for k, (b, _) in W.items()}
    max_body = max(len(x) for x in bodies.values()) + (1 << 20)
    raw = open(os.path.join(a.out, f"{label}_requests.jsonl"), "w")
    mem = GpuMem()
    mem.start()
    check = AnswerCheck()
    t = Trio(a.bin, a.model, a.device, max(max_body, 8 << 20))
    summary = {"family": a.family, "model": a.model, "device": a.device, "runs": [],
               "client": "python http.client, one connection per request, concurrency 1"}
    fails = 0
    try:
        summary["process_to_ready_s"] = t.up(a.ready_timeout)
        print(f"{label}: ready after {summary['process_to_ready_s']:.1f} s", flush=True)

        def one(name, phase, run):
            t0 = time.perf_counter()
            s, h, b = t.http("POST", "/v1/systemone", bodies[name])
            ms = (time.perf_counter() - t0) * 1e3
            rec = {"workload": name, "phase": phase, "run": run, "status": s, "client_ms": ms,
                   "server_timing": h.get("server-timing"), "request_id": h.get("x-request-id")}
            bad = check(s, h, b, bodies[name])
            rec["ok"] = s == 200 and not bad  # an answer outside the contract is a failure
            if bad:
                rec["contract"] = bad
            if s == 200:
                ans = json.loads(b)
                rec["input_tokens"] = ans.get("usage", {}).get("input_tokens")
                rec["questions"] = len(ans.get("answers", {}))
            else:
                rec["error"] = b[:400].decode(errors="replace")
            raw.write(json.dumps(rec) + "\n")
            return rec
        first = None
        for name in W:  # the excluded feasibility run
            r = one(name, "feasibility", 0)
            first = first or r
            fails += not r["ok"]
            if not r["ok"]:
                print(f"  {name}: HTTP {r['status']} {r.get('error', '')[:200]} "
                      f"{r.get('contract', '')[:200]}", flush=True)
        summary["first_request_ms"] = first["client_ms"]
        summary["input_tokens"] = {}
        for run in range(1, a.runs + 1):
            if run > 1 and a.between:
                with open(os.path.join(a.out, f"{label}_partial.json"), "w") as f:
                    json.dump(summary, f, indent=1)  # what the peer reads (token counts)
                mem.on = False
                tb = time.monotonic()
                rc = subprocess.run(a.between, shell=True).returncode
                summary.setdefault("between", []).append({"rc": rc, "s": time.monotonic() - tb})
                mem.on = True
            res = {"run": run, "workloads": {}}
            tr = time.monotonic()
            for name, (_, nq) in W.items():
                recs = [one(name, "measured", run) for _ in range(a.reps)]
                ok = [r for r in recs if r["ok"]]
                fails += len(recs) - len(ok)
                lat = [r["client_ms"] for r in ok]
                if ok:
                    summary["input_tokens"][name] = ok[0].get("input_tokens")
                res["workloads"][name] = {
                    "n": len(recs), "failures": len(recs) - len(ok), "questions": nq,
                    "p50_ms": nearest_rank(lat, 50), "p95_ms": nearest_rank(lat, 95),
                    "min_ms": min(lat) if lat else None, "max_ms": max(lat) if lat else None,
                    "requests_per_s": 1e3 * len(lat) / sum(lat) if lat else None,
                    "decisions_per_s": 1e3 * nq * len(lat) / sum(lat) if lat else None,
                    "request_ids": [r["request_id"] for r in ok]}
                w = res["workloads"][name]
                print(f"  run {run} {name:>6}: p50 {w['p50_ms']:.2f} ms p95 {w['p95_ms']:.2f} ms "
                      f"({summary['input_tokens'].get(name)} tokens, {nq} questions, "
                      f"{w['failures']} failures)" if lat else f"  run {run} {name}: all failed",
                      flush=True)
            res["wall_s"] = time.monotonic() - tr
            summary["runs"].append(res)
        # where the time goes: medians of the server and executor splits of the measured requests
        ex = t.exec_timings()
        raw.flush()
        with open(os.path.join(a.out, f"{label}_requests.jsonl")) as f:
            recs = [json.loads(x) for x in f]
        split = {}
        for name in W:
            rs = [r for r in recs if r["workload"] == name and r["phase"] == "measured" and
                  r.get("ok", r["status"] == 200)]
            st = {}
            for r in rs:
                for part in (r.get("server_timing") or "").split(","):
                    if ";dur=" in part:
                        k, v = part.strip().split(";dur=")
                        st.setdefault(k + "_ms", []).append(float(v))
                for k, v in ex.get(r.get("request_id"), {}).items():
                    st.setdefault("executor_" + k.replace("_us", "_ms"), []).append(v / 1e3)
            split[name] = {k: nearest_rank(v, 50) for k, v in st.items()}
        summary["median_split_ms"] = split
    except Exception as e:  # noqa: BLE001
        summary["error"] = f"{type(e).__name__}: {e}"
        print(f"{label}: FAILED: {summary['error']}\n{t.tail('ex')}\n{t.tail('pp')}", flush=True)
        fails += 1
    finally:
        t.stop()
        mem.stop_ = True
        summary["peak_gpu_memory_mib"] = mem.peak if mem.ok else None
        summary["answers_checked"] = check.n
        summary["answer_check_off"] = check.off
        summary["failures"] = fails
        raw.close()
        for name in ("ex", "pp", "fe"):
            shutil.copy(t.logs[name], os.path.join(a.out, f"{label}_{name}.log")) \
                if name in t.logs else None
        with open(os.path.join(a.out, f"{label}_summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        shutil.rmtree(t.tmp, ignore_errors=True)
    print(f"{label}: failures {fails}; peak GPU memory {summary['peak_gpu_memory_mib']} MiB",
          flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
