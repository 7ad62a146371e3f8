"""The page at GET / in a real headless browser (Debian's chromium, driven through chromedriver's
W3C WebDriver HTTP protocol with the stdlib) against the real trio with the tiny Open-Jev model
(tests/integration/trio.py): the page lists the loaded model (from /v1/models), loads its example,
gets one more question typed in (an id and option keys that are HTML markup, option keys "10"
before "2") and a JSON state, and sends it. Then:
  - the request the page sent keeps the typed order and the JSON state verbatim;
  - the same request posted by this test gets the same answer the page received;
  - every rendered bar has that answer's key and probability (exactly), a width of p times its
    track (within 1.5 px), and the decision marked on exactly the candidate the rule names (the
    answer's `choice`, else the first most probable candidate);
  - the Server-Timing split shows queue, preprocess, execute and finish with the header's values;
  - markup in ids and keys is shown as text (no element made from it), the console has no error
    (a CSP violation would be one), the image picker is off for a model that reads no images;
  - a refused request (no questions) shows the service's error type and message.
Then the same page on a trio with the small random JEMM model (recipe/jemm/make-demo-model): an
image chosen with the file picker is sent as the data URL of its bytes, and the bars again equal
the answer the same request gets from here.
Screenshots of the answered pages are kept in the test log folder (LOG_DIR/frontend_page.png,
LOG_DIR/frontend_page_image.png).
usage: test_page.py BUILD_ROOT SHARED_DIR LOG_DIR"""
import base64
import http.client
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
IMAGE = os.path.join(ROOT, "tests", "fixtures", "image", "sources", "bilevel_96x64.png")
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import openapi_check  # noqa: E402
import trio  # noqa: E402

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C WebDriver element reference key
MARKUP_ID = "<b>bold</b>"
MARKUP_OPTIONS = "<img src=x>: an image tag\n10: ten\n2: two"


class Browser:
    """One chromium session through chromedriver (W3C WebDriver over HTTP, stdlib only)."""

    def __init__(self, tmp):
        driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
        binary = "/usr/lib/chromium/chromium"
        if not os.path.exists(binary):
            binary = shutil.which("chromium")
        assert os.path.exists(driver) and binary, "chromium and chromium-driver are needed " \
            "(scripts/install-deps installs them)"
        self.port = trio.free_port()
        self.log = os.path.join(tmp, "chromedriver.log")
        self.proc = subprocess.Popen([driver, "--port=%d" % self.port, "--log-path=" + self.log],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 30
        while True:
            try:
                if self.cmd("GET", "/status")["ready"]:
                    break
            except OSError:
                pass
            assert time.time() < end, "chromedriver did not start"
            time.sleep(0.05)
        opts = {"binary": binary, "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--window-size=1280,1700",
            "--user-data-dir=" + os.path.join(tmp, "profile")]}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": opts,
                                                 "goog:loggingPrefs": {"browser": "ALL"}}}}
        self.sid = self.cmd("POST", "/session", caps)["sessionId"]

    def cmd(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            c.request(method, path, body=None if body is None else json.dumps(body),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            value = json.loads(r.read()).get("value")
        finally:
            c.close()
        if isinstance(value, dict) and "error" in value:
            raise AssertionError("webdriver %s %s: %s: %s" % (method, path, value["error"],
                                                             value.get("message", "")[:300]))
        return value

    def s(self, method, path, body=None):
        return self.cmd(method, "/session/%s%s" % (self.sid, path), body)

    def go(self, url):
        self.s("POST", "/url", {"url": url})

    def find(self, css, within=None):
        base = "/element/%s" % within if within else ""
        return self.s("POST", base + "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, el):
        self.s("POST", "/element/%s/click" % el, {})

    def type(self, el, text, clear=True):
        if clear:
            self.s("POST", "/element/%s/clear" % el, {})
        self.s("POST", "/element/%s/value" % el, {"text": text})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, script, timeout=60):
        end = time.time() + timeout
        while True:
            v = self.js(script)
            if v:
                return v
            assert time.time() < end, "the page never got there: %s" % script
            time.sleep(0.1)

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.s("GET", "/screenshot")))

    def console(self):
        return self.s("POST", "/se/log", {"type": "browser"})

    def quit(self):
        try:
            self.s("DELETE", "")
        except (OSError, AssertionError):
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


READ_BARS = """
return Array.from(document.querySelectorAll('#answers .answer')).map(a => ({
  question: a.dataset.question, title: a.querySelector('h3').textContent,
  rows: Array.from(a.querySelectorAll('.bar-row')).map(r => ({
    key: r.dataset.key, p: r.dataset.p, decision: r.classList.contains('decision'),
    abstain: r.dataset.abstain === 'true', value: r.querySelector('.bar-value').textContent,
    mark: r.querySelector('.bar-mark').textContent,
    fill: r.querySelector('.bar-fill').getBoundingClientRect().width,
    track: r.querySelector('.bar-track').getBoundingClientRect().width}))}));
"""
READ_TIMING = """
return {raw: document.getElementById('timing-raw').textContent,
        segs: Array.from(document.querySelectorAll('#timing .seg')).map(s => [s.dataset.name, s.dataset.dur]),
        legend: Array.from(document.querySelectorAll('#timing .seg-legend')).map(s => s.textContent)};
"""


def expected_bars(answer):
    """The page's rule, written out again from the JSON answer: the bars and the decision."""
    rows = []
    if isinstance(answer.get("probabilities"), dict):
        rows = [(k, p, False) for k, p in answer["probabilities"].items()]
    elif isinstance(answer.get("noul"), (int, float)):
        rows = [("true", answer["noul"], False), ("false", 1 - answer["noul"], False)]
    if isinstance(answer.get("choice"), str):
        decision = answer["choice"]
    elif isinstance(answer.get("score"), str):
        decision = answer["score"]
    else:
        decision = max(rows, key=lambda r: r[1])[0] if rows else None  # first maximum
    if isinstance(answer.get("abstain"), (int, float)) and rows:
        rows.append(("(abstain)", answer["abstain"], True))
    return rows, decision


def compare_bars(shown, answers):
    assert [q["question"] for q in shown] == list(answers), ([q["question"] for q in shown], list(answers))
    n_rows = 0
    for q in shown:
        want_rows, decision = expected_bars(answers[q["question"]])
        assert q["title"] == q["question"], q
        got = [(r["key"], float(r["p"]), r["abstain"]) for r in q["rows"]]
        assert got == want_rows, (q["question"], got, want_rows)
        marked = [r["key"] for r in q["rows"] if r["decision"]]
        assert marked == [decision], (q["question"], marked, decision)
        for r, (_, p, _) in zip(q["rows"], want_rows):
            assert r["value"] == "%.4f" % p, (r, p)
            assert abs(r["fill"] - p * r["track"]) <= 1.5 and r["track"] > 50, (q["question"], r, p)
            assert (r["mark"] == "◀ decision") == r["decision"], r
            n_rows += 1
    return n_rows


def send_and_wait(b):
    b.click(b.find("#send"))
    done = b.wait("const s = document.getElementById('status').dataset.state; "
                  "return s === 'done' || s === 'error' ? s : null", timeout=180)
    err = b.js("return document.getElementById('error').textContent")
    assert done == "done", (done, err)
    return (b.js("return document.getElementById('request-json').textContent"),
            b.js("return document.getElementById('response-json').textContent"))


def test_open_jev(t, b, log_dir):
    t.make_model()
    t.start_all(credits=2)
    base = "http://127.0.0.1:%d" % t.port
    t0 = time.time()
    b.go(base + "/")
    b.wait("return document.querySelectorAll('#model option').length > 0")
    sel = b.js("const s = document.getElementById('model'); return [s.value, "
               "document.getElementById('model-info').textContent, "
               "document.getElementById('images').disabled]")
    assert sel[0] == trio.MODEL_ID and "family open_jev" in sel[1] and sel[2] is True, sel
    b.click(b.find("#example"))
    assert b.js("return document.querySelectorAll('fieldset.question').length") == 3
    b.click(b.find("#add-question"))
    row = b.find("fieldset.question:last-of-type")
    b.type(b.find(".q-id", row), MARKUP_ID)
    b.type(b.find(".q-instructions", row), "Which <i>tag</i> is it?")
    b.type(b.find(".q-candidates", row), MARKUP_OPTIONS)
    b.click(b.find("#mode-json"))
    state = '{"ticket": {"amount": 12.0, "tags": ["billing", "vip"]}, "note": null}'
    b.type(b.find("#state"), state)
    sent, received = send_and_wait(b)
    print("page: answered in %.1f s after loading" % (time.time() - t0))
    # the request as typed
    req = json.loads(sent)
    assert '"state": ' + state in sent, sent[:400]
    assert req["model"] == trio.MODEL_ID, req
    assert list(req["questions"]) == ["route", "duplicate", "urgency", MARKUP_ID], req
    assert list(req["questions"][MARKUP_ID]["criteria"]) == ["<img src=x>", "10", "2"], req
    # the same request from here: the same answer (timing metadata aside)
    s, h, body = t.post(sent)
    assert s == 200, (s, body[:300])
    mine, page = json.loads(body), json.loads(received)
    for a in (mine, page):
        a["metadata"].pop("inference_seconds")
    assert mine == page, (mine, page)
    # the bars
    n_rows = compare_bars(b.js(READ_BARS), mine["answers"])
    made = b.js("return document.querySelectorAll('#answers b, #answers i, #answers img').length")
    assert made == 0, "markup from the answer became %d elements" % made
    # the Server-Timing split
    tm = b.js(READ_TIMING)
    raw = tm["raw"][len("server-timing: "):]
    assert re.match(openapi_check.contract().doc["components"]["headers"]["ServerTiming"]
                    ["schema"]["pattern"], raw), tm
    # the bar and its legend: the four stages (the executor's entries after them are parts of
    # execute, shown in the raw line only)
    want = [(n, float(d)) for n, d in re.findall(r"(?:^|, )([a-z-]+);dur=([0-9.]+)", raw)
            if n in ("queue", "preprocess", "execute", "finish")]
    got = [(n, float(d)) for n, d in tm["segs"]]
    assert [n for n, _ in got] == ["queue", "preprocess", "execute", "finish"] and got == want, tm
    assert tm["legend"] == ["%s %.3f ms" % (n, d) for n, d in want], tm
    assert all(math.isfinite(d) and d >= 0 for _, d in got), tm
    # nothing went wrong in the browser (a CSP violation is logged as an error)
    errors = [e for e in b.console() if e.get("level") == "SEVERE"]
    assert not errors, errors
    shot = os.path.join(log_dir, "frontend_page.png")
    os.makedirs(log_dir, exist_ok=True)
    b.screenshot(shot)
    print("page: %d questions, %d bars as the JSON answer, decisions marked, timing %s; "
          "screenshot %s" % (len(mine["answers"]), n_rows, raw, shot))
    # a refusal: no questions
    for _ in range(4):
        b.click(b.find("fieldset.question .q-remove"))
    assert b.js("return document.querySelectorAll('fieldset.question').length") == 0
    b.click(b.find("#send"))
    done = b.wait("const s = document.getElementById('status'); return s.dataset.state === "
                  "'error' ? s.textContent : null")
    sent = b.js("return document.getElementById('request-json').textContent")
    s, _, body = t.post(sent)
    e = json.loads(body)["error"]
    assert s == 422 and done == "HTTP 422", (s, done)
    shown = b.js("return document.getElementById('error').textContent")
    assert shown == "%s: %s" % (e["type"], e["message"]), (shown, e)
    logged = [x for x in b.console() if x.get("level") == "SEVERE"]  # the browser logs the 422
    assert len(logged) == 1 and "status of 422" in logged[0]["message"], logged
    print("page: a refused request shows %r" % shown)


def test_image(t, b, log_dir):
    model = os.path.join(t.tmp, "jemm")
    subprocess.run([os.path.join(ROOT, "recipe", "jemm", "make-demo-model"), model, "--build",
                    t.build], check=True, capture_output=True,
                   env=dict(os.environ, S1_SHARED=t.shared))
    t.model = model
    t.start_executor()
    t.start_frontend()
    t.start_preprocessor()
    t.wait_health(200)
    b.go("http://127.0.0.1:%d/" % t.port)
    b.wait("return document.querySelectorAll('#model option').length > 0")
    info = b.js("return [document.getElementById('model').value, "
                "document.getElementById('images').disabled]")
    assert info == ["JEMM", False], info
    b.click(b.find("#example"))
    b.s("POST", "/element/%s/value" % b.find("#images"), {"text": os.path.abspath(IMAGE)})
    b.wait("return document.querySelectorAll('#thumbs img').length === 1")
    with open(IMAGE, "rb") as f:
        url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    assert b.js("return document.querySelector('#thumbs img').src") == url
    sent, received = send_and_wait(b)
    req = json.loads(sent)
    assert req["images"] == [url] and req["model"] == "JEMM", sent[:300]
    s, h, body = t.post(sent)
    assert s == 200, (s, body[:300])
    mine, page = json.loads(body), json.loads(received)
    for a in (mine, page):
        a["usage"].pop("latency_ms")
    assert mine == page, (mine, page)
    n_rows = compare_bars(b.js(READ_BARS), mine["answers"])
    errors = [e for e in b.console() if e.get("level") == "SEVERE"]
    assert not errors, errors
    shot = os.path.join(log_dir, "frontend_page_image.png")
    b.screenshot(shot)
    print("page: JEMM with a picked image (%d bytes as a data URL): %d bars as the JSON answer; "
          "screenshot %s" % (os.path.getsize(IMAGE), n_rows, shot))


def main():
    build, shared, log_dir = sys.argv[1:4]
    os.makedirs(log_dir, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="s1-page-", dir="/tmp")
    b = Browser(profile)
    try:
        for part in (test_open_jev, test_image):
            t = trio.Trio(build, shared)
            ok = False
            try:
                part(t, b, log_dir)
                ok = True
            finally:
                t.stop(failed=not ok)
    finally:
        b.quit()
        shutil.rmtree(profile, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
