"""HTTP/1.1 framing on the real trio, over raw sockets (issue 16: F3 request smuggling, F2 h2o's own
text/plain errors, F9 the malformed chunk that hung 10 s). Every .http input of
../shared/findings/2026-12-01-attack/ and every framing variant of RFC 9112 §6.3 gets one answer
in the error shape of spec/wire.md with x-request-id, and the connection closes at once; nothing
after a refused head is parsed as another request. Valid framing (Content-Length, chunked with
extensions and trailers, keep-alive, pipelining, 100-continue) is answered exactly as a plain
request is."""
import glob
import json
import os
import re
import socket
import sys
import time

import trio

POST = b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
MINI = json.dumps(trio.MINI).encode()


def read_responses(s, deadline_s):
    """Reads until EOF or the deadline; returns (responses, closed, seconds). A response is
    (status, headers, body) with its body read by Content-Length."""
    data, closed, t0 = b"", False, time.time()
    s.settimeout(0.2)
    while time.time() - t0 < deadline_s:
        try:
            more = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            closed = True
            break
        if not more:
            closed = True
            break
        data += more
    elapsed = time.time() - t0
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError("a partial response: %r" % data[:300])
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.decode().split(": ", 1)
            headers[k.lower()] = v
        n = int(headers.get("content-length", "0")) if status != 100 else 0
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out, closed, elapsed


def request_lines(data):
    """(method, path) of each request line the client sent that names a route, in order."""
    out = []
    for m in re.finditer(rb"(?:^|\n)([A-Z]+) (/[^ \r\n]*) HTTP/1\.[01]\r?\n", data):
        out.append((m.group(1).decode(), m.group(2).decode()))
    return out


def exchange(t, data, pieces=None, pause_s=0.0, deadline_s=5.0):
    """Sends data (whole, or as the given pieces with pauses) on a new connection. Every answer
    to a request line naming a route is checked against frontend/openapi.json."""
    s = socket.create_connection(("127.0.0.1", t.port), timeout=30)
    try:
        for p in pieces or [data]:
            s.sendall(p)
            if pause_s:
                time.sleep(pause_s)
        got = read_responses(s, deadline_s)
    finally:
        s.close()
    lines = request_lines(b"".join(pieces or [data]))
    answers = [r for r in got[0] if r[0] != 100]
    for (method, path), (status, headers, body) in zip(lines, answers):
        trio.check_answer(method, path, status, headers, body)
    return got


def check_refused(name, got, status, etype, request_id=None):
    """Exactly one answer, `status` in the error shape, and the connection closed at once."""
    responses, closed, elapsed = got
    statuses = [r[0] for r in responses if r[0] != 100]
    assert statuses == [status], "%s: answers %s, want [%d]: %r" % (name, statuses, status,
                                                                     responses)
    _, h, b = [r for r in responses if r[0] != 100][0]
    assert h.get("content-type") == "application/json", (name, h)
    assert h.get("x-request-id"), (name, h)
    if request_id:
        assert h["x-request-id"] == request_id, (name, h)
    assert h.get("connection") == "close", (name, h)
    e = json.loads(b)
    assert list(e) == ["error"] and list(e["error"]) == ["type", "message"], (name, e)
    assert e["error"]["type"] == etype and e["error"]["message"], (name, e)
    assert closed and elapsed < 2.0, "%s: closed %s after %.2f s" % (name, closed, elapsed)
    return e["error"]["message"]


def variants():
    """(name, bytes, status, error type) of framing the service refuses."""
    return [
        ("Content-Length twice, equal", POST + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
         400, "bad_request"),
        ("Content-Length N, N", POST + b"Content-Length: 2, 2\r\n\r\n{}", 400, "bad_request"),
        ("Content-Length and Transfer-Encoding",
         POST + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
         "bad_request"),
        ("Transfer-Encoding and Content-Length",
         POST + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400,
         "bad_request"),
        ("Transfer-Encoding twice",
         POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
         "bad_request"),
        ("Transfer-Encoding gzip, chunked", POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n", 501,
         "not_implemented"),
        ("Transfer-Encoding chunked, identity",
         POST + b"Transfer-Encoding: chunked, identity\r\n\r\n", 400, "bad_request"),
        ("obs-fold", POST + b"Content-Length: 2\r\nX-A: 1\r\n 2\r\n\r\n{}", 400, "bad_request"),
        ("obs-fold hiding a Content-Length",
         POST + b"X-A: 1\r\n\tContent-Length: 40\r\nContent-Length: 2\r\n\r\n{}", 400,
         "bad_request"),
        ("bare LF", b"POST /v1/systemone HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}", 400,
         "bad_request"),
        ("no Host", b"POST /v1/systemone HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400,
         "bad_request"),
        ("bad request line", b"POST /v1/systemone\r\nHost: x\r\n\r\n", 400, "bad_request"),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "bad_request"),
        ("chunk longer than its size",
         POST + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{}\r\n0\r\n\r\n", 400, "bad_request"),
        ("chunk size 17 hex digits",
         POST + b"Transfer-Encoding: chunked\r\n\r\n00000000000000002\r\n{}\r\n0\r\n\r\n", 400,
         "bad_request"),
        ("head over 32 KiB", POST + b"X-Big: " + b"a" * 40000 + b"\r\n\r\n", 431, "too_large"),
    ]


def test(t):
    t.make_model()
    t.start_all(credits=2)
    s, h, want = t.post(MINI)
    trio.check_mini_answer(s, h, want)
    want_answer = json.loads(want)["answers"]

    # every .http input of the attack (F2, F3, F9)
    files = sorted(glob.glob(os.path.join(t.shared, "findings", "2026-12-01-attack", "*.http")))
    assert len(files) == 5, files
    for f in files:
        data = open(f, "rb").read()
        msg = check_refused(os.path.basename(f), exchange(t, data), 400, "bad_request")
        print("%-45s 400 %s" % (os.path.basename(f), msg))

    # the smuggling script's exact bytes: the body's tail is never answered as GET /metrics
    inner = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b"{}" + inner
    data = POST + b"Content-Length: 2\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    check_refused("conflicting_content_length_smuggle.py", exchange(t, data), 400, "bad_request")

    # the variants, whole and byte by byte (the framer reads what the socket delivers)
    for name, data, status, etype in variants():
        check_refused(name, exchange(t, data), status, etype)
        if len(data) < 400:
            check_refused(name + " (byte by byte)",
                          exchange(t, data, [data[i:i + 1] for i in range(len(data))]), status,
                          etype)

    # the client's x-request-id is echoed on a refusal
    data = POST + b"x-request-id: smuggle-1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
    check_refused("request id", exchange(t, data), 400, "bad_request", request_id="smuggle-1")

    # valid framing: Content-Length, chunked with an extension and a trailer, in pieces, with
    # 100-continue: the same answer as the plain request
    chunked = (POST + b"Transfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\n"
               b"X-Trailer: t\r\n\r\n" % (10, MINI[:10], len(MINI) - 10, MINI[10:]))
    plain = POST + b"Content-Length: %d\r\n\r\n%s" % (len(MINI), MINI)
    expect = POST + b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(MINI)
    for name, pieces in (("content-length", [plain]), ("chunked", [chunked]),
                         ("chunked in pieces", [chunked[i:i + 7] for i in range(0, len(chunked), 7)]),
                         ("100-continue", [expect, MINI])):
        got, closed, _ = exchange(t, None, pieces=pieces + [b"GET /health HTTP/1.1\r\nHost: x\r\n"
                                                           b"Connection: close\r\n\r\n"],
                                  pause_s=0.05)
        statuses = [r[0] for r in got]
        want_statuses = ([100] if name == "100-continue" else []) + [200, 200]
        assert statuses == want_statuses, (name, statuses, got)
        answer = [r for r in got if r[0] == 200][0]
        assert json.loads(answer[2])["answers"] == want_answer, (name, answer[2][:300])
        assert closed, name

    # keep-alive and pipelining: three requests in one write, then a refused one on the same
    # connection after their answers; and a refused request pipelined behind a valid one closes the
    # connection without answering either (the valid one was never started)
    three = plain + chunked + plain
    got, closed, _ = exchange(t, None, pieces=[three, POST + b"Content-Length: 1\r\n"
                                               b"Content-Length: 2\r\n\r\n"], pause_s=1.0)
    assert [r[0] for r in got] == [200, 200, 200, 400] and closed, [(r[0], r[2][:80]) for r in got]
    for r in got[:3]:
        assert json.loads(r[2])["answers"] == want_answer
    got, closed, elapsed = exchange(t, plain + POST + b"Content-Length: 2, 2\r\n\r\n{}")
    assert got == [] and closed and elapsed < 2.0, (got, closed, elapsed)

    # h2o's own answers have the shape too: an Expect it does not know (417), a body over the limit
    # announced by Content-Length (413), a path outside every route (404)
    check_refused("Expect: other", exchange(t, POST + b"Content-Length: 2\r\nExpect: x\r\n\r\n{}"),
                  417, "expectation_failed")
    check_refused("Content-Length over the limit",
                  exchange(t, POST + b"Content-Length: %d\r\n\r\n" % (64 << 20)), 413, "too_large")
    got, _, _ = exchange(t, b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert [r[0] for r in got] == [404], got
    assert json.loads(got[0][2])["error"]["type"] == "not_found" and got[0][1].get("x-request-id")

    # the service still answers, and counted every refusal
    s, h, b = t.post(MINI)
    trio.check_mini_answer(s, h, b)
    s, _, m = t.http("GET", "/metrics")
    assert 's1_requests_total{status="400"}' in m.decode(), m.decode()[:1500]
    print("%d attack inputs and %d framing variants refused; valid framing answered" %
          (len(files) + 1, len(variants())))


if __name__ == "__main__":
    trio.main(test)
