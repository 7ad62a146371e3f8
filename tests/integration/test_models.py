"""Several models behind one frontend, routed by model: the tiny Open-Jev directory of trio.py on
two executors and the demo OmniJev directory (with its images) on a third, two preprocessors that
load both and dial all three. (1) /health and /v1/models list both models; a preprocessor sends a
program only to an executor of its model (OmniJev programs never reach the Open-Jev executors,
whose recorded programs are all Open-Jev's) and the two Open-Jev executors share the load.
(2) 16 concurrent clients send 48 requests of both models: every answer is byte-identical (timing
fields aside) to the same request sent alone first. (3) kill -9 one Open-Jev executor while long
requests run on both: the ones it held fail over to the other Open-Jev executor (the preprocessor
logs it), every answer is 200 and identical to the answer alone, each request is answered once,
none hangs, and the service goes on with the executor that is left. (4) A preprocessor that does
not load OmniJev, dialling only the OmniJev executor, sees that executor as unavailable (logged
with the reason), offers no credit, and the others serve on."""
import glob
import json
import os
import random
import signal
import threading
import time

import trio

HERE = os.path.dirname(os.path.abspath(__file__))
OMNI_EXAMPLES = os.path.join(HERE, "..", "..", "recipe", "omnijev", "examples")


def open_jev_requests():
    """Distinct Open-Jev requests: 1 to 4 questions, 2 to 40 options, states of varied length."""
    rng = random.Random(14)
    out = []
    for k in range(8):
        qs = {}
        for j in range(1 + k % 4):
            kind = ("choice", "score", "noul")[(k + j) % 3]
            q = {"type": kind, "instructions": "Question %d of request %d?" % (j, k)}
            if kind == "choice":
                n = rng.choice([2, 3, 5, 8, 13, 40])
                q["criteria"] = {"o%d" % i: "option %d is %s" % (i, "x" * (i % 7)) for i in range(n)}
            elif kind == "score":
                q["criteria"] = ["low", "mid", "high"][: 2 + (k % 2)]
            qs["q%d" % j] = q
        state = {"case": k, "notes": ["note %d" % i for i in range(k)], "text": "word " * (5 * k)}
        out.append(json.dumps({"model": "open-jev", "state": state, "questions": qs}))
    return out


def long_open_jev(k):
    """A request of 60 options: long enough on the CPU to be in flight when an executor dies."""
    return json.dumps({"model": "open-jev", "state": "a long state for a long request %d " % k * 8,
                       "questions": {"q": {"type": "choice", "instructions": "Pick one.",
                                           "criteria": {"o%d" % i: "option number %d" % i
                                                        for i in range(60)}}}})


def post_all(t, bodies, n_clients):
    """n_clients threads send the bodies (shared queue); returns [(index, status, body)]."""
    work = list(enumerate(bodies))
    lock = threading.Lock()
    results = []

    def client():
        while True:
            with lock:
                if not work:
                    return
                i, body = work.pop()
            try:
                s, _, b = t.post(body, timeout=300)
            except OSError as e:
                s, b = -1, str(e).encode()
            with lock:
                results.append((i, s, b))

    th = [threading.Thread(target=client) for _ in range(n_clients)]
    for x in th:
        x.start()
    return th, results


def recorded_models(rec):
    """The model ids of the programs an executor recorded (s1-executor --record)."""
    ids = []
    for f in sorted(glob.glob(os.path.join(rec, "*.program.msgpack"))):
        with open(f, "rb") as fh:
            data = fh.read()
        ids.append(b"tinnel123/OmniJev" in data)
    return ids


def test(t):
    oj = t.make_model()
    omni = t.make_demo_model("omnijev")
    urls = {"ex": "ipc://%s/ex.sock" % t.tmp, "exb": "ipc://%s/exb.sock" % t.tmp,
            "exo": "ipc://%s/exo.sock" % t.tmp}
    rec = {n: os.path.join(t.tmp, "rec-" + n) for n in urls}
    t.start_ex("ex", oj, urls["ex"], record=rec["ex"])
    t.start_ex("exb", oj, urls["exb"], record=rec["exb"])
    t.start_ex("exo", omni, urls["exo"])
    t.start_frontend(queue=64, timeout_ms=240000)
    t.client_timeout = 300
    for name in ("pp", "pp2"):
        t.start_pp(name, list(urls.values()), [oj, omni], credits=4)
    t.wait_health(200, want="ready", timeout=180)
    t.wait_metric("s1_preprocessors_ready 2")
    # "ready" comes with the first model a preprocessor reports ready; a preprocessor's first
    # probe can find an executor not yet connected (CI 2026-12-02: health listed OmniJev alone),
    # so both models must be listed within 30 s of both preprocessors being ready
    want_models = sorted([trio.MODEL_ID, "tinnel123/OmniJev"])
    end = time.time() + 30
    while True:
        h = t.wait_health(200, want="ready", timeout=30)
        if sorted(h["models"]) == want_models or time.time() > end:
            break
        time.sleep(0.1)
    assert sorted(h["models"]) == want_models, h
    s, _, b = t.http("GET", "/v1/models")
    fams = sorted(m["family"] for m in json.loads(b)["models"])
    assert s == 200 and fams == ["omnijev", "open_jev"], b
    # issue 17: with two models, a request must name one; a wrong name is answered with the
    # loaded ids and aliases of both, in load order (the models' list of /v1/models)
    names = trio.loaded_models(t)
    assert names.startswith('"%s" (aliases "' % trio.MODEL_ID) and \
        '"tinnel123/OmniJev"' in names, names
    for body, want in (({"state": "s", "questions": {}}, "model: required, 2 models are loaded: "),
                       ({"model": "nope", "state": "s", "questions": {}},
                        'model: unknown model "nope"; loaded: ')):
        s, _, b = t.post(json.dumps(body))
        assert s == 422 and json.loads(b)["error"] == {"type": "invalid_request",
                                                       "message": want + names}, (s, b, names)

    # (2) the reference: each request alone, in turn
    omni_bodies = []
    for f in [os.path.join(OMNI_EXAMPLES, n) for n in ("noul.json", "four_questions.json")]:
        with open(f, "rb") as fh:
            omni_bodies.append(fh.read())
    distinct = open_jev_requests() + omni_bodies
    ref = []
    for body in distinct:
        s, hd, b = t.post(body)
        assert s == 200, (s, b[:300])
        ref.append(trio.norm_timing(b))
    # 48 requests (each distinct one 3 times, shuffled) from 16 clients at once
    order = list(range(len(distinct))) * 5
    random.Random(7).shuffle(order)
    order = order[:48]
    th, results = post_all(t, [distinct[i] for i in order], 16)
    for x in th:
        x.join(600)
    assert all(not x.is_alive() for x in th), "a client hung"
    assert len(results) == 48, len(results)
    for i, s, b in results:
        assert s == 200, (s, b[:300])
        assert trio.norm_timing(b) == ref[order[i]], (order[i], b[:300], ref[order[i]][:300])
    # (1) routing: the Open-Jev executors saw only Open-Jev programs, and both of them some
    n_a, n_b = (recorded_models(rec[n]) for n in ("ex", "exb"))
    assert not any(n_a) and not any(n_b), "an OmniJev program reached an Open-Jev executor"
    assert len(n_a) >= 4 and len(n_b) >= 4, (len(n_a), len(n_b))
    print("routing: Open-Jev executors ran %d and %d programs, all Open-Jev; 48/48 concurrent "
          "answers identical to the answers alone" % (len(n_a), len(n_b)))

    # (3) kill -9 one Open-Jev executor with long requests in flight on both
    ref_long = []
    for k in range(2):
        s, _, b = t.post(long_open_jev(k))
        assert s == 200, (s, b[:300])
        ref_long.append(trio.norm_timing(b))
    longs = [long_open_jev(k % 2) for k in range(4)]
    ref_long = [ref_long[k % 2] for k in range(4)]
    n200 = t.metric('s1_requests_total{status="200"}')
    th, results = post_all(t, longs + [distinct[0]] * 8, 12)
    t0 = time.time()
    while t.metric("s1_in_flight") < 4 and time.time() - t0 < 30:
        time.sleep(0.02)
    time.sleep(0.2)
    t.kill("ex", signal.SIGKILL)
    for x in th:
        x.join(300)
    assert all(not x.is_alive() for x in th), "a client hung after the executor died"
    assert len(results) == 12, len(results)
    for i, s, b in results:
        want = ref_long[i] if i < 4 else ref[0]
        assert s == 200 and trio.norm_timing(b) == want, (i, s, b[:300])
    # answered once each: exactly 12 more 200s, and no other status
    assert t.metric('s1_requests_total{status="200"}') == n200 + 12
    logs = ""
    for name in ("pp", "pp2"):
        with open(t.logs[name], errors="replace") as f:
            logs += f.read()
    n_fo = logs.count("failing over to executor " + urls["exb"])
    assert n_fo >= 1, "no request failed over:\n" + logs[-3000:]
    # the service goes on with the executor left
    for body in distinct[:3] + omni_bodies[:1]:
        s, _, b = t.post(body)
        assert s == 200 and trio.norm_timing(b) == ref[distinct.index(body)], (s, b[:300])
    print("kill -9 of one Open-Jev executor: %d request(s) failed over, 12/12 answers identical, "
          "each answered once; service continues" % n_fo)

    # a preprocessor that does not load OmniJev, dialling only the OmniJev executor: that
    # executor is unavailable to it (logged with the reason), it offers no credit, nothing changes
    t.start_pp("ppx", [urls["exo"]], [oj], credits=2)
    t.wait_metric("s1_preprocessors 3")
    end = time.time() + 30
    why = "executor %s serves model tinnel123/OmniJev" % urls["exo"]
    while time.time() < end and why not in open(t.logs["ppx"], errors="replace").read():
        time.sleep(0.1)
    with open(t.logs["ppx"], errors="replace") as f:
        log = f.read()
    assert why in log and "which this preprocessor does not load" in log, log
    assert t.metric("s1_preprocessors_ready") == 2
    for body in (distinct[1], omni_bodies[1]):
        s, _, b = t.post(body)
        assert s == 200 and trio.norm_timing(b) == ref[distinct.index(body)], (s, b[:300])
    print("a preprocessor without OmniJev: its OmniJev executor is unavailable to it (logged), "
          "it serves nothing, the others go on")


if __name__ == "__main__":
    trio.main(test)
