"""Who may use the service, on the real trio (issue 16, security basics). By default a browser
request from another origin (an Origin whose host differs from Host, as the Open-Jev reference
server decides) gets 403 on every route, while same-origin and non-browser requests are served.
With --allow-origin, --auth-token-file and --tls-cert/--tls-key the same service serves HTTPS
(h2o's own TLS): the bearer token is required on every route but /health (401 otherwise, with
WWW-Authenticate), an allowed origin gets CORS headers and its preflight a 204, other origins
still 403, framing refusals keep the error shape over TLS, and plain HTTP on the TLS port ends at
once. A token file with a short token stops the start; listening beyond loopback without a token
warns."""
import http.client
import json
import os
import socket
import ssl
import subprocess
import time

import trio

TOKEN = "s1-test-token-0123456789abcdef"


def request(t, method, path, body=None, headers=None, tls=None, timeout=60):
    if tls:
        c = http.client.HTTPSConnection("127.0.0.1", t.port, timeout=timeout, context=tls)
    else:
        c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=timeout)
    try:
        if isinstance(body, dict):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        got = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        trio.check_answer(method, path, *got, request_body=body)
        return got
    finally:
        c.close()


def check_error(got, status, etype):
    s, h, b = got
    assert s == status, (s, b[:300])
    e = json.loads(b)
    assert e["error"]["type"] == etype and e["error"]["message"], e
    assert h.get("x-request-id") and h.get("content-type") == "application/json", h
    return h, e


def test(t):
    t.make_model()
    t.start_all(credits=2)
    json_h = {"Content-Type": "application/json"}
    s, h, plain = t.post(trio.MINI)
    trio.check_mini_answer(s, h, plain)
    want = json.loads(plain)["answers"]
    here = "http://127.0.0.1:%d" % t.port

    # default: cross-origin browser requests refused on every route, same origin served
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1", "https://127.0.0.1:%d"
                   % (t.port + 1), "garbage"):
        h, e = check_error(request(t, "POST", "/v1/systemone", trio.MINI,
                                   dict(json_h, Origin=origin)), 403, "forbidden")
        assert "Origin" in e["error"]["message"] and "access-control-allow-origin" not in h
        for path in ("/v1/models", "/metrics", "/health"):
            check_error(request(t, "GET", path, headers={"Origin": origin}), 403, "forbidden")
    check_error(request(t, "OPTIONS", "/v1/systemone", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}), 403,
        "forbidden")
    s, h, b = request(t, "POST", "/v1/systemone", trio.MINI, dict(json_h, Origin=here))
    trio.check_mini_answer(s, h, b)
    s, _, m = t.http("GET", "/metrics")
    assert 's1_requests_total{status="403"} 6' in m.decode(), m.decode()[:1500]

    # TLS, a bearer token and one allowed origin
    certs = os.path.join(t.tmp, "tls")
    os.mkdir(certs, 0o700)
    key, cert = os.path.join(certs, "key.pem"), os.path.join(certs, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    token_file = os.path.join(certs, "token")
    with open(token_file, "w") as f:
        f.write("  %s \n" % TOKEN)
    short = os.path.join(certs, "short")
    with open(short, "w") as f:
        f.write("abc\n")
    fe = t.bin("frontend/s1-frontend")
    r = subprocess.run([fe, "--listen", "127.0.0.1:%d" % trio.free_port(), "--pool",
                        "ipc://%s/x.sock" % certs, "--auth-token-file", short],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    assert r.returncode == 1 and b"16 to 4096" in r.stdout, r.stdout
    t.kill("fe")
    t.start("fe", [fe, "--listen", "127.0.0.1:%d" % t.port, "--pool", t.fe_url,
                   "--tls-cert", cert, "--tls-key", key, "--auth-token-file", token_file,
                   "--allow-origin", "http://app.example", "--timeout-ms", "60000"])
    tls = ssl.create_default_context(cafile=cert)
    end = time.time() + 60
    while time.time() < end:
        try:
            s, _, _ = request(t, "GET", "/health", tls=tls, timeout=5)
            if s == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    auth = dict(json_h, Authorization="Bearer " + TOKEN)
    s, h, b = request(t, "POST", "/v1/systemone", trio.MINI, auth, tls=tls)
    trio.check_mini_answer(s, h, b)
    assert json.loads(b)["answers"] == want
    # the token: required on every route but /health
    for hdrs in ({}, {"Authorization": "Bearer wrong-token-0123456789abcdef"},
                 {"Authorization": "Bearer " + TOKEN + "x"}, {"Authorization": TOKEN},
                 {"Authorization": "Basic " + TOKEN}):
        h, _ = check_error(request(t, "POST", "/v1/systemone", trio.MINI, dict(json_h, **hdrs),
                                   tls=tls), 401, "unauthorized")
        assert h.get("www-authenticate", "").startswith("Bearer"), h
        for path in ("/v1/models", "/metrics"):
            check_error(request(t, "GET", path, headers=hdrs, tls=tls), 401, "unauthorized")
    s, h, b = request(t, "GET", "/health", tls=tls)
    assert s == 200 and json.loads(b)["status"] == "ready", (s, b)
    s, h, b = request(t, "POST", "/v1/systemone", trio.MINI,
                      dict(auth, Authorization="bearer " + TOKEN), tls=tls)
    assert s == 200, (s, b[:200])  # the scheme is case-insensitive (RFC 9110 §11.1)
    # the allowed origin: CORS headers, a preflight without the token; others still 403
    s, h, b = request(t, "POST", "/v1/systemone", trio.MINI,
                      dict(auth, Origin="http://app.example"), tls=tls)
    trio.check_mini_answer(s, h, b)
    assert h.get("access-control-allow-origin") == "http://app.example" and h.get("vary") == \
        "Origin", h
    assert "x-request-id" in h.get("access-control-expose-headers", ""), h
    s, h, b = request(t, "OPTIONS", "/v1/systemone", headers={
        "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"}, tls=tls)
    assert s == 204 and b == b"", (s, b)
    assert "POST" in h["access-control-allow-methods"], h
    assert "authorization" in h["access-control-allow-headers"], h
    check_error(request(t, "POST", "/v1/systemone", trio.MINI,
                        dict(auth, Origin="http://evil.example"), tls=tls), 403, "forbidden")
    # framing refusals over TLS keep the error shape; plain HTTP on the TLS port ends at once
    raw = socket.create_connection(("127.0.0.1", t.port), timeout=10)
    conn = tls.wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                 b"Content-Length: 3\r\n\r\n{}")
    data = b""
    while True:
        try:
            more = conn.recv(65536)
        except (ssl.SSLError, OSError):
            break
        if not more:
            break
        data += more
    conn.close()
    assert data.startswith(b"HTTP/1.1 400 ") and b'"type":"bad_request"' in data, data[:400]
    t0 = time.time()
    raw = socket.create_connection(("127.0.0.1", t.port), timeout=10)
    raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        got = raw.recv(65536)
        while got and not got.startswith(b"HTTP/1.1 200"):
            more = raw.recv(65536)
            if not more:
                break
            got += more
    except OSError:
        got = b""
    raw.close()
    assert not got.startswith(b"HTTP/1.1 200") and time.time() - t0 < 5, (got[:100],
                                                                          time.time() - t0)
    # beyond loopback without a token: served, with a warning at start
    t.kill("fe")
    t.start("fe", [fe, "--listen", "0.0.0.0:%d" % t.port, "--pool", t.fe_url])
    end = time.time() + 30
    while time.time() < end and "warning" not in open(t.logs["fe"]).read():
        time.sleep(0.05)
    assert "beyond loopback and no --auth-token-file" in open(t.logs["fe"]).read()
    t.wait_health(200, want="ready")
    s, h, b = t.post(trio.MINI)
    trio.check_mini_answer(s, h, b)
    print("cross-origin 403 (5 origins x 4 routes), same origin served; HTTPS with a bearer "
          "token (5 wrong forms 401), CORS for the allowed origin, framing refusal over TLS")


if __name__ == "__main__":
    trio.main(test)
