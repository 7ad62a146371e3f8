"""Clients that go away (finding F1 of ../shared/findings/2026-12-01-attack, fire_and_forget.py, on
the tiny Open-Jev trio): (1) 100 fire-and-forget requests (sent, socket closed at once), then
valid requests: the first is answered within its own time plus the dead programs already at the
executor (at most one per credit) plus 1 s, identical to its answer alone, none of the next ones
is a 503, all 100 are counted as 499 in /metrics (s1_cancelled_total by stage), and the executor
received at most `credits` of them. (2) An HTTP/1 client that leaves while its (slower) request
is at the executor is counted as cancelled in flight (HTTP/2 is not served: HTTP/1.1 only), and
the service answers the next request correctly (under ASan: no use of the freed request)."""
import glob
import json
import os
import time

import trio

CREDITS = 2


def slow_request(n_options=30):
    return json.dumps({"state": "a long enough state " * 20,
                       "questions": {"q": {"type": "choice", "instructions": "Pick one option.",
                                           "criteria": {"o%d" % i: "option number %d" % i
                                                        for i in range(n_options)}}}})


def raw_post(port, body):
    return (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def n_cancelled(t):
    return sum(t.metric('s1_cancelled_total{stage="%s"}' % s)
               for s in ("admission", "queue", "in_flight"))


def wait_until(fn, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if fn():
            return True
        time.sleep(0.05)
    return False


def test(t):
    t.make_model()
    rec = os.path.join(t.tmp, "rec")
    t.start_executor(record=rec)
    t.start_frontend(queue=64, timeout_ms=120000)
    t.client_timeout = 150
    t.start_preprocessor(credits=CREDITS)
    t.wait_health(200)
    good = json.dumps(trio.VALID)
    slow = slow_request().encode()
    t0 = time.time()
    s, h, b = t.post(good)
    base = time.time() - t0
    trio.check_valid_answer(s, h, b)
    ref = trio.norm_timing(b)
    t0 = time.time()
    s, _, b = t.post(slow)
    slow_s = time.time() - t0
    assert s == 200, (s, b[:300])
    n_programs = len(glob.glob(os.path.join(rec, "*.program.msgpack")))

    # (1) F1: 100 fire-and-forget, then valid requests
    for _ in range(100):
        trio.send_and_leave(t.port, raw_post(t.port, good.encode()))
    t0 = time.time()
    s, h, b = t.post(good)
    lat = time.time() - t0
    assert s == 200 and trio.norm_timing(b) == ref, (s, b[:300])
    bound = base + CREDITS * base + 1.0
    assert lat <= bound, "first request after 100 fire-and-forget took %.2f s (bound %.2f)" % (
        lat, bound)
    for _ in range(5):
        s, _, b = t.post(good)
        assert s == 200 and trio.norm_timing(b) == ref, (s, b[:300])
    assert wait_until(lambda: t.metric('s1_requests_total{status="499"}') == 100), \
        t.http("GET", "/metrics")[2].decode()
    assert n_cancelled(t) == 100
    assert t.metric('s1_requests_total{status="503"}') == 0
    # the dead programs that reached the executor: at most one per credit
    wait_until(lambda: t.metric("s1_in_flight") == 0)
    dead = len(glob.glob(os.path.join(rec, "*.program.msgpack"))) - n_programs - 6
    assert 0 <= dead <= CREDITS, dead
    print("F1: 100 fire-and-forget (%.2f s each alone): next answer in %.2f s (bound %.2f), "
          "identical; 0 x 503; 100 x 499 (admission %d, queue %d, in flight %d); %d reached the "
          "executor" % (base, lat, bound, t.metric('s1_cancelled_total{stage="admission"}'),
                        t.metric('s1_cancelled_total{stage="queue"}'),
                        t.metric('s1_cancelled_total{stage="in_flight"}'), dead))

    # (2) leaving mid-request
    before = t.metric('s1_cancelled_total{stage="in_flight"}')
    c = trio.send_and_leave(t.port, raw_post(t.port, slow), keep=True)
    assert wait_until(lambda: t.metric("s1_in_flight") == 1, 10)
    c.close()
    assert wait_until(lambda: t.metric('s1_cancelled_total{stage="in_flight"}') == before + 1, 10)
    assert wait_until(lambda: t.metric("s1_in_flight") == 0, 10)
    # HTTP/2 is not served (fe_http1: HTTP/1.1 only, no h2c): an HTTP/1 client is the only kind
    s, _, b = t.post(good)
    assert s == 200 and trio.norm_timing(b) == ref, (s, b[:300])
    assert t.procs["fe"].poll() is None, "the frontend exited"
    print("left mid-request (%.2f s requests): HTTP/1 counted as cancelled in flight; "
          "service answers" % slow_s)


if __name__ == "__main__":
    trio.main(test)
