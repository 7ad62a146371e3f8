"""More than one host, on this machine: network namespaces as hosts, joined by veth pairs on a
bridge, everything over tcp://. The frontend and this test's HTTP client run in namespace H0 (made
for the test and entered by re-running this script with `ip netns exec`, so the machine's own
network is never touched), the preprocessor in P (with a copy of the model directory that holds
only s1-model.json and tokenizer.json, all a preprocessor reads), one executor of the tiny
Open-Jev model in each of A and B. (1) Requests are served across the hosts, by both executors. (2) kill -9 the
executor of host A under load: no wrong answer (each is identical to its answer alone, timing
fields aside), no hang, later requests are served by B. (3) A back, then host B cut off silently
(its link down: no FIN, no RST reaches the preprocessor) under load: after 5 unanswered probes
the preprocessor closes B's connection and fails B's requests over to A; again no wrong answer
and no hang. (4) The preprocessor restarted with the whole directory answers the same bytes.
Skipped (exit 77, counted as SKIP by meson) only when namespaces, veth or bridges
cannot be made here, with the reason; any later failure fails."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import trio

NET = "10.231.0."
FE_PORT, EX_PORT = 5701, 5702
HOSTS = {"a": 2, "b": 3, "p": 4}  # last octet; H0's bridge is .1


def sh(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode:
        raise OSError("%s: %s" % (" ".join(argv), r.stdout.decode(errors="replace").strip()))


def ns_name(prefix, h):
    return "%s%s" % (prefix, h)


def setup(prefix):
    """H0 with a bridge at .1; hosts a, b, p each on a veth into it. Raises OSError naming the
    command that failed."""
    h0 = ns_name(prefix, "h0")
    sh(["ip", "netns", "add", h0])
    for h in HOSTS:
        sh(["ip", "netns", "add", ns_name(prefix, h)])
    ex0 = ["ip", "netns", "exec", h0]
    sh(ex0 + ["ip", "link", "set", "lo", "up"])
    sh(ex0 + ["ip", "link", "add", "br0", "type", "bridge"])
    sh(ex0 + ["ip", "addr", "add", NET + "1/24", "dev", "br0"])
    sh(ex0 + ["ip", "link", "set", "br0", "up"])
    for h, octet in HOSTS.items():
        ns = ns_name(prefix, h)
        sh(ex0 + ["ip", "link", "add", "v" + h, "type", "veth", "peer", "name", "eth0", "netns",
                  ns])
        sh(ex0 + ["ip", "link", "set", "v" + h, "master", "br0", "up"])
        exh = ["ip", "netns", "exec", ns]
        sh(exh + ["ip", "link", "set", "lo", "up"])
        sh(exh + ["ip", "addr", "add", NET + "%d/24" % octet, "dev", "eth0"])
        sh(exh + ["ip", "link", "set", "eth0", "up"])


def teardown(prefix):
    for h in list(HOSTS) + ["h0"]:
        ns = ns_name(prefix, h)
        r = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        for pid in r.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def outer():
    build, shared = sys.argv[1], sys.argv[2]
    prefix = "s1t%d" % os.getpid()
    try:
        try:
            setup(prefix)
        except OSError as e:
            print("SKIP: network namespaces are not possible here: %s" % e)
            sys.exit(77)
        rc = subprocess.call(["ip", "netns", "exec", ns_name(prefix, "h0"), sys.executable,
                              os.path.abspath(__file__), build, shared, "--inner", prefix])
    finally:
        teardown(prefix)
    sys.exit(rc)


def load(t, body, n_threads, seconds, results):
    end = time.time() + seconds

    def run():
        while time.time() < end:
            t0 = time.time()
            try:
                s, _, b = t.post(body, timeout=120)
            except OSError as e:
                s, b = -1, str(e).encode()
            results.append((s, time.time() - t0, b))

    th = [threading.Thread(target=run) for _ in range(n_threads)]
    for x in th:
        x.start()
    return th


def check_load(th, results, want, what):
    for x in th:
        x.join(150)
    assert all(not x.is_alive() for x in th), "%s: a client hung" % what
    bad = [(s, b[:200]) for s, _, b in results if s != 200 or trio.norm_timing(b) != want]
    assert not bad, (what, bad[:3])
    return max(d for _, d, _ in results)


def test_inner(t, prefix):
    t.fe_url = "tcp://%s1:%d" % (NET, FE_PORT)
    urls = {h: "tcp://%s%d:%d" % (NET, HOSTS[h], EX_PORT) for h in ("a", "b")}
    ns = {h: ["ip", "netns", "exec", ns_name(prefix, h)] for h in HOSTS}
    rec = {h: os.path.join(t.tmp, "rec-" + h) for h in ("a", "b", "a2")}
    model = t.make_model()

    def start_ex(h, r):
        argv = ns[h] + [t.bin("executor/server/s1-executor"), "--model", model, "--device", "cpu",
                        "--listen", urls[h], "--record", rec[r]]
        return t.start("ex" + h, argv)

    def ran(r):  # programs an executor recorded (a program file and a result file each)
        return len(os.listdir(rec[r])) // 2 if os.path.isdir(rec[r]) else 0

    start_ex("a", "a")
    start_ex("b", "b")
    t.start_frontend(queue=64, timeout_ms=60000)
    t.client_timeout = 90
    # host P holds only what a preprocessor reads of the model directory: the manifest and the
    # tokenizer (no weights); its programs still go to A and B, matched by the manifest's digest
    light = os.path.join(t.tmp, "model-p")
    os.makedirs(light)
    for f in ("s1-model.json", "tokenizer.json"):
        shutil.copy(os.path.join(model, f), light)
    t.start_pp("pp", [urls["a"], urls["b"]], [light], credits=4, prefix=ns["p"])
    t.wait_health(200, want="ready")
    body = json.dumps(trio.VALID)
    s, h, b = t.post(body)
    trio.check_valid_answer(s, h, b)
    want = trio.norm_timing(b)

    # (1) served across hosts, by both executors
    results = []
    th = load(t, body, 4, 2.0, results)
    check_load(th, results, want, "across hosts")
    assert ran("a") > 0 and ran("b") > 0, (ran("a"), ran("b"))
    print("across hosts: %d requests, executors ran %d (A) and %d (B) programs" % (
        len(results), ran("a"), ran("b")))

    # (2) kill -9 host A's executor under load
    results = []
    th = load(t, body, 4, 4.0, results)
    time.sleep(1.0)
    t.kill("exa", signal.SIGKILL)
    worst = check_load(th, results, want, "after kill -9 of A")
    nb = ran("b")
    for _ in range(3):
        s, _, b = t.post(body)
        assert s == 200 and trio.norm_timing(b) == want, (s, b[:200])
    assert ran("b") >= nb + 3, "B did not serve the requests after A died"
    print("kill -9 A under load: %d answers, all identical, slowest %.2f s; B serves" % (
        len(results), worst))

    # (3) A back; then B cut off without a FIN under load
    start_ex("a", "a2")
    end = time.time() + 60
    while time.time() < end and not ran("a2"):  # until A runs programs again
        s, _, b = t.post(body)
        assert s == 200 and trio.norm_timing(b) == want, (s, b[:200])
        time.sleep(0.1)
    assert ran("a2"), "the restarted A never got a program"
    results = []
    th = load(t, body, 4, 12.0, results)
    time.sleep(1.0)
    subprocess.check_call(ns["b"] + ["ip", "link", "set", "eth0", "down"])
    worst = check_load(th, results, want, "after B was cut off")
    with open(t.logs["pp"], errors="replace") as f:
        log = f.read()
    assert "executor %s: 5 probes unanswered" % urls["b"] in log, log[-2000:]
    na = ran("a2")
    for _ in range(3):
        s, _, b = t.post(body)
        assert s == 200 and trio.norm_timing(b) == want, (s, b[:200])
    assert ran("a2") >= na + 3, "A did not serve the requests after B was cut off"
    print("B cut off silently under load: %d answers, all identical, slowest %.2f s (the probes "
          "closed B's connection); A serves" % (len(results), worst))

    # (4) a preprocessor with the whole model directory in place of the light one: the same answer
    t.kill("pp", signal.SIGTERM)
    t.start_pp("pp2", [urls["a"]], [model], credits=4, prefix=ns["p"])
    t.wait_health(200, want="ready")
    s, _, b = t.post(body)
    assert s == 200 and trio.norm_timing(b) == want, (s, b[:200])
    print("the light copy (manifest and tokenizer) compiles what the whole directory compiles")


if __name__ == "__main__":
    if "--inner" in sys.argv:
        prefix = sys.argv[sys.argv.index("--inner") + 1]
        sys.argv = sys.argv[:3]
        trio.main(lambda t: test_inner(t, prefix))
    else:
        outer()
