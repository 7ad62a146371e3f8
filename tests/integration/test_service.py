"""Service behaviour on the real trio: /health (starting before a preprocessor connects, ready with
the model ids after), /v1/models, request id echo and generation, model aliases, the headers of
wire.md, /metrics counters and histograms, and SIGTERM: admission stops, requests in flight are
answered, the frontend exits 0."""
import json
import re
import signal
import threading
import time

import trio


def test(t):
    t.make_model()
    t.start_executor()
    t.start_frontend()
    h = t.wait_health(503, want="starting")
    assert h["reason"] == "no preprocessor connected", h
    s, _, b = t.post(trio.VALID)
    assert s == 503 and json.loads(b)["error"]["type"] == "not_ready", (s, b)
    t.start_preprocessor(credits=2)
    h = t.wait_health(200)
    assert h == {"status": "ready", "models": [trio.MODEL_ID]}, h
    s, _, b = t.http("GET", "/v1/models")
    m = json.loads(b)["models"]
    assert s == 200 and len(m) == 1 and m[0]["id"] == trio.MODEL_ID, m
    assert m[0]["aliases"] == ["open-jev", "jev-latest"] and m[0]["family"] == "open_jev", m

    s, h1, b1 = t.post(trio.VALID, headers={"x-request-id": "client-id-42"})
    a1 = trio.check_valid_answer(s, h1, b1)
    assert h1["x-request-id"] == "client-id-42"
    assert h1["cache-control"] == "no-store" and h1["x-content-type-options"] == "nosniff", h1
    timing = h1["server-timing"]
    m = re.fullmatch(r"queue;dur=[0-9.]+, preprocess;dur=[0-9.]+, execute;dur=([0-9.]+), "
                     r"finish;dur=[0-9.]+, ex-queue;dur=([0-9.]+), vision;dur=([0-9.]+), "
                     r"prefix;dur=([0-9.]+), rows;dur=([0-9.]+), heads;dur=([0-9.]+), "
                     r"ex-wait;dur=([0-9.]+), numerics;desc=fp32", timing)
    assert m, timing
    # the executor's parts fit in its round trip; this request ran rows and a head
    ex = [float(x) for x in m.groups()]
    assert sum(ex[1:]) <= ex[0] + 0.01 and ex[4] > 0 and ex[5] > 0, timing
    s, h2, b2 = t.post(trio.VALID)
    trio.check_valid_answer(s, h2, b2)
    s, h3, b3 = t.post(trio.VALID)
    assert h2["x-request-id"] != h3["x-request-id"] and len(h2["x-request-id"]) >= 8
    for alias in ("open-jev", "jev-latest", trio.MODEL_ID, None):
        body = dict(trio.VALID, model=alias)
        s, h, b = t.post(body)
        a = trio.check_valid_answer(s, h, b)
        assert a["answers"] == a1["answers"], alias  # same model, same numbers
    s, h, b = t.post(trio.VALID, headers={"Content-Type": "application/json; charset=utf-8"})
    trio.check_valid_answer(s, h, b)

    s, hm, m = t.http("GET", "/metrics")
    text = m.decode()
    assert s == 200 and hm["content-type"].startswith("text/plain")
    assert 's1_requests_total{status="200"} 8' in text, text
    assert 's1_requests_total{status="503"} 1' in text, text
    assert "s1_decisions_total 24" in text, text  # 8 answers x 3 questions
    for stage in ("queue", "preprocess", "execute", "total"):
        assert 's1_%s_seconds_bucket{le="+Inf"} 8' % stage in text, (stage, text)
    tokens = int(re.search(r"^s1_tokens_total (\d+)$", text, re.M).group(1))
    assert tokens == 8 * a1["usage"]["input_tokens"], (tokens, a1["usage"])
    assert "s1_queue_depth 0" in text and "s1_preprocessors 1" in text
    assert "s1_preprocessors_ready 1" in text

    # SIGTERM drains: requests already admitted are answered, then the process exits 0
    done = []
    def run(i):
        done.append(t.post(trio.VALID, headers={"x-request-id": "drain-%d" % i}))
    th = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for x in th:
        x.start()
    time.sleep(0.05)
    t.procs["fe"].send_signal(signal.SIGTERM)
    for x in th:
        x.join(120)
    rc = t.procs["fe"].wait(30)
    assert rc == 0, rc
    assert len(done) == 4
    for s, h, b in done:
        assert s in (200, 503), (s, b)
        if s == 503:
            assert json.loads(b)["error"]["type"] == "unavailable"
    assert sum(1 for s, _, _ in done if s == 200) >= 1
    try:
        t.http("GET", "/health", timeout=2)
        raise AssertionError("the frontend still accepts connections after SIGTERM")
    except OSError:
        pass
    print("health, models, ids, aliases, headers, metrics, SIGTERM drain: %d/4 answered 200"
          % sum(1 for s, _, _ in done if s == 200))


if __name__ == "__main__":
    trio.main(test)
