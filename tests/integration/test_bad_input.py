"""Bad input on the real trio: every malformed or refused request gets the right status and error
type in the one error shape, and a correct request between any two of them is answered."""
import json
import os
import re
import subprocess
import time

import trio

LONG_STATE = " ".join("word%d" % i for i in range(4000))  # far over max_length=4096 tokens


def q(**kw):
    base = {"type": "choice", "instructions": "Pick.", "criteria": {"a": "A", "b": "B"}}
    base.update(kw)
    return base


def req(questions=None, **top):
    body = {"state": "s", "questions": questions if questions is not None else {"q": q()}}
    body.update(top)
    return json.dumps(body)


CASES = [
    # (name, body bytes or str, content type or None, status, type)
    ("not json", "hello", "application/json", 400, "invalid_json"),
    ("empty body", "", "application/json", 400, "invalid_json"),
    ("truncated", '{"state":', "application/json", 400, "invalid_json"),
    ("duplicate top key", '{"state":"a","state":"b","questions":{}}', "application/json", 400,
     "invalid_json"),
    ("duplicate nested key", '{"state":"a","questions":{"q":{"type":"noul","type":"noul",'
     '"instructions":"i"}}}', "application/json", 400, "invalid_json"),
    ("duplicate escaped key", '{"state":"a","\\u0073tate":"b","questions":{}}',
     "application/json", 400, "invalid_json"),
    ("NaN", '{"state":NaN,"questions":{}}', "application/json", 400, "invalid_json"),
    ("Infinity", '{"state":[Infinity],"questions":{}}', "application/json", 400, "invalid_json"),
    ("-Infinity", '{"state":[-Infinity],"questions":{}}', "application/json", 400,
     "invalid_json"),
    ("lone high surrogate", '{"state":"\\ud800","questions":{}}', "application/json", 400,
     "invalid_json"),
    ("lone low surrogate", '{"state":"\\udc00x","questions":{}}', "application/json", 400,
     "invalid_json"),
    ("nesting 128", '{"state":' + "[" * 127 + "]" * 127 + ',"questions":{}}', "application/json",
     400, "invalid_json"),
    ("trailing garbage", req() + " x", "application/json", 400, "invalid_json"),
    ("trailing comma", '{"state":"a","questions":{},}', "application/json", 400, "invalid_json"),
    ("single quotes", "{'state':'a'}", "application/json", 400, "invalid_json"),
    ("invalid utf-8", b'{"state":"\xff\xfe","questions":{}}', "application/json", 400,
     "invalid_json"),
    ("raw control char", '{"state":"a\x01b","questions":{}}', "application/json", 400,
     "invalid_json"),
    ("leading zero", '{"state":"a","n":01,"questions":{}}', "application/json", 400,
     "invalid_json"),
    ("comment", '{"state":"a", // c\n"questions":{}}', "application/json", 400, "invalid_json"),
    ("body is an array", "[]", "application/json", 422, "invalid_request"),
    ("body is a string", '"x"', "application/json", 422, "invalid_request"),
    ("missing state", json.dumps({"questions": {"q": q()}}), "application/json", 422,
     "invalid_request"),
    ("state null", req(state=None), "application/json", 422, "invalid_request"),
    ("state number", req(state=5), "application/json", 422, "invalid_request"),
    ("missing questions", json.dumps({"state": "s"}), "application/json", 422,
     "invalid_request"),
    ("empty questions", req(questions={}), "application/json", 422, "invalid_request"),
    ("questions array", req(questions=[q()]), "application/json", 422, "invalid_request"),
    ("question not object", req(questions={"q": "choice"}), "application/json", 422,
     "invalid_request"),
    ("unknown type", req(questions={"q": q(type="rank")}), "application/json", 422,
     "invalid_request"),
    ("type missing", req(questions={"q": {"instructions": "i", "criteria": {"a": "x"}}}),
     "application/json", 422, "invalid_request"),
    ("instructions missing", req(questions={"q": {"type": "noul"}}), "application/json", 422,
     "invalid_request"),
    ("instructions number", req(questions={"q": q(instructions=3)}), "application/json", 422,
     "invalid_request"),
    ("choice no options", req(questions={"q": q(criteria={})}), "application/json", 422,
     "invalid_request"),
    ("choice 256 options", req(questions={"q": q(criteria={"k%d" % i: "x" for i in range(256)})}),
     "application/json", 422, "invalid_request"),
    ("choice option number", req(questions={"q": q(criteria={"a": 1})}), "application/json", 422,
     "invalid_request"),
    ("score 1 level", req(questions={"q": q(type="score", criteria=["x"])}), "application/json",
     422, "invalid_request"),
    ("score 11 levels", req(questions={"q": q(type="score", criteria=["x"] * 11)}),
     "application/json", 422, "invalid_request"),
    ("noul half criteria", req(questions={"q": q(type="noul", criteria={"true": "yes"})}),
     "application/json", 422, "invalid_request"),
    ("wrong model", req(model="gpt-4"), "application/json", 422, "invalid_request"),
    ("model not a string", req(model=5), "application/json", 422, "invalid_request"),
    ("oversize prompt", req(state=LONG_STATE), "application/json", 422, "invalid_request"),
    ("text/plain", req(), "text/plain", 415, "unsupported_media_type"),
    ("no content type", req(), None, 415, "unsupported_media_type"),
    ("application/xml", req(), "application/xml", 415, "unsupported_media_type"),
    ("huge body", None, "application/json", 413, "too_large"),
]


DESC = "instructions and descriptions must be text, an object, or an array"
# The exact message of every 4xx that is not invalid_json (whose text gives a byte offset): the
# field first, then the reference's wording (spec/open_jev.md §8.4) or the service's own.
MESSAGES = {
    "body is an array": "body: must be a JSON object",
    "body is a string": "body: must be a JSON object",
    "missing state": "state: request requires state and questions",
    "state null": "state: state must be text, a JSON object, or an array",
    "state number": "state: state must be text, a JSON object, or an array",
    "missing questions": "questions: request requires state and questions",
    "empty questions": "questions: questions must be a nonempty mapping",
    "questions array": "questions: questions must be an object within the server question limit",
    "question not object":
        "questions.q: question IDs must be strings and definitions must be mappings",
    "unknown type": "questions.q.type: question type must be choice, score, or noul",
    "type missing": "questions.q.type: question type must be choice, score, or noul",
    "instructions missing": "questions.q.instructions: " + DESC,
    "instructions number": "questions.q.instructions: " + DESC,
    "choice no options": "questions.q.criteria: Choice requires between 1 and 255 candidates",
    "choice 256 options": "questions.q.criteria: Choice requires between 1 and 255 candidates",
    "choice option number": "questions.q.criteria.a: " + DESC,
    "score 1 level": "questions.q.criteria: Score requires an array of 2 to 10 descriptive levels",
    "score 11 levels":
        "questions.q.criteria: Score requires an array of 2 to 10 descriptive levels",
    "noul half criteria":
        "questions.q.criteria: Noul criteria must contain true and false descriptions",
    "wrong model": None,  # lists the loaded model: built from /v1/models in test()
    "model not a string": "model: must be a string or null",
    # the batch's longest sequence is the first option's (both are as long)
    "oversize prompt": re.compile(r"questions\.q\.criteria\.a: Input length \d+ exceeds "
                                  r"max_length=4096; no silent truncation\Z"),
    "text/plain": "Content-Type: must be application/json",
    "no content type": "Content-Type: must be application/json",
    "application/xml": "Content-Type: must be application/json",
}


def post_oversize(t):
    """Announces a 5 MiB body and sends none of it: the limit is checked while reading, so the
    413 arrives before any body byte."""
    import socket
    s = socket.create_connection(("127.0.0.1", t.port), timeout=30)
    s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (5 << 20))
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 10:
        more = s.recv(65536)
        if not more:
            break
        data += more
        if b"}}" in data:
            break
    s.close()
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    headers = dict(line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:])
    trio.check_answer("POST", "/v1/systemone", status, headers, body)
    return status, headers, body


def head_then_get(t, path):
    """HEAD path, then GET /health pipelined on one connection (the server closes after it). A HEAD
    answer with any body byte would put that byte where the second status line must begin.
    Returns (status, headers, what follows the HEAD answer's headers)."""
    import socket
    s = socket.create_connection(("127.0.0.1", t.port), timeout=30)
    s.sendall(b"HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
    data = b""
    while True:
        more = s.recv(65536)
        if not more:
            break
        data += more
    s.close()
    head, rest = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    fields = (line.decode().split(": ", 1) for line in head.split(b"\r\n")[1:])
    headers = {k.lower(): v for k, v in fields}
    trio.check_answer("HEAD", path, status, headers, b"")  # no body: `rest` is the next answer
    return status, headers, rest


def test(t):
    t.make_model()
    t.start_all(credits=2)
    assert len(CASES) >= 40, len(CASES)
    MESSAGES["wrong model"] = 'model: unknown model "gpt-4"; loaded: %s' % trio.loaded_models(t)
    assert '"%s" (aliases "' % trio.MODEL_ID in MESSAGES["wrong model"], MESSAGES["wrong model"]
    n_ok = 0
    for name, body, ctype, status, etype in CASES:
        headers = {"Content-Type": ctype} if ctype else {}
        headers["Content-Type"] = ctype if ctype else ""
        if not ctype:
            del headers["Content-Type"]
        if body is None:
            s, h, b = post_oversize(t)
        else:
            s, h, b = t.http("POST", "/v1/systemone", body, headers)
        assert s == status, "%s: status %d, want %d: %s" % (name, s, status, b[:300])
        e = json.loads(b)
        assert list(e.keys()) == ["error"] and e["error"]["type"] == etype, (name, e)
        assert isinstance(e["error"]["message"], str) and e["error"]["message"], (name, e)
        want = MESSAGES.get(name)
        assert want is not None or etype in ("invalid_json", "too_large"), name
        if isinstance(want, str):
            assert e["error"]["message"] == want, (name, e["error"]["message"], want)
        elif want is not None:
            assert want.match(e["error"]["message"]), (name, e["error"]["message"])
        assert h.get("x-request-id") and h.get("server-timing"), (name, h)
        assert h.get("content-type") == "application/json", (name, h)
        # the service keeps answering correct requests in between (one sequence each; the full
        # three-question request opens and closes the run)
        body = trio.VALID if n_ok in (0, len(CASES) - 1) else trio.MINI
        s, h, b = t.post(body, headers={"x-request-id": "ok-%d" % n_ok})
        (trio.check_valid_answer if body is trio.VALID else trio.check_mini_answer)(s, h, b)
        assert h["x-request-id"] == "ok-%d" % n_ok
        n_ok += 1
    # issue 16 F4: the 64-bit bounds are values (the attack's open_jev_int64_min_u64_max.json);
    # a wider integer is refused naming its field
    import os
    f = os.path.join(t.shared, "findings", "2026-12-01-attack", "open_jev_int64_min_u64_max.json")
    s, h, b = t.post(open(f, "rb").read())
    assert s == 200 and set(json.loads(b)["answers"]["q"]["probabilities"]) == {"x", "y"}, b[:300]
    n_ok += 1
    s, h, b = t.post('{"state": {"a": [1, -9223372036854775809]}, "questions": {"q": {"type": '
                     '"noul", "instructions": "x"}}}')
    e = json.loads(b)["error"]
    assert s == 422 and e["type"] == "invalid_request" and \
        e["message"].startswith("state.a[1]: integer -9223372036854775809 is outside 64 bits"), b
    # a client that sends its whole oversize body before reading (Python's http.client, httpx)
    # gets the 413 answer, not a reset: the refusal lingers, dropping what it still sends
    import http.client
    for size in (5 << 20, 16 << 20, 64 << 20):
        c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=60)
        body = json.dumps(trio.MINI).encode()
        c.request("POST", "/v1/systemone", body=body + b" " * (size - len(body)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        assert r.status == 413, (size, r.status, data[:300])
        assert json.loads(data)["error"] == {
            "type": "too_large",
            "message": "body: %d bytes; no model here accepts more than %d" % (size, 4 << 20)}, data
        c.close()
    # a chunked upload over the limit is refused while reading, too
    c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=60)
    c.putrequest("POST", "/v1/systemone")
    c.putheader("Content-Type", "application/json")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    chunk = b"x" * (1 << 20)
    try:
        for _ in range(6):
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        c.send(b"0\r\n\r\n")
    except OSError:
        pass
    r = c.getresponse()
    data = r.read()
    trio.check_answer("POST", "/v1/systemone", r.status, dict(r.getheaders()), data)
    assert r.status == 413, r.status
    assert json.loads(data)["error"]["type"] == "too_large"
    c.close()
    # a body of exactly the limit passes both ways (chunked and Content-Length); one byte more is
    # refused both ways with the error shape
    limit = 4 << 20
    exact = json.dumps(trio.MINI).encode()
    exact += b" " * (limit - len(exact))
    for chunked in (True, False):
        for body, want in ((exact, 200), (exact + b" ", 413)):
            c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=60)
            c.putrequest("POST", "/v1/systemone")
            c.putheader("Content-Type", "application/json")
            if chunked:
                c.putheader("Transfer-Encoding", "chunked")
            else:
                c.putheader("Content-Length", str(len(body)))
            c.endheaders()
            try:
                if chunked:
                    for i in range(0, len(body), 1 << 20):
                        part = body[i:i + (1 << 20)]
                        c.send(b"%x\r\n%s\r\n" % (len(part), part))
                    c.send(b"0\r\n\r\n")
                else:
                    c.send(body)
            except OSError:
                pass
            r = c.getresponse()
            data = r.read()
            trio.check_answer("POST", "/v1/systemone", r.status, dict(r.getheaders()), data, body)
            assert r.status == want, (chunked, len(body), r.status, data[:300])
            if want == 200:
                trio.check_mini_answer(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
                n_ok += 1
            else:
                assert json.loads(data)["error"]["type"] == "too_large", data[:300]
            c.close()
    # routes: 405 names the allowed method; answers no executor made still carry the revision
    s, h, b = t.http("GET", "/v1/systemone")
    assert s == 405 and h.get("allow") == "POST", (s, h)
    revision = h.get("x-model-revision")
    assert revision, h
    s, h, b = t.http("POST", "/health")
    assert s == 405 and h.get("allow") == "GET, HEAD", (s, h)
    assert json.loads(b)["error"] == {"type": "method_not_allowed",
                                      "message": "method: POST is not allowed here; use GET, HEAD"}, b
    s, h, b = t.http("POST", "/nope", "{}", {"Content-Type": "application/json"})
    assert s == 404 and json.loads(b)["error"] == {
        "type": "not_found", "message": "path: no such route (see GET /openapi.json)"}, (s, b)
    assert h.get("x-model-revision") == revision, h
    s, h, b = t.http("GET", "/v1/nope")
    assert s == 404 and json.loads(b)["error"]["type"] == "not_found", (s, b)
    for path in ("/health", "/v1/models"):
        s, h, b = t.http("GET", path)
        assert s == 200 and h.get("x-model-revision") == revision, (path, s, h)
    # the metrics counted the refusals by status
    s, _, m = t.http("GET", "/metrics")
    text = m.decode()
    assert 's1_requests_total{status="400"} 19' in text, text[:2000]
    assert 's1_requests_total{status="413"} 7' in text, text[:2000]
    assert 's1_requests_total{status="415"} 3' in text, text[:2000]
    assert 's1_requests_total{status="200"} %d' % n_ok in text, text[:2000]
    # issue 17: wrong paths and methods are counted too (GET /v1/systemone, POST /health; POST
    # /nope, GET /v1/nope)
    assert 's1_requests_total{status="405"} 2' in text, text[:2000]
    assert 's1_requests_total{status="404"} 2' in text, text[:2000]
    # HEAD on the GET routes: the GET answer's status, content type and length, and no body; HEAD
    # elsewhere is refused like any other method, also without a body
    for path, ctype in (("/health", "application/json"), ("/v1/models", "application/json"),
                        ("/metrics", "text/plain; version=0.0.4")):
        gs, gh, gb = t.http("GET", path)
        s, h, rest = head_then_get(t, path)
        assert gs == 200 and s == 200, (path, gs, s)
        assert h.get("content-type") == gh.get("content-type") == ctype, (path, h, gh)
        assert h.get("x-request-id"), (path, h)
        if path != "/metrics":  # the metrics text may change between two requests
            assert int(h["content-length"]) == len(gb) > 0, (path, h, len(gb))
        else:
            assert int(h["content-length"]) > 0 and "transfer-encoding" not in h, (path, h)
        assert rest.startswith(b"HTTP/1.1 200 "), (path, rest[:80])
    s, h, rest = head_then_get(t, "/v1/systemone")
    assert s == 405 and h.get("allow") == "POST", (s, h)
    assert rest.startswith(b"HTTP/1.1 200 "), rest[:80]
    # the body limit comes from the model directory (limits.max_body_bytes, else the family's
    # 4 MiB), is listed by /v1/models and checked before any work; a bad value stops the start
    s, _, b = t.http("GET", "/v1/models")
    assert json.loads(b)["models"][0]["max_body_bytes"] == 4 << 20, b[:400]
    manifest = os.path.join(t.model, "s1-model.json")
    m = json.load(open(manifest))
    m["limits"]["max_body_bytes"] = 1000
    # 16 aliases of 70 bytes: the unknown-model message lists 14 names (1 KiB), then "…"
    aliases = m["open_jev"]["aliases"]
    m["open_jev"]["aliases"] = ["alias-%02d-" % i + "x" * 61 for i in range(16)]
    json.dump(m, open(manifest, "w"))
    # a changed manifest is another directory digest: both processes load it again (a
    # preprocessor sends programs only to executors of a directory it loads)
    t.kill("pp")
    t.kill("ex")
    t.start_executor()
    t.start_preprocessor(name="pp", credits=2)
    end = time.time() + 60
    while time.time() < end:
        s, _, b = t.http("GET", "/v1/models")
        if s == 200 and b'"max_body_bytes":1000' in b:
            break
        time.sleep(0.1)
    assert b'"max_body_bytes":1000' in b, b[:400]
    t.wait_health(200, want="ready")
    s, h, b = t.post(json.dumps(trio.MINI) + " " * 1000)
    e = json.loads(b)["error"]
    assert s == 413 and e["type"] == "too_large" and e["message"].startswith("body:"), b
    s, h, b = t.post(trio.MINI)
    trio.check_mini_answer(s, h, b)
    s, h, b = t.post(req(model="gpt-4"))
    e = json.loads(b)["error"]
    want = 'model: unknown model "gpt-4"; loaded: %s' % trio.loaded_models(t)
    assert s == 422 and e == {"type": "invalid_request", "message": want}, (s, e, want)
    assert want.endswith('"alias-12-%s", …)' % ("x" * 61)), want
    assert len(want.split("; loaded: ", 1)[1].encode()) <= 1024 + len(", …)".encode()), want
    m["open_jev"]["aliases"] = aliases
    m["limits"]["max_body_bytes"] = "big"
    json.dump(m, open(manifest, "w"))
    r = subprocess.run([t.bin("preprocessor/s1-preprocessor"), "--frontend", t.fe_url,
                        "--executor", t.ex_url, "--model", t.model], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    assert r.returncode == 1 and b"limits.max_body_bytes" in r.stdout, r.stdout[-500:]
    print("%d refused requests, %d correct ones answered in between" % (len(CASES) + 1, n_ok))


if __name__ == "__main__":
    trio.main(test)
