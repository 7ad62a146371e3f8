"""The executor's scheduler over HTTP, on the tiny random OmniJev checkpoint of the e2e tests
(test_omnijev_e2e.make_model) and the CPU backend. Parts:

  invariance  48 different requests (1 to 12 questions, 1 to 255 options, 1 or 2 images over 8
            states) sent one at a time to an executor without caches (the reference: each served
            alone), then by 16 concurrent clients to a fresh executor with its caches on and
            --record: every answer byte-identical to its reference with the timing fields
            (latency_s, latency_total_s) masked; /metrics shows programs sharing steps and cache
            hits; s1-replay re-runs the recorded programs one at a time and finds every result
            bit-identical to the one recorded under load.
  cache     the same state asked twice (a full prefix hit and a vision hit, identical answers),
            then 50 requests over 5 states on an executor whose prefix cache holds the snapshots
            of 3 of them: hits, misses, insertions, evictions, entries and bytes as an LRU model
            predicts (snapshot bytes from the model's config), answers identical to the cold ones.
  deadline  the attack inputs of ../shared/findings/2026-12-01-attack (F6: a 504 and the work goes
            on): 100 fire-and-forget 4x255-option OmniJev requests with a 3 s deadline, then 2 JEMM
            requests with the 1920x1080 image (the tiny JEMM checkpoint of the JEMM e2e test) with
            3 s: programs are dropped past their deadline (s1_executor_deadline_dropped_total), the
            executor holds nothing soon after and runs no step once every deadline has passed (the
            CPU vision tower stops between blocks: vision_oracle); valid requests are then served
            at once, no 503.

  cancel    a 1-question request sent while a 4x255-option one is in flight is answered before it
            (no head-of-line blocking: the old FIFO executor answered it after the big one's minute
            of work), and given to one scheduler after a 255-option one (s1-replay --batch --order)
            it finishes first, after at most 4 steps, while the big one takes 6 or more; then CANCEL
            at the executor (test_exec_cancel.c, over nng as a preprocessor sends it): the
            4x255-option program cancelled in flight is answered -CM_ECANCELLED within one step,
            one cancelled before it arrives when it is taken in, a short one then runs; /metrics
            counts 2.

Stdlib only. usage: test_sched.py PART BUILD_ROOT SHARED_DIR QWEN35_TOKENIZER [TEST_EXEC_CANCEL]"""
import base64
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import trio  # noqa: E402
import test_omnijev_e2e as e2e  # noqa: E402

TIMING = re.compile(rb'"(latency_s|latency_total_s)":\s*[-0-9.eE+]+')


def masked(body):
    return TIMING.sub(rb'"\1":0', body)


def png(w, h, seed):
    """An RGB PNG of w x h with seeded colour bands (a distinct image per seed)."""
    rnd = random.Random(seed)
    cols = [bytes(rnd.randrange(256) for _ in range(3)) for _ in range(4)]
    rows = b"".join(b"\x00" + b"".join(cols[(x * 4 // w + y * 2 // h) % 4] for x in range(w))
                    for y in range(h))

    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(data).decode()


def states(n):
    """n states: one or two small images each (sizes and colours differ)."""
    out = []
    for i in range(n):
        k = 1 + i % 2
        out.append([png(56 + 28 * ((i + j) % 3), 56 + 28 * (i % 2), 100 * i + j) for j in range(k)])
    return out


def question(rnd, kind, n_options=None):
    q = {"type": kind, "instructions": "Is %s on screen?" % rnd.choice(
        ["a button", "the menu", "a red icon", "text", "a dialog"])}
    if kind == "choice" and n_options and n_options > 40:
        # keys without texts: rows without inner tokens, so no LM features (the CPU's costliest
        # readout, a full-vocabulary log-softmax per inner token) for the 255 rows
        q["options"] = [{"key": "k%d" % j} for j in range(n_options)]
    elif kind == "choice":
        q["options"] = [{"key": "o%d" % j, "text": rnd.choice(["yes", "no", "red", "blue", "up"])}
                        for j in range(n_options or rnd.randint(1, 3))]
    elif kind == "score":
        q["levels"] = ["low", "mid", "high"][: rnd.randint(2, 3)]
    elif rnd.random() < 0.08:  # a region's text is long: an LM feature per token
        q["region"] = {"box": [rnd.randint(0, 20), rnd.randint(0, 20), 40, 50]}
    return q


def requests(n, sts, seed=14):
    """n different requests over the states, kept small for CI: 1 to 12 questions (most 1-4),
    Choice of 1 to 255 options (one of 255, one of 40, most 1-3), the same state (prefix and
    images) shared by several requests."""
    rnd = random.Random(seed)
    out = []
    for r in range(n):
        n_q = {1: 12, 9: 7}.get(r, 1 + r % 4)
        kinds = [("noul", "noul", "choice", "score")[(r + i) % 4] for i in range(n_q)]
        qs = {}
        for i, kind in enumerate(kinds):
            big = {0: 255, 5: 40}.get(r) if i == 0 else None
            qs["q%d" % i] = question(rnd, "choice" if big else kind, big)
        out.append({"state": {"images": sts[r % len(sts)]}, "questions": qs})
    return out


def post_all(t, bodies, clients):
    """Posts every body with `clients` threads; returns {index: (status, raw body)}."""
    got = {}
    lock = threading.Lock()
    todo = list(range(len(bodies)))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            s, _, b = t.post(bodies[i])
            with lock:
                got[i] = (s, b)
    th = [threading.Thread(target=worker) for _ in range(clients)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    return got


def metrics(t):
    """The series of the running executor (label host:pid of t.procs["ex"]) in /metrics as
    {name: value}; empty until its first health reply has reached the frontend."""
    _, _, m = t.http("GET", "/metrics", timeout=10)
    out = {}
    pid = t.procs["ex"].pid
    for line in m.decode().splitlines():
        mm = re.match(r'^(s1_[a-z_]+)\{executor="[^"]*:(\d+)"\} (\d+)$', line)
        if mm and int(mm.group(2)) == pid:
            out[mm.group(1)] = int(mm.group(3))
    return out


def wait_metrics(t, pred, timeout=10):
    """Executor counters travel health reply -> STATUS (200 ms) -> frontend: wait for them."""
    end = time.time() + timeout
    m = metrics(t)
    while not pred(m) and time.time() < end:
        time.sleep(0.1)
        m = metrics(t)
    return m


def start_executor(t, model, args, record=None):
    t.kill("ex", 15)
    argv = [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
            "--listen", t.ex_url] + args
    if record:
        argv += ["--record", record]
    t.start("ex", argv)
    # ready once /health says so and the new executor's own series are there (the frontend's view
    # lags one STATUS behind: right after a restart it may still show the old executor)
    end = time.time() + 120
    while time.time() < end:
        try:
            s, _, b = t.http("GET", "/health", timeout=5)
            if s == 200 and json.loads(b).get("status") == "ready" and \
                    "s1_executor_steps_total" in metrics(t):
                return
        except OSError:
            pass  # the frontend is not listening yet
        time.sleep(0.1)
    raise AssertionError("the executor never became ready")


def start(t, model, ex_args, credits=16, timeout_ms=1200000, queue=256):
    t.model = model
    t.start_frontend(queue=queue, timeout_ms=timeout_ms)
    t.client_timeout = timeout_ms / 1000 + 30
    t.start_preprocessor(credits=credits)
    start_executor(t, model, ex_args)


def replay(t, rec, model, extra):
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--model", model] + extra,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode, r.stdout.decode()


def part_invariance(t, model, fails):
    bodies = requests(48, states(8))
    start(t, model, ["--prefix-cache-bytes", "0", "--vision-cache-bytes", "0"])
    t0 = time.time()
    ref = {}
    for i, b in enumerate(bodies):
        s, _, raw = t.post(b)
        if s != 200:
            fails.append("reference %d: HTTP %d %s" % (i, s, raw[:300]))
        ref[i] = masked(raw)
    m = metrics(t)
    print("reference: 48 requests one at a time in %.1f s, %d steps" %
          (time.time() - t0, m.get("s1_executor_steps_total", -1)), flush=True)
    rec = os.path.join(t.tmp, "rec")
    start_executor(t, model, ["--max-batch-tokens", "1024", "--max-batch-readouts", "256"],
                   record=rec)
    for round_ in ("cold",):
        before = metrics(t)
        t0 = time.time()
        got = post_all(t, bodies, 16)
        dt = time.time() - t0
        differ = [i for i in range(len(bodies)) if got[i][0] != 200 or masked(got[i][1]) != ref[i]]
        for i in differ[:5]:
            fails.append("%s: request %d (%d questions) differs from its reference: %r vs %r" % (
                round_, i, len(bodies[i]["questions"]), got[i][1][:300], ref[i][:300]))
        m = wait_metrics(t, lambda m: m.get("s1_executor_programs_total", 0) >=
                         before.get("s1_executor_programs_total", 0) + 48)
        d = {k: m.get(k, 0) - before.get(k, 0) for k in m}
        per_step = d["s1_executor_step_programs_total"] / max(1, d["s1_executor_steps_total"])
        print("%s: 48 requests from 16 clients in %.1f s: %d differ; %d steps, %.2f programs per "
              "step; prefix cache %d hits %d misses; vision cache %d hits %d misses" % (
                  round_, dt, len(differ), d["s1_executor_steps_total"], per_step,
                  d["s1_prefix_cache_hits_total"], d["s1_prefix_cache_misses_total"],
                  d["s1_vision_cache_hits_total"], d["s1_vision_cache_misses_total"]), flush=True)
        if per_step < 2.0:
            fails.append("%s: %.2f programs per step: the requests did not share batches" % (
                round_, per_step))
        if round_ == "cold" and d["s1_prefix_cache_hits_total"] < 1:
            fails.append("cold: no prefix-cache hit although states repeat")
    t.kill("ex", 15)
    n = len(os.listdir(rec)) // 2
    if n != 48:
        fails.append("%d records, want 48" % n)
    for extra in ([],):
        rc, out = replay(t, rec, model, extra)
        print("s1-replay %s: %s" % (" ".join(extra) or "(alone)", out.strip().splitlines()[-1]),
              flush=True)
        if rc != 0 or "%d identical, 0 differ" % n not in out:
            fails.append("s1-replay %s: %s" % (" ".join(extra), out[-2000:]))


def snap_bytes(model, n):
    """Bytes of a CPU snapshot of n tokens (ex_engine_cpu.c cpu_snap_bytes): K and V rows of every
    full-attention layer, conv window and recurrent state of every Gated DeltaNet layer, float32."""
    with open(os.path.join(model, "s1-model.json")) as f:
        c = json.load(f)["config"]
    c = c.get("text_config", c)
    conv = 2 * c["linear_num_key_heads"] * c["linear_key_head_dim"] + \
        c["linear_num_value_heads"] * c["linear_value_head_dim"]
    gdn = (c["linear_conv_kernel_dim"] - 1) * conv + \
        c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"]
    n_attn = c["layer_types"].count("full_attention")
    return 4 * (n_attn * 2 * n * c["num_key_value_heads"] * c["head_dim"] +
                (len(c["layer_types"]) - n_attn) * gdn)


def lru_predict(order, grid_bytes, end_bytes, budget):
    """What the prefix cache should count for one-prefix requests of these states in this order:
    each run of a state stores its snapshot at the grid point 64 (the last one before the end of
    its image) and at its end; a full hit touches the end entry, a partial hit the grid entry
    (then stores the end); LRU eviction by bytes."""
    from collections import OrderedDict
    cache, n = OrderedDict(), {"hits": 0, "misses": 0, "evictions": 0, "inserts": 0}

    def put(key, size):
        if key in cache or size > budget:
            return
        while cache and sum(cache.values()) + size > budget:
            cache.popitem(last=False)
            n["evictions"] += 1
        cache[key] = size
        n["inserts"] += 1
    for st in order:
        if (st, "end") in cache:
            n["hits"] += 1
            cache.move_to_end((st, "end"))
        elif (st, "grid") in cache:
            n["hits"] += 1
            cache.move_to_end((st, "grid"))
            put((st, "end"), end_bytes)
        else:
            n["misses"] += 1
            put((st, "grid"), grid_bytes)
            put((st, "end"), end_bytes)
    return n, len(cache), sum(cache.values())


def part_cache(t, model, fails):
    q = {"a": {"type": "choice", "instructions": "Which one?",
               "options": [{"text": "x"}, {"text": "y"}, {"text": "z"}]}}
    # five states of one size (one 56x56 image each, other colours): prefixes of one length
    bodies = [{"state": {"images": [png(56, 56, 7 + i)]}, "questions": q} for i in range(5)]
    start(t, model, [], credits=1)
    cold = {}
    for i, b in enumerate(bodies):
        s, _, raw = t.post(b)
        if s != 200:
            fails.append("cold %d: HTTP %d %s" % (i, s, raw[:200]))
        cold[i] = masked(raw)
    # the same state asked twice: a full prefix hit and a vision hit, the same answer
    before = wait_metrics(t, lambda m: m.get("s1_executor_programs_total", 0) >= 5)
    s, _, raw = t.post(bodies[0])
    m = wait_metrics(t, lambda m: m.get("s1_executor_programs_total", 0) >= 6)
    d = {k: m[k] - before.get(k, 0) for k in m}
    n = d["s1_prefix_cache_tokens_reused_total"]
    print("asked twice: %d prefix hit (%d tokens reused), %d vision hit, answer identical: %s" % (
        d["s1_prefix_cache_hits_total"], n, d["s1_vision_cache_hits_total"],
        masked(raw) == cold[0]), flush=True)
    if s != 200 or masked(raw) != cold[0] or d["s1_prefix_cache_hits_total"] != 1 or \
            d["s1_vision_cache_hits_total"] != 1 or n <= 64 or d["s1_prefix_cache_misses_total"]:
        fails.append("asked twice: HTTP %d, identical %s, counters %s" % (
            s, masked(raw) == cold[0], d))
    grid, end = snap_bytes(model, 64), snap_bytes(model, n)
    if before["s1_prefix_cache_bytes"] != 5 * (grid + end) or before["s1_prefix_cache_entries"] != 10:
        fails.append("after 5 states: %d bytes in %d entries, want 5 x (%d + %d) in 10" % (
            before["s1_prefix_cache_bytes"], before["s1_prefix_cache_entries"], grid, end))
    # 50 requests over the 5 states with a cache that holds 3 of them (grid and end snapshots)
    budget = 3 * (grid + end) + grid // 2
    rnd = random.Random(3)
    order = [rnd.choice([0, 1, 2]) if k % 4 else rnd.randrange(5) for k in range(50)]
    want, want_entries, want_bytes = lru_predict(order, grid, end, budget)
    start_executor(t, model, ["--prefix-cache-bytes", str(budget), "--vision-cache-bytes", "0"])
    before = metrics(t)
    for k, i in enumerate(order):
        s, _, raw = t.post(bodies[i])
        if s != 200 or masked(raw) != cold[i]:
            fails.append("request %d (state %d): HTTP %d, answer differs from the cold one: %r" % (
                k, i, s, raw[:200]))
    m = wait_metrics(t, lambda m: m.get("s1_executor_programs_total", 0) >=
                     before.get("s1_executor_programs_total", 0) + 50)
    got = {k: m["s1_prefix_cache_%s_total" % k] - before.get("s1_prefix_cache_%s_total" % k, 0)
           for k in want}
    print("50 requests over 5 states %s, cache of %d bytes (3 states of %d + %d): %s, an LRU "
          "predicts %s; %d entries, %d bytes" % ("".join(map(str, order)), budget, grid, end, got,
                                                 want, m["s1_prefix_cache_entries"],
                                                 m["s1_prefix_cache_bytes"]), flush=True)
    if got != want or m["s1_prefix_cache_entries"] != want_entries or \
            m["s1_prefix_cache_bytes"] != want_bytes:
        fails.append("cache counters %s, want %s; %d entries of %d bytes, want %d of %d" % (
            got, want, m["s1_prefix_cache_entries"], m["s1_prefix_cache_bytes"], want_entries,
            want_bytes))
    if not want["hits"] or not want["evictions"]:
        fails.append("the order %s makes no hit or no eviction: a weak test" % order)


def make_jemm(build, shared, work):
    """The tiny random JEMM checkpoint of tests/jemm/test_jemm_e2e.py (its fixture's s1-mkmodel
    arguments and decision config), exported with the adapter kept."""
    with open(os.path.join(HERE, "..", "fixtures", "jemm", "e2e", "e2e.json")) as f:
        fix = json.load(f)
    tokdir = os.path.join(shared, "tokenizers", "qwen3")
    base, adapter, out = (os.path.join(work, n) for n in ("jemm-base", "jemm-adapter", "jemm"))
    trio.run([os.path.join(build, "tools/mkmodel/s1-mkmodel"), *fix["base"]["mkmodel_args"],
              "--tokenizer", os.path.join(tokdir, "tokenizer.json"), "--out", base,
              "--adapter-out", adapter])
    shutil.copy(os.path.join(tokdir, "tokenizer_config.json"), base)
    with open(os.path.join(adapter, "decision_config.json"), "w") as f:
        json.dump(fix["decision_config"], f)
    trio.run([os.path.join(build, "tools/export/s1-export"), "--family", "jemm", "--base", base,
              "--adapter", adapter, "--lora", "keep", "--out", out])
    return out


def fire_and_forget(t, body, n, hold_s=0.2):
    """n clients each post `body` and drop the connection after hold_s (F1/F6 of the attack).
    Returns the answers that came within hold_s as a Counter of (status, error message)."""
    got = collections.Counter()
    mu = threading.Lock()

    def fire():
        try:
            s, _, raw = t.http("POST", "/v1/systemone", body, {"Content-Type": "application/json"},
                               timeout=hold_s)
        except OSError:
            return
        try:
            msg = json.loads(raw)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = ""
        with mu:
            got[(s, msg)] += 1
    th = [threading.Thread(target=fire) for _ in range(n)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    return got


def reached_executor(answers):
    """How many answers say their program was sent to the executor: the preprocessor's 504 after
    sending it ('... during execution') or the executor's own error ('executor: ...')."""
    return sum(v for (_, msg), v in answers.items()
               if msg.endswith("during execution") or msg.startswith("executor"))


def dropped_unrun(t, before, what, n, fails, answers, settle_s=2.0, must_drop=True):
    """After every deadline of the dropped requests has passed: the executor soon holds nothing,
    programs were dropped past their deadline (must_drop: a request whose deadline passes in the
    preprocessor never reaches the executor, so at least one answer must say its program did),
    and no step runs afterwards. Where an answer says its program was sent to the executor, the
    counters are read once they show one answered there (the frontend's view lags a STATUS
    behind; a program given up at the preprocessor's deadline may also never have left it)."""
    time.sleep(settle_s)
    reached = reached_executor(answers)
    base = before.get("s1_executor_programs_total", 0)
    m1 = wait_metrics(t, lambda m: m.get("s1_executor_active", 1) == 0 and
                      m.get("s1_executor_waiting", 1) == 0 and
                      m.get("s1_executor_programs_total", 0) - base >= min(reached, 1), timeout=15)
    if m1.get("s1_executor_active", 1) or m1.get("s1_executor_waiting", 1):
        fails.append("%s: the executor still holds work 15 s after the deadlines" % what)
    if m1.get("s1_executor_programs_total", 0) - base < min(reached, 1):
        fails.append("%s: %d answers say their program was sent to the executor, which shows none "
                     "answered 15 s after the deadlines" % (what, reached))
    time.sleep(0.6)
    m2 = metrics(t)
    dropped = m1["s1_executor_deadline_dropped_total"] - before.get("s1_executor_deadline_dropped_total", 0)
    steps = m1["s1_executor_steps_total"] - before.get("s1_executor_steps_total", 0)
    print("fire and forget: %d %s, %d programs dropped past their deadline, %d steps ran; "
          "answers %s" % (n, what, dropped, steps,
                          ", ".join("%d x %d %r" % (v, s, m) for (s, m), v in answers.most_common())),
          flush=True)
    if must_drop and not reached:
        fails.append("%s: no answer says its program was sent to the executor (every deadline passed "
                     "before it): the deadline leaves the preprocessor too little time" % what)
    if dropped < 1 and must_drop:
        fails.append("%s: no program dropped past its deadline" % what)
    if m2["s1_executor_steps_total"] != m1["s1_executor_steps_total"]:
        fails.append("%s: steps kept running after every deadline passed: %d -> %d" % (
            what, m1["s1_executor_steps_total"], m2["s1_executor_steps_total"]))


def served_at_once(t, body, what, fails):
    t0 = time.time()
    for _ in range(3):
        s, _, raw = t.post(body)
        if s != 200:
            fails.append("%s: HTTP %d %s" % (what, s, raw[:200]))
    print("%s: 3 requests in %.2f s" % (what, time.time() - t0), flush=True)


def part_deadline(t, model, shared, work, fails):
    attack = os.path.join(shared, "findings", "2026-12-01-attack")
    with open(os.path.join(attack, "omnijev_4x255_options.json")) as f:
        big = f.read()
    # OmniJev: 100 fire-and-forget 4x255-option requests with a 3 s deadline. One such program is
    # about a minute of work on this CPU executor (none can finish); one body's preprocessing takes
    # 10-60 ms alone; with a 1.5 s deadline, one run of the full suite (both builds' tests at once)
    # ended with no program counted by the executor (0 dropped, 0 steps, 100 answers 504).
    start(t, model, [], credits=16, timeout_ms=3000)
    before = metrics(t)
    # the clients stay past the 3 s deadline: a client that leaves earlier is cancelled as gone
    # by the frontend (s1_cancelled_total, trio_cancel) and its work never waits for a deadline
    got = fire_and_forget(t, big, 100, hold_s=3.5)
    dropped_unrun(t, before, "4x255-option OmniJev requests", 100, fails, got)
    served_at_once(t, {"state": {"images": [states(1)[0][0]]},
                       "questions": {"q": {"type": "noul", "instructions": "Is it?"}}},
                   "valid OmniJev requests after them", fails)
    for name in ("fe", "pp", "ex"):
        t.kill(name, 15)
    # JEMM: the 1920x1080 image of F6 (a 504 and the work went on)
    j = trio.Trio(t.build, t.shared)
    try:
        jemm = make_jemm(t.build, shared, work)
        with open(os.path.join(attack, "jemm_1920x1080_504.json")) as f:
            wide = f.read()
        # one at a time: the image's decode takes a good part of the deadline in the preprocessor;
        # in the executor its tower alone ran for a minute on this CPU before the deadline checks
        # between the tower's blocks
        start(j, jemm, [], credits=4, timeout_ms=3000)
        before = metrics(j)
        got = collections.Counter()
        for _ in range(2):
            got += fire_and_forget(j, wide, 1)
        dropped_unrun(j, before, "JEMM requests with a 1920x1080 image", 2, fails, got,
                      settle_s=3.0, must_drop=False)
        served_at_once(j, {"state": "s", "questions": {"q": {"type": "choice", "instructions": "Pick",
                                                              "criteria": {"a": "x", "b": "y"}}}},
                       "valid JEMM requests after them", fails)
    finally:
        j.stop(failed=bool(fails))


def part_cancel(t, model, shared, cancel_tool, fails):
    """A 1-question request is not held behind a 4x255-option one; then test_exec_cancel sends
    both programs (recorded by an executor whose 1 KiB snapshot pool refuses each at once) to the
    executor with CANCELs (in flight, and before the program); /metrics counts both."""
    with open(os.path.join(shared, "findings", "2026-12-01-attack", "omnijev_4x255_options.json")) as f:
        big = f.read()
    small = {"state": {"images": [states(1)[0][0]]},
             "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}
    rec = os.path.join(t.tmp, "rec")
    t.model = model
    t.start_frontend(timeout_ms=20000)
    t.client_timeout = 60
    t.start_preprocessor(credits=2)
    start_executor(t, model, ["--snapshot-pool-bytes", "1K"], record=rec)
    # the ordering check's big program: one Choice of 255 keys without texts (255 cheap rows)
    wide = {"state": small["state"], "questions": {"w": {
        "type": "choice", "instructions": "Which one?", "options": [{"key": "k%d" % i}
                                                               for i in range(255)]}}}
    for body in (small, big, wide):
        t.post(body)  # refused: the prefix needs more than the pool; recorded with the program
    names = sorted(f[:8] for f in os.listdir(rec) if f.endswith(".program.msgpack"))
    if names != ["%08d" % i for i in range(3)]:
        fails.append("records %s" % names)
        return
    small_p, big_p, wide_p = (os.path.join(rec, "%08d.program.msgpack" % i) for i in range(3))
    order_dir = os.path.join(t.tmp, "order")  # the wide program first, then the small one
    os.makedirs(order_dir)
    for i, (src, dst) in enumerate(((2, 0), (0, 1))):
        for k in ("program", "result"):
            shutil.copy(os.path.join(rec, "%08d.%s.msgpack" % (src, k)),
                        os.path.join(order_dir, "%08d.%s.msgpack" % (dst, k)))
    start_executor(t, model, [])
    for _ in range(100):  # the preprocessor serves the restarted executor
        if t.post(small)[0] == 200:
            break
        time.sleep(0.1)
    # no head-of-line blocking: a one-question request sent while the 4x255-option one (about a
    # minute of work here) is in flight is answered within a few steps, long before the big one
    done = {}
    th = threading.Thread(target=lambda: done.update(big=t.post(big)[0], t=time.time()))
    t0 = time.time()
    th.start()
    time.sleep(0.5)
    t1 = time.time()
    s, h, _ = t.post(small)
    dt = time.time() - t1
    big_running = "big" not in done
    print("a 1-question request behind the 4x255-option one: HTTP %d in %.2f s, the big one "
          "still in flight: %s (%s)" % (s, dt, big_running, h.get("server-timing")), flush=True)
    if not big_running:
        print("the 4x255-option request: HTTP %s" % done.get("big"), flush=True)
    if s != 200 or not big_running:
        fails.append("a 1-question request behind the 4x255-option one: HTTP %d in %.2f s, the "
                     "big one still in flight: %s" % (s, dt, big_running))
    # the same without timing: a 255-option program and the small one given to one scheduler at
    # once, the big one first; the small one finishes first, after a few steps (its image, prefix
    # and row), while the big one takes many (the recorded results are the 1 KiB pool's refusals:
    # only the order counts)
    r = subprocess.run([t.bin("tools/s1-replay"), order_dir, "--model", model,
                        "--batch", "--order"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    fin = re.findall(r"finished (\d+): record (\d+) \(request [^)]*\) status (-?\d+), (\d+) steps",
                     r.stdout.decode())
    by_rec = {int(rec_n): (int(k), int(st), int(steps)) for k, rec_n, st, steps in fin}
    big_rec, small_rec = 0, 1
    print("one scheduler, the 255-option program submitted first: %s" % ", ".join(
        "record %d finished %d with status %d after %d steps" % ((n,) + by_rec[n])
        for n in sorted(by_rec)), flush=True)
    if len(by_rec) != 2 or by_rec[small_rec][0] != 1 or by_rec[small_rec][1] != 0 or \
            by_rec[small_rec][2] > 4 or by_rec[big_rec][1] != 0 or by_rec[big_rec][2] < 6:
        fails.append("s1-replay --batch --order: %s" % r.stdout.decode()[-1500:])
    before = metrics(t)
    r = subprocess.run([cancel_tool, t.ex_url, big_p, small_p], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    out = r.stdout.decode()
    print(out.strip(), flush=True)
    if r.returncode != 0:
        fails.append("test_exec_cancel: %s" % out[-1500:])
    m = wait_metrics(t, lambda m: m.get("s1_executor_cancelled_total", 0) >=
                     before.get("s1_executor_cancelled_total", 0) + 2)
    n = m.get("s1_executor_cancelled_total", 0) - before.get("s1_executor_cancelled_total", 0)
    print("s1_executor_cancelled_total +%d" % n, flush=True)
    if n != 2:
        fails.append("s1_executor_cancelled_total counted %d cancellations, want 2" % n)
    th.join()
    print("the 4x255-option request: HTTP %s after %.1f s" % (done.get("big"), done["t"] - t0))


def main():
    part, build, shared, tok35 = sys.argv[1:5]
    fix, _ = e2e.fixture()
    work = tempfile.mkdtemp(prefix="s1-sched-", dir="/tmp")
    fails = []
    t = trio.Trio(build, shared)
    try:
        model = e2e.make_model(build, tok35, work, fix)
        if part == "invariance":
            part_invariance(t, model, fails)
        elif part == "cache":
            part_cache(t, model, fails)
        elif part == "deadline":
            part_deadline(t, model, shared, work, fails)
        elif part == "cancel":
            part_cancel(t, model, shared, sys.argv[5], fails)
        else:
            raise SystemExit("unknown part %r" % part)
    finally:
        t.stop(failed=bool(fails))
        shutil.rmtree(work, ignore_errors=True)
    for f in fails[:40]:
        print("FAIL", f)
    print("%s: %s (%d failures)" % (part, "PASS" if not fails else "FAIL", len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
