#!/usr/bin/env python3
"""The load benchmark of ../shared/spec/benchmark.md against a running s1serve trio it starts itself:
per family, one server (executor(s), preprocessor(s), frontend from the binaries given), wait for
/health (process-to-ready), the first request (cold), one excluded feasibility run of every
workload request (its answers are the correctness reference), then at each concurrency two
measured runs of the closed-loop client (each client sends its next request when the previous
answer arrives). Every answer is compared with the reference, timing fields aside; a wrong answer
stops the run (exit 3). The executors run with their step log (S1_EXECUTOR_STEPS=1): each measured
run adds one "steps" raw line per executor (its steps summed) and the summary a table of them.
Writes raw per-request JSON lines, a summary table (Markdown) and a PNG
chart of latency and throughput against concurrency; `report` remakes the table and chart from a
raw file (e.g. on a machine with matplotlib). Client: httpx (one keep-alive connection per
client thread); images: Pillow; chart: matplotlib.

--between CMD runs a shell command (a peer: the reference procedure on the same GPU) after the first
measured run at the first concurrency and before the second, so that s1 and the peer alternate
(s1, peer, s1); the GPU memory sampler pauses meanwhile (the peak stays the trio's). CMD finds
S1_BENCH_FAMILY and S1_BENCH_WORKLOADS (a JSON file: per workload its input tokens, questions,
request body and s1's answer, from the feasibility run) in its environment; its exit status and
time are a "between" line of the raw file. The summary gives, besides the table per concurrency (the mix),
one row per workload and concurrency: requests, warm p50 / p95, failures, the serial rate at
concurrency 1 (requests / sum of latencies) and the median Server-Timing split.

  bench_serve.py run --bin DIR --model FAMILY=DIR [--model ...] --out DIR [--device cpu|cuda:N]
                     [--concurrency 1,8,16] [--runs 2] [--duration S] [--workloads full|quick]
                     [--executors N] [--preprocessors N] [--credits K] [--executor-arg ARG ...]
                     [--between CMD]
  bench_serve.py report --raw FILE --out DIR
"""
import argparse
import base64
import io
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

TIMING = re.compile(rb'("(?:latency_s|latency_total_s|latency_ms|inference_seconds)": )[-0-9.eE+]+')


def norm(body):
    """Answer bytes with the timing fields' values zeroed: the rest must repeat exactly."""
    return TIMING.sub(rb"\g<1>0", body)


# ---- workloads (spec/benchmark.md "Workloads") --------------------------------------------------

def image_data_url(w, h, seed, fmt="JPEG"):
    """A seeded synthetic still (gradient, boxes, text-like strokes) as a data URL."""
    from PIL import Image, ImageDraw
    rng = random.Random(seed)
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(0, h, 4):
        for x in range(0, w, 4):
            c = ((x * 255) // w, (y * 255) // h, (x + y + seed * 37) % 256)
            for dy in range(4):
                for dx in range(4):
                    if x + dx < w and y + dy < h:
                        px[x + dx, y + dy] = c
    d = ImageDraw.Draw(im)
    for _ in range(24):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        d.rectangle([x0, y0, x0 + rng.randrange(20, w // 4), y0 + rng.randrange(10, h // 6)],
                    outline=(rng.randrange(256),) * 3, width=3)
        d.text((x0 + 4, y0 + 4), "item %d" % rng.randrange(1000), fill=(255, 255, 255))
    buf = io.BytesIO()
    im.save(buf, fmt, quality=90) if fmt == "JPEG" else im.save(buf, fmt)
    mime = "jpeg" if fmt == "JPEG" else fmt.lower()
    return "data:image/%s;base64,%s" % (mime, base64.b64encode(buf.getvalue()).decode())


def words(n, seed):
    rng = random.Random(seed)
    vocab = ["service", "latency", "queue", "error", "user", "panel", "button", "request", "cache",
             "the", "a", "is", "was", "on", "for", "with", "green", "red", "blue", "page"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def omnijev_questions(n, seed):
    qs = {}
    for j in range(n):
        kind = ("noul", "choice", "score")[j % 3]
        q = {"type": kind, "instructions": "Question %d about the screen: %s." % (j, words(6, seed + j))}
        if kind == "choice":
            q["criteria"] = {"k%d" % i: "option %d: %s" % (i, words(3, seed * 7 + i)) for i in range(4)}
        elif kind == "score":
            q["levels"] = ["low", "medium", "high"]
        qs["q%d" % j] = q
    return qs


def workloads(family, size):
    """[(name, body dict)] for a family; size 'quick' keeps the smallest ones (smoke tests)."""
    out = []
    if family == "omnijev":
        still = image_data_url(1600, 900, 1)
        for n in (1, 3, 6, 12):
            out.append(("still_%dq" % n, {"model": "omnijev", "state": {"images": [still]},
                                          "questions": omnijev_questions(n, n)}))
        for n in (32, 255):
            out.append(("choice_%d" % n, {"model": "omnijev", "state": {"images": [still]},
                                          "questions": {"pick": {
                                              "type": "choice", "instructions": "Pick the element.",
                                              "options": [{"key": "o%d" % i, "text": "element %d" % i}
                                                          for i in range(n)]}}}))
        if size == "quick":
            out = [w for w in out if w[0] in ("still_1q", "still_3q")]
    elif family == "open_jev":
        for n_words in (60, 400, 1200, 3000):  # prompts of about 80 to 3,400 tokens
            out.append(("noul_%dw" % n_words, {"model": "open-jev", "state": words(n_words, n_words),
                                               "questions": {"q": {"type": "noul",
                                                                   "instructions": "Is it healthy?"}}}))
        for n_q in (4, 8):
            qs = {}
            for j in range(n_q):
                kind = ("choice", "score", "noul")[j % 3]
                q = {"type": kind, "instructions": "Question %d: %s?" % (j, words(8, j))}
                if kind == "choice":
                    q["criteria"] = {"c%d" % i: words(5, 100 * j + i) for i in range(3 + j % 3)}
                elif kind == "score":
                    q["criteria"] = ["none", "some", "a lot"]
                qs["q%d" % j] = q
            out.append(("mixed_%dq" % n_q, {"model": "open-jev", "state": words(150, n_q),
                                            "questions": qs}))
        if size == "quick":
            out = [w for w in out if w[0] in ("noul_60w", "mixed_4q")]
    elif family == "jemm":
        imgs = [image_data_url(640, 360, 10 + i, "PNG") for i in range(4)]
        for n_img, n_cand in ((0, 2), (0, 8), (1, 4), (2, 8), (4, 32)):
            crit = {"c%d" % i: {"description": "candidate %d: %s" % (i, words(4, i))}
                    for i in range(n_cand)}
            body = {"state": "Ticket: " + words(40, n_cand),
                    "questions": {"which": {"type": "choice", "instructions": "Which applies?",
                                            "criteria": crit},
                                  "ok": {"type": "noul", "instructions": "Is it resolved?"}}}
            if n_img:
                body["images"] = imgs[:n_img]
            out.append(("img%d_cand%d" % (n_img, n_cand), body))
        if size == "quick":
            out = [w for w in out if w[0] in ("img0_cand2", "img1_cand4")]
    else:
        raise SystemExit("bench serve: unknown family %s" % family)
    return [(name, json.dumps(body).encode(), len(body["questions"])) for name, body in out]


# ---- the trio ---------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def binary(bindir, name):
    for rel in (name, "frontend/" + name, "preprocessor/" + name, "executor/server/" + name):
        p = os.path.join(bindir, rel)
        if os.access(p, os.X_OK):
            return p
    raise SystemExit("bench serve: %s not found under %s" % (name, bindir))


class Trio:
    def __init__(self, args, model, work):
        self.args, self.model, self.work = args, model, work
        self.procs, self.port = {}, free_port()

    def start(self, name, argv, env=None):
        log = open(os.path.join(self.work, name + ".log"), "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                            env=env)
        log.close()

    def step_marks(self):
        """Where each executor's log ends now (its step log is read from there on)."""
        return {name: os.path.getsize(os.path.join(self.work, name + ".log"))
                for name in self.procs if name.startswith("executor")}

    def steps_since(self, marks):
        """Per executor, the step-log lines (S1_EXECUTOR_STEPS=1) written since `marks`, as
        dicts of ints."""
        out = {}
        for name, at in marks.items():
            with open(os.path.join(self.work, name + ".log"), "rb") as f:
                f.seek(at)
                text = f.read().decode(errors="replace")
            out[name] = [{k: int(v) for k, v in (kv.split("=", 1) for kv in ln.split()[1:])}
                         for ln in text.splitlines() if ln.startswith("s1-executor: step=")]
        return out

    def up(self):
        a = self.args
        fe_url = "ipc://%s/fe.sock" % self.work
        ex_urls = ["ipc://%s/ex%d.sock" % (self.work, i) for i in range(a.executors)]
        t0 = time.time()
        # the step log: one stderr line per executor step, read back per measured run
        ex_env = dict(os.environ, S1_EXECUTOR_STEPS="1")
        for i, u in enumerate(ex_urls):
            self.start("executor%d" % i, [binary(a.bin, "s1-executor"), "--model", self.model,
                                          "--device", a.device, "--listen", u] + a.executor_arg,
                       env=ex_env)
        self.start("frontend", [binary(a.bin, "s1-frontend"), "--listen", "127.0.0.1:%d" % self.port,
                                "--pool", fe_url, "--queue", "256", "--timeout-ms", "600000"])
        for i in range(a.preprocessors):
            argv = [binary(a.bin, "s1-preprocessor"), "--frontend", fe_url, "--model", self.model,
                    "--credits", str(a.credits), "--id", "pp%d" % i]
            for u in ex_urls:
                argv += ["--executor", u]
            self.start("preprocessor%d" % i, argv)
        import httpx
        while True:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SystemExit("bench serve: %s exited (%s/%s.log)" % (name, self.work, name))
            try:
                r = httpx.get("http://127.0.0.1:%d/health" % self.port, timeout=5)
                if r.status_code == 200:
                    return time.time() - t0
            except httpx.HTTPError:
                pass
            if time.time() - t0 > a.ready_timeout:
                raise SystemExit("bench serve: not ready after %d s" % a.ready_timeout)
            time.sleep(0.05)

    def down(self):
        for name in sorted(self.procs, key=lambda n: not n.startswith("frontend")):
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

    def rss_kib(self):
        """Resident memory of every process now, and the peak (VmHWM) of each so far, KiB."""
        now = peak = 0
        for p in self.procs.values():
            try:
                with open("/proc/%d/status" % p.pid) as f:
                    st = f.read()
                now += int(re.search(r"VmRSS:\s+(\d+)", st).group(1))
                peak += int(re.search(r"VmHWM:\s+(\d+)", st).group(1))
            except (OSError, AttributeError):
                pass
        return now, peak


class Sampler(threading.Thread):
    """Peak resident memory of the trio (sum of its processes) and, when nvidia-smi answers, peak
    used GPU memory of the device, sampled every 0.25 s."""

    def __init__(self, trio, gpu):
        super().__init__(daemon=True)
        self.trio, self.gpu, self.stop_ev = trio, gpu, threading.Event()
        self.paused = threading.Event()
        self.rss_kib = self.gpu_mib = 0

    def run(self):
        while not self.stop_ev.is_set():
            if self.paused.is_set():
                self.stop_ev.wait(0.25)
                continue
            self.rss_kib = max(self.rss_kib, self.trio.rss_kib()[0])
            if self.gpu is not None:
                try:
                    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,"
                                        "noheader,nounits", "-i", str(self.gpu)],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=5)
                    self.gpu_mib = max(self.gpu_mib, int(r.stdout.split()[0]))
                except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                    self.gpu = None
            self.stop_ev.wait(0.25)

    def take(self):
        r = (self.rss_kib, self.gpu_mib)
        self.rss_kib = self.gpu_mib = 0
        return r


def server_timing(value):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"(\w+);dur=([0-9.]+)", value or "")}


def post(client, port, body):
    t0 = time.time()
    try:
        r = client.post("http://127.0.0.1:%d/v1/systemone" % port, content=body,
                        headers={"content-type": "application/json"})
        return t0, time.time() - t0, r.status_code, r.content, r.headers.get("server-timing")
    except Exception as e:  # noqa: BLE001 - any transport failure is a counted failure
        return t0, time.time() - t0, -1, repr(e).encode(), None


def closed_loop(port, items, ref, c, duration, emit):
    """c clients, each sending its next request as soon as its answer arrives, for `duration`
    seconds (requests begun before the end are awaited). Items are taken in turn from a shared
    counter, so every run sends the same mix. Returns (n_done, wall seconds, wrong answers)."""
    import httpx
    lock, nxt, wrong = threading.Lock(), [0], []
    end = time.time() + duration

    def client():
        with httpx.Client(timeout=600) as cl:
            while time.time() < end:
                with lock:
                    k = nxt[0]
                    nxt[0] += 1
                name, body, n_q = items[k % len(items)]
                t0, lat, status, data, st = post(cl, port, body)
                ok = status == 200 and norm(data) == ref[name]
                rec = {"workload": name, "t_start": round(t0, 6), "latency_s": round(lat, 6),
                       "status": status, "ok": ok, "decisions": n_q if status == 200 else 0,
                       "server_timing_ms": server_timing(st)}
                if status == 200:
                    rec["tokens"] = json.loads(data).get("usage", {}).get("input_tokens")
                else:
                    rec["error"] = data[:300].decode(errors="replace")
                with lock:
                    emit(rec)
                    if status == 200 and not ok:
                        wrong.append((name, data[:300]))

    t0 = time.time()
    th = [threading.Thread(target=client) for _ in range(c)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    return nxt[0], time.time() - t0, wrong


def run_family(args, family, model, raw):
    import httpx
    work = tempfile.mkdtemp(prefix="s1-bench-serve-")
    trio = Trio(args, model, work)
    items = workloads(family, args.workloads)

    def emit(rec):
        rec["family"] = family
        raw.write(json.dumps(rec) + "\n")
        raw.flush()

    sampler = None
    fwork = {}
    try:
        ready_s = trio.up()
        gpu = int(args.device.split(":")[1]) if args.device.startswith("cuda:") else (
            0 if args.device == "cuda" else None)
        sampler = Sampler(trio, gpu)
        sampler.start()
        emit({"kind": "ready", "process_to_ready_s": round(ready_s, 3), "model": model,
              "device": args.device, "executors": args.executors,
              "preprocessors": args.preprocessors, "credits": args.credits,
              "executor_args": args.executor_arg})
        with httpx.Client(timeout=600) as cl:
            t0, lat, status, data, st = post(cl, trio.port, items[0][1])
            emit({"kind": "first", "workload": items[0][0], "latency_s": round(lat, 6),
                  "status": status})
            if status != 200:
                raise SystemExit("bench serve: %s: first request %d: %s" % (family, status, data[:300]))
            ref = {}
            for name, body, n_q in items:  # the excluded feasibility run: the reference answers
                t0, lat, status, data, st = post(cl, trio.port, body)
                emit({"kind": "feasibility", "workload": name, "latency_s": round(lat, 6),
                      "status": status, "decisions": n_q,
                      "tokens": json.loads(data).get("usage", {}).get("input_tokens")
                      if status == 200 else None})
                if status != 200:
                    raise SystemExit("bench serve: %s: workload %s: %d %s" % (family, name, status,
                                                                              data[:300]))
                ref[name] = norm(data)
                fwork[name] = {"tokens": json.loads(data).get("usage", {}).get("input_tokens"),
                               "questions": n_q, "body": json.loads(body),
                               "answer": json.loads(data)}
        for c in args.concurrency:
            sampler.take()
            for run in range(1, args.runs + 1):
                if run == 2 and c == args.concurrency[0] and args.between:
                    between(args, family, fwork, sampler, emit)
                def emit_run(rec, c=c, run=run):
                    rec.update(kind="request", concurrency=c, run=run)
                    emit(rec)
                marks = trio.step_marks()
                n, wall, wrong = closed_loop(trio.port, items, ref, c, args.duration, emit_run)
                emit({"kind": "run", "concurrency": c, "run": run, "requests": n,
                      "wall_s": round(wall, 3)})
                for name, st in sorted(trio.steps_since(marks).items()):
                    emit(step_totals(st, c, run, name, wall))
                if wrong:
                    raise SystemExit("bench serve: %s: wrong answer at concurrency %d for %s: %r"
                                     % (family, c, wrong[0][0], wrong[0][1]))
            rss, gpu_mib = sampler.take()
            emit({"kind": "memory", "concurrency": c, "peak_rss_mib": round(rss / 1024, 1),
                  "peak_gpu_mib": gpu_mib if sampler.gpu is not None else None})
    finally:
        if sampler:
            sampler.stop_ev.set()
        trio.down()
        if args.keep_logs:
            print("bench serve: %s logs in %s" % (family, work))
        else:
            shutil.rmtree(work, ignore_errors=True)


STEP_SUMS = ("programs", "images", "image_rows", "pieces", "rows", "tokens", "readouts",
             "finished", "vision_us", "forward_us", "logprob_us", "readout_us", "heads_us",
             "total_us")


def step_totals(steps, c, run, executor, wall):
    """A "steps" raw line: an executor's step log over one measured run, summed (STEP_SUMS), with
    the step count, the largest step's tokens and programs, and the run's wall time."""
    rec = {"kind": "steps", "concurrency": c, "run": run, "executor": executor,
           "steps": len(steps), "wall_s": round(wall, 3),
           "max_tokens": max((x["tokens"] for x in steps), default=0),
           "max_programs": max((x["programs"] for x in steps), default=0)}
    for k in STEP_SUMS:
        rec[k] = sum(x.get(k, 0) for x in steps)
    return rec


def between(args, family, fwork, sampler, emit):
    """The --between command (the peer), the sampler paused; its status is a raw line."""
    path = os.path.join(args.out, "s1_workloads_%s.json" % family)
    with open(path, "w") as f:
        json.dump(fwork, f)
    sampler.paused.set()
    t0 = time.time()
    rc = subprocess.run(args.between, shell=True, env=dict(
        os.environ, S1_BENCH_FAMILY=family, S1_BENCH_WORKLOADS=path)).returncode
    sampler.paused.clear()
    emit({"kind": "between", "concurrency": args.concurrency[0], "after_run": 1, "rc": rc,
          "s": round(time.time() - t0, 3), "command": args.between})


# ---- report -----------------------------------------------------------------------------------

def nearest_rank(xs, p):
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)] if s else float("nan")


def summarize(raw_path):
    """{family: {"ready", "first", "levels": {c: {...}}}} from a raw file."""
    fam = {}
    with open(raw_path) as f:
        for line in f:
            r = json.loads(line)
            d = fam.setdefault(r["family"], {"levels": {}, "stages": {}})
            k = r.get("kind")
            if k == "ready":
                d["ready"] = r
            elif k == "first":
                d["first"] = r
            elif k == "memory":
                d["levels"].setdefault(r["concurrency"], {})["memory"] = r
            elif k == "run":
                lv = d["levels"].setdefault(r["concurrency"], {})
                lv.setdefault("runs", {})[r["run"]] = {"wall_s": r["wall_s"], "lat": [], "dec": 0,
                                                       "fail": 0, "n": 0}
            elif k == "between":
                d.setdefault("between", []).append(r)
            elif k == "steps":
                d.setdefault("steps", []).append(r)
            elif k == "request":
                lv = d["levels"].setdefault(r["concurrency"], {})
                lv.setdefault("pending", []).append(r)
    for d in fam.values():
        for c, lv in d["levels"].items():
            for r in lv.pop("pending", []):
                run = lv["runs"][r["run"]]
                run["n"] += 1
                w = lv.setdefault("workloads", {}).setdefault(r["workload"], {
                    "lat": [], "n": 0, "fail": 0, "dec": 0, "tokens": None, "stages": {}})
                w["n"] += 1
                if r["status"] == 200 and r.get("ok", True):
                    w["lat"].append(r["latency_s"])
                    w["dec"] += r["decisions"]
                    w["tokens"] = r.get("tokens", w["tokens"])
                    for s, v in r.get("server_timing_ms", {}).items():
                        w["stages"].setdefault(s, []).append(v)
                else:
                    w["fail"] += 1
                if r["status"] == 200:
                    run["lat"].append(r["latency_s"])
                    run["dec"] += r["decisions"]
                    for s, v in r.get("server_timing_ms", {}).items():
                        d["stages"].setdefault(c, {}).setdefault(s, []).append(v)
                else:
                    run["fail"] += 1
    return fam


def table(fam):
    out = []
    for family, d in fam.items():
        ready = d.get("ready", {})
        first = d.get("first", {})
        out.append("### %s (%s; %s executor(s), %s preprocessor(s) x %s credits)\n" % (
            family, ready.get("device", "?"), ready.get("executors", "?"),
            ready.get("preprocessors", "?"), ready.get("credits", "?")))
        out.append("process-to-ready %.2f s; first request (%s) %.1f ms\n" % (
            ready.get("process_to_ready_s", float("nan")), first.get("workload", "?"),
            1000 * first.get("latency_s", float("nan"))))
        out.append("| concurrency | requests | requests/s (runs) | decisions/s (runs) | warm p50 ms | "
                   "warm p95 ms | failures | peak RSS MiB | peak GPU MiB |")
        out.append("|---:|---:|---|---|---:|---:|---:|---:|---:|")
        for c in sorted(d["levels"]):
            lv = d["levels"][c]
            runs = [lv["runs"][k] for k in sorted(lv.get("runs", {}))]
            lat = [x for r in runs for x in r["lat"]]
            rps = ["%.2f" % (len(r["lat"]) / r["wall_s"]) for r in runs if r["wall_s"] > 0]
            dps = ["%.2f" % (r["dec"] / r["wall_s"]) for r in runs if r["wall_s"] > 0]
            mem = lv.get("memory", {})
            out.append("| %d | %d | %s | %s | %.1f | %.1f | %d | %s | %s |" % (
                c, sum(r["n"] for r in runs), " / ".join(rps), " / ".join(dps),
                1000 * nearest_rank(lat, 50), 1000 * nearest_rank(lat, 95),
                sum(r["fail"] for r in runs), mem.get("peak_rss_mib", "-"),
                mem.get("peak_gpu_mib") if mem.get("peak_gpu_mib") is not None else "-"))
        if d["stages"]:
            names = sorted({s for st in d["stages"].values() for s in st})
            out.append("\nmean Server-Timing per request, ms:\n")
            out.append("| concurrency | " + " | ".join(names) + " |")
            out.append("|---:|" + "---:|" * len(names))
            for c in sorted(d["stages"]):
                st = d["stages"][c]
                out.append("| %d | " % c + " | ".join(
                    "%.1f" % (sum(st[s]) / len(st[s])) if st.get(s) else "-" for s in names) + " |")
        for b in d.get("between", []):
            out.append("\n--between after run %d at concurrency %d: rc %d, %.1f s (`%s`)" % (
                b["after_run"], b["concurrency"], b["rc"], b["s"], b["command"][:120]))
        out.append(workload_table(d))
        if d.get("steps"):
            out.append(steps_table(d["steps"]))
        out.append("")
    return "\n".join(out)


def steps_table(steps):
    """One row per measured run and executor from its step log: how many steps, how full, how busy
    the compute thread was (Σ step time / wall) and where the step time went."""
    out = ["\nexecutor steps per measured run (the executor's step log; busy = step time / wall "
           "time; shares of the step time):\n",
           "| concurrency | run | executor | steps | steps/s | programs per step | tokens per "
           "step (max) | busy | forward | vision | log-probs + readouts | heads | forming |",
           "|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in steps:
        n, tot = r["steps"], r["total_us"]
        pct = lambda v: "%.0f %%" % (100.0 * v / tot) if tot else "-"  # noqa: E731
        other = tot - r["forward_us"] - r["vision_us"] - r["logprob_us"] - r["readout_us"] - \
            r["heads_us"]
        out.append("| %d | %d | %s | %d | %.1f | %s | %s (%d) | %s | %s | %s | %s | %s | %s |" % (
            r["concurrency"], r["run"], r["executor"], n, n / r["wall_s"] if r["wall_s"] else 0,
            "%.2f" % (r["programs"] / n) if n else "-", "%.0f" % (r["tokens"] / n) if n else "-",
            r["max_tokens"], "%.0f %%" % (100.0 * tot / 1e6 / r["wall_s"]) if r["wall_s"] else "-",
            pct(r["forward_us"]), pct(r["vision_us"]), pct(r["logprob_us"] + r["readout_us"]),
            pct(r["heads_us"]), pct(other)))
    return "\n".join(out)


SPLIT = ("preprocess", "queue", "wait", "vision", "prefix", "rows", "heads", "execute", "finish")


def workload_table(d):
    """One row per concurrency and workload: warm latency, failures, the serial rate at
    concurrency 1 and the median Server-Timing split (ms)."""
    names = [s for s in SPLIT if any(s in w["stages"] for lv in d["levels"].values()
                                     for w in lv.get("workloads", {}).values())]
    out = ["\nper workload (warm, nearest rank; split: median Server-Timing, ms; serial rate at "
           "concurrency 1 = requests / sum of their latencies):\n",
           "| concurrency | workload | tokens | requests | failures | p50 ms | p95 ms | "
           "requests/s serial | decisions/s serial | " + " | ".join(names) + " |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(names)]
    for c in sorted(d["levels"]):
        for name, w in d["levels"][c].get("workloads", {}).items():
            tot = sum(w["lat"])
            serial = c == 1 and tot > 0
            out.append("| %d | %s | %s | %d | %d | %.1f | %.1f | %s | %s | " % (
                c, name, w["tokens"] if w["tokens"] is not None else "-", w["n"], w["fail"],
                1000 * nearest_rank(w["lat"], 50), 1000 * nearest_rank(w["lat"], 95),
                "%.2f" % (len(w["lat"]) / tot) if serial else "-",
                "%.2f" % (w["dec"] / tot) if serial else "-") + " | ".join(
                "%.1f" % nearest_rank(w["stages"][s], 50) if w["stages"].get(s) else "-"
                for s in names) + " |")
    return "\n".join(out)


def chart(fam, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench serve: no matplotlib here; chart skipped (run `report` where it is)")
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (family, d) in enumerate(fam.items()):
        col = "C%d" % i
        cs = sorted(d["levels"])
        p50, p95, rps, dps, rps_lo, rps_hi = [], [], [], [], [], []
        for c in cs:
            runs = [d["levels"][c]["runs"][k] for k in sorted(d["levels"][c].get("runs", {}))]
            lat = [x for r in runs for x in r["lat"]]
            p50.append(1000 * nearest_rank(lat, 50))
            p95.append(1000 * nearest_rank(lat, 95))
            per = [len(r["lat"]) / r["wall_s"] for r in runs if r["wall_s"] > 0] or [0]
            rps.append(sum(per) / len(per))
            rps_lo.append(rps[-1] - min(per))
            rps_hi.append(max(per) - rps[-1])
            perd = [r["dec"] / r["wall_s"] for r in runs if r["wall_s"] > 0] or [0]
            dps.append(sum(perd) / len(perd))
        ax1.plot(cs, p50, "o-", color=col, label="%s p50" % family)
        ax1.plot(cs, p95, "s--", color=col, label="%s p95" % family)
        ax2.errorbar(cs, rps, yerr=[rps_lo, rps_hi], fmt="o-", color=col, capsize=3,
                     label="%s requests/s" % family)
        ax2.plot(cs, dps, "^:", color=col, label="%s decisions/s" % family)
    for ax, title, yl in ((ax1, "warm latency (nearest rank)", "ms"),
                          (ax2, "throughput (bars: spread of the runs)", "per second")):
        ax.set_xlabel("concurrency (closed-loop clients)")
        ax.set_ylabel(yl)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def report(raw_path, out_dir):
    fam = summarize(raw_path)
    text = table(fam)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    if chart(fam, os.path.join(out_dir, "chart.png")):
        print("chart: %s" % os.path.join(out_dir, "chart.png"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True, help="folder with s1-frontend, s1-preprocessor, "
                   "s1-executor (a bundle's bin/ or a build folder)")
    r.add_argument("--model", action="append", required=True, metavar="FAMILY=DIR")
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cpu")
    r.add_argument("--concurrency", default="1,8,16")
    r.add_argument("--runs", type=int, default=2)
    r.add_argument("--duration", type=float, default=20.0, help="seconds per measured run")
    r.add_argument("--workloads", choices=("full", "quick"), default="full")
    r.add_argument("--executors", type=int, default=1)
    r.add_argument("--preprocessors", type=int, default=1)
    r.add_argument("--credits", type=int, default=16)
    r.add_argument("--executor-arg", action="append", default=[])
    r.add_argument("--ready-timeout", type=int, default=1800)
    r.add_argument("--keep-logs", action="store_true")
    r.add_argument("--between", default="", help="shell command run between the first two "
                   "measured runs at the first concurrency (a peer)")
    p = sub.add_parser("report")
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "report":
        os.makedirs(a.out, exist_ok=True)
        report(a.raw, a.out)
        return
    a.concurrency = [int(x) for x in a.concurrency.split(",")]
    os.makedirs(a.out, exist_ok=True)
    raw_path = os.path.join(a.out, "raw.jsonl")
    with open(raw_path, "w") as raw:
        for m in a.model:
            family, _, d = m.partition("=")
            run_family(a, family, os.path.abspath(d), raw)
    print("raw per-request lines: %s" % raw_path)
    report(raw_path, a.out)


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            sys.exit(3 if "wrong answer" in e.code else 1)
        raise
