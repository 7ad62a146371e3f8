"""s1-frontend alone (no preprocessor): every documented path with every method, and paths that
are not documented, answer as frontend/openapi.json says (each answer checked by trio.Trio.http);
a documented method never answers 405 and an undocumented one always does; GET /openapi.json and
GET / serve the repository's files byte for byte, and the page's Content-Security-Policy names the
SHA-256 of exactly its own inline script and style (recomputed here with hashlib).
usage: test_static.py BUILD_ROOT SHARED_DIR SOURCE_ROOT"""
import base64
import hashlib
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[3])
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import openapi_check  # noqa: E402
import trio  # noqa: E402

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")


def sha256_b64(text):
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def test(t):
    t.start_frontend()
    t.wait_health(503)
    doc = openapi_check.contract().doc
    n = 0
    for path in list(doc["paths"]) + ["/nope", "/openapi.json/x", "/v1", "/index.html"]:
        item = doc["paths"].get(path)
        for method in METHODS:
            body = "{}" if method in ("POST", "PUT", "PATCH") else None
            s, h, b = t.http(method, path, body, {"Content-Type": "application/json"})
            if item is None:
                assert s == 404, (method, path, s)
            elif method.lower() in item:
                assert s != 405, (method, path, s, b[:200])
            else:
                assert s == 405 and h.get("allow"), (method, path, s, h)
            n += 1
    for path, name in (("/openapi.json", "openapi.json"), ("/", "page.html")):
        with open(os.path.join(ROOT, "frontend", name), "rb") as f:
            want = f.read()
        s, h, b = t.http("GET", path + "?x=1")  # the query string is ignored
        assert s == 200 and b == want, (path, s, len(b), len(want))
        s, h, b = t.http("HEAD", path)
        assert s == 200 and int(h["content-length"]) == len(want) and b == b"", (path, h)
    page = want.decode("utf-8")
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    csp = h["content-security-policy"]
    assert "script-src 'sha256-%s'" % sha256_b64(script) in csp, csp
    assert "style-src 'sha256-%s'" % sha256_b64(style) in csp, csp
    assert h["x-content-type-options"] == "nosniff" and h["content-type"] == "text/html; charset=utf-8"
    print("%d answers of a lone frontend as documented; /openapi.json and / serve the repository's "
          "bytes; the CSP names the page's script and style" % n)


if __name__ == "__main__":
    trio.main(test)
