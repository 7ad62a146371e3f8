#!/usr/bin/env python3
"""Two s1-frontend binaries, each alone (no preprocessor), answer the same raw requests byte for
byte: every path x method x header variant (origins, tokens, preflights, request ids), content
types, Expect, an oversize body, refused framing, then /metrics after the same history; in two
configurations (default; --auth-token-file and --allow-origin). The Date header and generated
request ids are masked. A tool for refactors of frontend/ (the split of main.c was checked with
it against the binary of the commit before), not a CI test: it needs the old binary.
usage: compare_frontends.py OLD_S1_FRONTEND NEW_S1_FRONTEND   (exit 1 when any answer differs)"""
import os, re, shutil, socket, subprocess, sys, tempfile, time
if len(sys.argv) != 3:
    sys.exit(__doc__)
OLD, NEW = sys.argv[1], sys.argv[2]
TOKEN = "diff-token-0123456789abcdef"

def start(binary, port, extra):
    d = tempfile.mkdtemp(prefix="fediff-"); os.chmod(d, 0o700)
    tf = os.path.join(d, "token"); open(tf, "w").write(TOKEN + "\n"); os.chmod(tf, 0o600)
    args = [binary, "--listen", "127.0.0.1:%d" % port, "--pool", "ipc://%s/fe.sock" % d]
    args += [a.replace("TOKENFILE", tf) for a in extra]
    p = subprocess.Popen(args, stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return p, d
        except OSError: time.sleep(0.05)
    raise SystemExit("no start " + binary)

def raw(port, data):
    s = socket.create_connection(("127.0.0.1", port), 5); s.settimeout(5)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
    except (socket.timeout, ConnectionResetError): pass
    s.close()
    out = re.sub(rb"\r\n[Dd]ate: [^\r]*", b"\r\ndate: X", out)
    out = re.sub(rb"x-request-id: [0-9a-f]{16}-\d+", b"x-request-id: GEN", out)
    return out

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get", "TRACE"]
PATHS = ["/v1/systemone", "/health", "/v1/models", "/metrics", "/openapi.json", "/", "/nope",
         "/v1", "/health/", "/index.html", "/openapi.json?x=1", "/health?probe", "/v1//models",
         "/%68ealth", "/./health", "/v1/../health"]
HDRS = ["", "Content-Type: application/json\r\n", "Origin: http://ok.example\r\n",
        "Origin: http://other.example\r\n", "Authorization: Bearer %s\r\n" % TOKEN,
        "Authorization: Bearer wrong-token-000000000\r\n",
        "Origin: http://ok.example\r\nAccess-Control-Request-Method: POST\r\n",
        "Origin: http://127.0.0.1:%(port)d\r\n", "x-request-id: bad id\r\n"]

def cases():
    for m in METHODS:
        for p in PATHS:
            for h in HDRS:
                body = b"{}" if m in ("POST", "PUT", "PATCH") else None
                yield m, p, h, body
    yield "POST", "/v1/systemone", "Content-Type: application/json\r\nx-model: m\r\n", b"{}"
    yield "POST", "/v1/systemone", "Content-Type: text/plain\r\n", b"{}"
    yield "POST", "/v1/systemone", "Content-Type: application/json; charset=utf-8\r\n", b"{}"
    yield "POST", "/v1/systemone", "Content-Type: application/json\r\nExpect: foo\r\n", b"{}"
    yield "POST", "/v1/systemone", "Content-Type: application/json\r\n", b"x" * (5 << 20)

def request(port, m, p, h, body):
    h = h % {"port": port} if "%(port)" in h else h
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\nx-request-id: r1\r\n%s" % (m, p, port, h)
    if "x-request-id: bad" in h: head = head.replace("x-request-id: r1\r\n", "")
    data = head.encode()
    data += b"Content-Length: %d\r\n\r\n" % len(body) + body if body is not None else b"\r\n"
    return raw(port, data)

FRAMING = [b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
           b"GET /health HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
           b"GET /health HTTP/1.1\r\n\r\n",
           b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\nx-request-id: f1\r\n\r\n{}",
           b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
           b"GET /health HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 40000 + b"\r\n\r\n"]

total = diffs = 0
for conf in ([], ["--auth-token-file", "TOKENFILE", "--allow-origin", "http://ok.example"]):
    (po, do), (pn, dn) = start(OLD, 18101, conf), start(NEW, 18102, conf)
    try:
        for c in cases():
            a = request(18101, *c).replace(b"18101", b"PORT")
            b = request(18102, *c).replace(b"18102", b"PORT")
            total += 1
            if a != b:
                diffs += 1
                if diffs < 5: print("DIFF", conf, c[:3], "\nold:", a[:600], "\nnew:", b[:600])
        for f in FRAMING:
            a, b = raw(18101, f), raw(18102, f); total += 1
            if a != b:
                diffs += 1; print("DIFF framing", f[:60], "\nold:", a[:400], "\nnew:", b[:400])
        # /metrics after the same history: the counters must agree too
        a = request(18101, "GET", "/metrics", "Authorization: Bearer %s\r\n" % TOKEN, None)
        b = request(18102, "GET", "/metrics", "Authorization: Bearer %s\r\n" % TOKEN, None)
        total += 1
        a = re.sub(rb"content-length: \d+", b"", a); b = re.sub(rb"content-length: \d+", b"", b)
        if a != b:
            diffs += 1; print("DIFF metrics\nold:", a.decode()[-3000:], "\nnew:", b.decode()[-3000:])
    finally:
        for p, d in ((po, do), (pn, dn)):
            p.terminate(); p.wait(10); shutil.rmtree(d, ignore_errors=True)
print("%d requests, %d differ" % (total, diffs))
sys.exit(1 if diffs else 0)
