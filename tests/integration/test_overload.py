"""An executor that holds its most programs (--max-programs) refuses the next one unrun: the
preprocessor tries another executor of the model, and answers 503 overloaded (never 500) when
none has room. (1) One executor holding 1 program, a preprocessor with 3 credits, 3 concurrent
slow requests: each is 200 (identical to its answer alone) or 503 overloaded, at least one 200.
(2) A second executor of the model, also holding 1: 2 concurrent slow requests are both 200."""
import json
import threading
import time

import trio


def slow_request():
    return json.dumps({"state": "a long enough state " * 20,
                       "questions": {"q": {"type": "choice", "instructions": "Pick one option.",
                                           "criteria": {"o%d" % i: "option number %d" % i
                                                        for i in range(30)}}}})


def concurrent(t, body, n):
    out = []

    def run():
        out.append(t.post(body, timeout=300))

    th = [threading.Thread(target=run) for _ in range(n)]
    for x in th:
        x.start()
    for x in th:
        x.join(300)
    assert all(not x.is_alive() for x in th), "a client hung"
    return out


def test(t):
    model = t.make_model()
    urls = ["ipc://%s/ex%d.sock" % (t.tmp, i) for i in range(2)]
    t.start("ex", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                   "--listen", urls[0], "--max-programs", "1"])
    t.start_frontend(queue=16, timeout_ms=240000)
    t.client_timeout = 300
    t.start_pp("pp", urls[:1], [model], credits=3)
    t.wait_health(200)
    body = slow_request()
    s, _, b = t.post(body)
    assert s == 200, (s, b[:300])
    ref = trio.norm_timing(b)
    res = concurrent(t, body, 3)
    kinds = []
    for s, _, b in res:
        if s == 200:
            assert trio.norm_timing(b) == ref, b[:300]
            kinds.append("200")
        else:
            assert s == 503 and json.loads(b)["error"]["type"] == "overloaded", (s, b[:300])
            kinds.append("503 overloaded")
    assert "200" in kinds, kinds
    print("one executor holding 1 program, 3 at once: %s" % ", ".join(sorted(kinds)))
    t.kill("pp", 15)
    t.start("ex2", [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                    "--listen", urls[1], "--max-programs", "1"])
    t.start_pp("pp2", urls, [model], credits=2)
    end = time.time() + 120
    while time.time() < end:  # both executors ready for pp2 (it logs each state change)
        with open(t.logs["pp2"], errors="replace") as f:
            log = f.read()
        if all("executor %s: ready" % u in log for u in urls):
            break
        time.sleep(0.1)
    assert all("executor %s: ready" % u in log for u in urls), log
    res = concurrent(t, body, 2)
    assert [s for s, _, _ in res] == [200, 200], [(s, b[:200]) for s, _, b in res]
    assert all(trio.norm_timing(b) == ref for _, _, b in res)
    print("two executors holding 1 program each, 2 at once: 200, 200")


if __name__ == "__main__":
    trio.main(test)
