"""A bounded soak of two real trios, Open-Jev and JEMM (issue 16): 8 clients send a seeded mix of
valid requests and invalid ones (bad JSON, wrong type, refused fields, smuggling framing, an
oversize body, the attack's vision-marker and integer inputs) for about 75 s while, at seeded
random moments, processes are killed (-9) and restarted and others get SIGTERM (a drain) and are
restarted: Open-Jev's preprocessor and executor are killed, its preprocessor drained; JEMM's
frontend, preprocessor and executor are killed, its frontend and preprocessor drained. Open-Jev's
frontend lives through it all.

Assertions: every 200 is byte-identical (timing values aside) to the same request's answer
alone, computed before; every other answer is a documented error in the wire.md shape (a valid
request may only meet 500/503/504 then); a connection error happens only while that trio's
frontend is down; no request hangs (client timeout 40 s, deadline 10 s); afterwards every
baseline request is answered identically again, and the open fds and RSS of every process are
bounded (the long-lived frontend's within 16 fds and 64 MiB of its start).
S1_SOAK_SEED picks the schedule (default 16); S1_SOAK_SECONDS the chaos length (default 75)."""
import glob
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import trio

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMING = re.compile(rb'("(?:inference_seconds|latency_ms|latency_s)": ?)[-0-9.eE+]+')
DOC_TYPES = {400: {"invalid_json", "bad_request"}, 413: {"too_large"},
             415: {"unsupported_media_type"}, 422: {"invalid_request"},
             500: {"internal"}, 503: {"unavailable", "not_ready", "overloaded"},
             504: {"timeout"}}
CHAOS_STATUS = {500, 503, 504}


def norm(body):
    return TIMING.sub(rb"\g<1>0", body)


def proc_stat(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return {"rss_kb": rss, "fds": len(os.listdir("/proc/%d/fd" % pid))}


class Family:
    def __init__(self, name, t, valid, invalid):
        self.name, self.t = name, t
        self.valid = valid        # [(name, body bytes)]
        self.invalid = invalid    # [(name, kind, payload, status, types)]
        self.baseline = {}        # name -> normalized 200 body
        self.fe_down = []         # [(t0, t1)] frontend not serving
        self.lock = threading.Lock()

    def http(self, method, path, body=b"", headers=None, timeout=40):
        c = http.client.HTTPConnection("127.0.0.1", self.t.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def raw(self, data, timeout=40):
        s = socket.create_connection(("127.0.0.1", self.t.port), timeout=timeout)
        try:
            s.sendall(data)
            out = b""
            while True:
                more = s.recv(65536)
                if not more:
                    break
                out += more
        except ConnectionResetError:
            pass
        finally:
            s.close()
        head, _, body = out.partition(b"\r\n\r\n")
        if not head:
            raise ConnectionResetError("no answer")
        lines = head.decode().split("\r\n")
        headers = dict((k.lower(), v) for k, v in (x.split(": ", 1) for x in lines[1:]))
        return int(lines[0].split(" ")[1]), headers, body


def open_jev(t):
    ex = sorted(glob.glob(os.path.join(ROOT, "recipe", "open_jev", "examples", "*.json")))
    valid = [(os.path.basename(p), open(p, "rb").read()) for p in ex]
    valid.append(("mini", json.dumps(trio.MINI).encode()))
    atk = os.path.join(t.shared, "findings", "2026-12-01-attack")
    valid.append(("int64_min_u64_max", open(os.path.join(atk, "open_jev_int64_min_u64_max.json"),
                                              "rb").read()))
    bad_q = json.dumps({"state": "s", "questions": {"q": {"type": "rank", "instructions": "x"}}})
    return valid, [
        ("not json", "post", b"{", 400, {"invalid_json"}),
        ("duplicate key", "post", b'{"state":"a","state":"b","questions":{}}', 400, {"invalid_json"}),
        ("unknown type", "post", bad_q.encode(), 422, {"invalid_request"}),
        ("wider integer", "post", b'{"state":[18446744073709551616],"questions":{"q":{"type":"noul",'
         b'"instructions":"x"}}}', 422, {"invalid_request"}),
        ("text/plain", "plain", json.dumps(trio.MINI).encode(), 415, {"unsupported_media_type"}),
    ]


def jemm(t):
    ex = sorted(glob.glob(os.path.join(ROOT, "recipe", "jemm", "examples", "*.json")))
    valid = [(os.path.basename(p), open(p, "rb").read()) for p in ex]
    atk = os.path.join(t.shared, "findings", "2026-12-01-attack")
    valid.append(("int64_min", open(os.path.join(atk, "jemm_int64_min.json"), "rb").read()))
    return valid, [
        ("vision marker", "post", open(os.path.join(atk, "jemm_vision_start_text_with_image_"
                                                    "accepted.json"), "rb").read(), 422,
         {"invalid_request"}),
        ("no questions", "post", b'{"state":"s"}', 422, {"invalid_request"}),
        ("NaN", "post", b'{"state":NaN,"questions":{"q":{"type":"noul"}}}', 400, {"invalid_json"}),
    ]


FRAMING = [
    ("smuggling", "raw", b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
     b"\r\nContent-Length: 2\r\nContent-Length: 36\r\n\r\n{}GET /metrics HTTP/1.1\r\nHost: x\r\n"
     b"\r\n", 400, {"bad_request"}),
    ("malformed chunk", "raw", b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: "
     b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r0\r\n\r\n", 400, {"bad_request"}),
    ("oversize", "raw", b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
     b"\r\nContent-Length: 999999999\r\n\r\n", 413, {"too_large"}),
]


def start_jemm(t):
    model = os.path.join(t.tmp, "jemm")
    subprocess.run([os.path.join(ROOT, "recipe", "jemm", "make-demo-model"), model, "--build",
                    t.build], check=True, capture_output=True,
                   env=dict(os.environ, S1_SHARED=t.shared))
    t.model = model
    start_jemm_executor(t)
    t.start_frontend(timeout_ms=10000)
    t.start_preprocessor(credits=2)


def start_jemm_executor(t):
    t.start("ex", [t.bin("executor/server/s1-executor"), "--model", t.model, "--device", "cpu",
                   "--listen", t.ex_url, "--bf16-rounding"])


def client(k, fams, end, seed, results):
    rng = random.Random(seed * 1000 + k)
    fam = fams[k % 2]
    while time.time() < end:
        r = rng.random()
        if r < 0.6:
            name, body = rng.choice(fam.valid)
            item = (name, "post", body, 200, None)
        elif r < 0.85:
            item = rng.choice(fam.invalid)
        else:
            item = rng.choice(FRAMING)
        name, kind, payload, status, types = item
        t0 = time.time()
        try:
            if kind == "raw":
                s, h, b = fam.raw(payload)
            else:
                ctype = "text/plain" if kind == "plain" else "application/json"
                s, h, b = fam.http("POST", "/v1/systemone", payload, {"Content-Type": ctype})
            out = (s, h, b)
        except socket.timeout:
            out = ("hang", {}, b"")
        except OSError as e:
            out = ("conn", {}, str(e).encode())
        results.append((fam.name, name, status, types, t0, time.time(), out,
                        None if kind == "raw" else payload))
        time.sleep(rng.random() * 0.05)


def check(fams, results):
    by = {f.name: f for f in fams}
    fails, counts = [], {}
    for fname, name, want, types, t0, t1, (s, h, b), request in results:
        fam = by[fname]
        counts[s] = counts.get(s, 0) + 1
        where = "%s %s (%.1f-%.1f s)" % (fname, name, t0, t1)
        if isinstance(s, int):
            try:  # every answer as frontend/openapi.json documents it
                trio.check_answer("POST", "/v1/systemone", s, h, b, request)
            except AssertionError as e:
                fails.append("%s: %s" % (where, e))
        if s == "hang":
            fails.append("%s: no answer within 40 s" % where)
            continue
        if s == "conn":
            down = any(a - 1 <= t1 and t0 <= z + 1 for a, z in fam.fe_down)
            if not down:
                fails.append("%s: connection error while the frontend was up: %s" % (where, b))
            continue
        if want == 200 and s == 200:
            if norm(b) != fam.baseline[name]:
                fails.append("%s: 200 differs from the answer alone: %r" % (where, b[:200]))
            continue
        if s != want and s not in CHAOS_STATUS:
            fails.append("%s: status %s, want %s or 500/503/504" % (where, s, want))
            continue
        try:
            e = json.loads(b)["error"]
            ok = list(e) == ["type", "message"] and e["type"] in DOC_TYPES.get(s, ()) and \
                e["message"]
            if s == want and types:
                ok = ok and e["type"] in types
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            fails.append("%s: %s is not the documented error shape: %r" % (where, s, b[:200]))
    return fails, counts


def test(ta, tb):
    seed = int(os.environ.get("S1_SOAK_SEED", "16"))
    seconds = float(os.environ.get("S1_SOAK_SECONDS", "75"))
    ta.make_model()
    ta.start_all(credits=2, timeout_ms=10000)
    start_jemm(tb)
    tb.wait_health(200, want="ready", timeout=180)
    va, ia = open_jev(ta)
    vb, ib = jemm(tb)
    fams = [Family("open_jev", ta, va, ia), Family("jemm", tb, vb, ib)]
    for f in fams:
        for name, body in f.valid:
            s, _, b = f.http("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
            assert s == 200, (f.name, name, s, b[:300])
            f.baseline[name] = norm(b)
    fe_a0 = proc_stat(ta.procs["fe"].pid)
    start = {(f.name, n): proc_stat(f.t.procs[n].pid) for f in fams for n in ("fe", "pp", "ex")}

    # the schedule: (seconds from start, trio, process, signal)
    rng = random.Random(seed)
    events = [(fams[0], "pp", signal.SIGKILL), (fams[0], "ex", signal.SIGKILL),
              (fams[0], "pp", signal.SIGTERM), (fams[1], "fe", signal.SIGKILL),
              (fams[1], "pp", signal.SIGKILL), (fams[1], "ex", signal.SIGKILL),
              (fams[1], "fe", signal.SIGTERM), (fams[1], "pp", signal.SIGTERM)]
    slots = sorted(rng.uniform(5, seconds - 12) for _ in events)
    rng.shuffle(events)
    plan = list(zip(slots, events))
    print("seed %d, %d s: %s" % (seed, seconds, ", ".join(
        "%.1f s %s %s %s" % (at, f.name, n, sig.name) for at, (f, n, sig) in plan)))
    results = []
    t0 = time.time()
    end = t0 + seconds
    clients = [threading.Thread(target=client, args=(k, fams, end, seed, results))
               for k in range(8)]
    for c in clients:
        c.start()
    for at, (f, n, sig) in plan:
        time.sleep(max(0.0, t0 + at - time.time()))
        p = f.t.procs[n]
        down0 = time.time()
        p.send_signal(sig)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s %s did not exit 60 s after %s" % (f.name, n, sig.name))
        if sig == signal.SIGTERM and p.returncode != 0:
            raise AssertionError("%s %s exited %s after SIGTERM" % (f.name, n, p.returncode))
        if n == "fe":
            f.t.start_frontend(timeout_ms=10000)
        elif n == "pp":
            f.t.start_preprocessor(credits=2)
        elif f.name == "jemm":
            start_jemm_executor(f.t)
        else:
            f.t.start_executor()
        if n == "fe":
            f.t.wait_health(200, timeout=60)  # serving HTTP again (ready or not)
            with f.lock:
                f.fe_down.append((down0, time.time()))
    for c in clients:
        c.join(120)
        assert not c.is_alive(), "a client hung"
    fails, counts = check(fams, results)
    print("%d requests in %.0f s: %s" % (len(results), time.time() - t0, ", ".join(
        "%s: %d" % (k, v) for k, v in sorted(counts.items(), key=lambda x: str(x[0])))))
    assert not fails, "%d failures:\n%s" % (len(fails), "\n".join(fails[:30]))
    assert counts.get(200, 0) >= 100, counts

    # afterwards: every baseline answered identically, and resources bounded
    for f in fams:
        f.t.wait_health(200, want="ready", timeout=120)
        for name, body in f.valid:
            s, _, b = f.http("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
            assert s == 200 and norm(b) == f.baseline[name], (f.name, name, s, b[:300])
    time.sleep(1.5)  # lingering closes end
    fe_a1 = proc_stat(ta.procs["fe"].pid)
    assert fe_a1["fds"] <= fe_a0["fds"] + 16, ("open_jev frontend fds", fe_a0, fe_a1)
    assert fe_a1["rss_kb"] <= fe_a0["rss_kb"] + 65536, ("open_jev frontend RSS", fe_a0, fe_a1)
    for f in fams:
        for n in ("fe", "pp", "ex"):
            now, then = proc_stat(f.t.procs[n].pid), start[(f.name, n)]
            assert now["fds"] <= then["fds"] + 16, (f.name, n, then, now)
            assert now["rss_kb"] <= 2 * then["rss_kb"] + 131072, (f.name, n, then, now)
    print("after the soak: every baseline request identical; open_jev frontend %d -> %d fds, "
          "%d -> %d MiB" % (fe_a0["fds"], fe_a1["fds"], fe_a0["rss_kb"] >> 10,
                            fe_a1["rss_kb"] >> 10))


def main():
    build, shared = sys.argv[1], sys.argv[2]
    ta, tb = trio.Trio(build, shared), trio.Trio(build, shared)
    ok = False
    try:
        test(ta, tb)
        ok = True
    finally:
        tb.stop(failed=not ok)
        ta.stop(failed=not ok)
    print("PASS")


if __name__ == "__main__":
    main()
