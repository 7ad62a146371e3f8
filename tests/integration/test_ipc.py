"""The ipc sockets of the real trio (issue 16: F7 and the security basics). A second s1-frontend or
s1-executor started on a live socket path fails at once and changes nothing: after it, a
preprocessor killed (-9) and restarted still connects and requests are answered (with nng 1.5.2's
own stale-socket probe, the failed start had stopped the live listener accepting: the service
answered 503 until its restart; ../shared/findings/2026-12-01-attack/nng_second_listener_repro.sh).
Sockets live only in private directories (0700, owned by the user); a directory others can enter
or write, a symlink, a socket path that is not a socket: refused at start. The sockets are 0600
even under umask 000, and the default paths are in the runtime directory."""
import json
import os
import signal
import stat
import subprocess
import time

import trio


def run_briefly(argv, env=None, timeout=15):
    """Runs a process that must fail at once; returns (rc, output, seconds)."""
    t0 = time.time()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env)
    return r.returncode, r.stdout.decode(errors="replace"), time.time() - t0


def restart_preprocessor(t):
    t.kill("pp", signal.SIGKILL)
    time.sleep(0.5)
    t.start_preprocessor(name="pp", credits=2)
    end = time.time() + 20
    last = None
    while time.time() < end:
        s, h, b = t.post(trio.MINI)
        if s == 200:
            trio.check_mini_answer(s, h, b)
            return
        last = (s, b[:200])
        time.sleep(0.2)
    raise AssertionError("no answer after the preprocessor's restart: %r" % (last,))


def test(t):
    t.make_model()
    old_umask = os.umask(0)  # every process below starts under umask 000
    try:
        t.start_all(credits=2)
    finally:
        os.umask(old_umask)
    s, h, b = t.post(trio.MINI)
    trio.check_mini_answer(s, h, b)
    fe_sock, ex_sock = t.fe_url[len("ipc://"):], t.ex_url[len("ipc://"):]

    # F7: a second frontend on the live pool path fails at once, touching nothing
    rc, out, dt = run_briefly([t.bin("frontend/s1-frontend"), "--listen",
                               "127.0.0.1:%d" % trio.free_port(), "--pool", t.fe_url])
    restart_preprocessor(t)  # the live pool still accepts a preprocessor
    assert rc == 1 and "served by another live process" in out and dt < 5, (rc, out, dt)
    # and a second executor on the live executor path
    rc, out, dt = run_briefly([t.bin("executor/server/s1-executor"), "--model", t.model,
                               "--device", "cpu", "--listen", t.ex_url])
    restart_preprocessor(t)  # the live executor still accepts the new preprocessor
    assert rc == 1 and "served by another live process" in out and dt < 10, (rc, out, dt)
    s, _, m = t.http("GET", "/metrics")
    assert "s1_preprocessors_ready 1" in m.decode().splitlines(), m.decode()[:1500]
    print("a second frontend and a second executor on live paths: refused in %.2f s; the pool "
          "still accepts a restarted preprocessor" % dt)

    # the sockets and their locks are 0600 though the trio started under umask 000
    for path in (fe_sock, ex_sock):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o600, "%s: mode %o under umask 000" % (path, mode)
        assert stat.S_IMODE(os.stat(path + ".lock").st_mode) == 0o600, path

    # a killed frontend leaves its socket and lock behind; a new one takes both over
    t.kill("fe", signal.SIGKILL)
    assert os.path.exists(fe_sock)
    t.start_frontend()
    t.wait_health(200, want="ready", timeout=30)
    s, h, b = t.post(trio.MINI)
    trio.check_mini_answer(s, h, b)

    # private directories only
    fe = t.bin("frontend/s1-frontend")
    pp = t.bin("preprocessor/s1-preprocessor")
    port = "127.0.0.1:%d" % trio.free_port()
    open_dir = os.path.join(t.tmp, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o755)
    rc, out, _ = run_briefly([fe, "--listen", port, "--pool", "ipc://%s/fe.sock" % open_dir])
    assert rc == 1 and "mode 0755" in out, (rc, out)
    rc, out, _ = run_briefly([pp, "--frontend", "ipc://%s/fe.sock" % open_dir, "--executor",
                              t.ex_url, "--model", t.model])
    assert rc == 1 and "mode 0755" in out, (rc, out)
    rc, out, _ = run_briefly([pp, "--frontend", t.fe_url, "--executor",
                              "ipc://%s/ex.sock" % open_dir, "--model", t.model])
    assert rc == 1 and "--executor" in out and "mode 0755" in out, (rc, out)
    os.chmod(open_dir, 0o730)  # group may write: another user could plant a socket
    rc, out, _ = run_briefly([fe, "--listen", port, "--pool", "ipc://%s/fe.sock" % open_dir])
    assert rc == 1 and "mode 0730" in out, (rc, out)
    link = os.path.join(t.tmp, "link")
    private = os.path.join(t.tmp, "private")
    os.mkdir(private, 0o700)
    os.symlink(private, link)
    rc, out, _ = run_briefly([fe, "--listen", port, "--pool", "ipc://%s/fe.sock" % link])
    assert rc == 1 and "not a directory" in out, (rc, out)
    with open(os.path.join(private, "file.sock"), "w") as f:
        f.write("x")
    rc, out, _ = run_briefly([fe, "--listen", port, "--pool",
                              "ipc://%s/file.sock" % private])
    assert rc == 1 and "not a socket" in out, (rc, out)
    other = os.path.join(t.tmp, "other")
    os.mkdir(other, 0o700)
    if os.geteuid() == 0:
        os.chown(other, 65534, 65534)  # nobody's directory
        rc, out, _ = run_briefly([fe, "--listen", port, "--pool", "ipc://%s/fe.sock" % other])
        assert rc == 1 and "belongs to uid 65534" in out, (rc, out)
    rc, out, _ = run_briefly([fe, "--listen", port, "--pool", "ipc://" + "/d" * 60 + "/x.sock"])
    assert rc == 1 and "longer than 107" in out, (rc, out)

    # the default paths: systemd's $RUNTIME_DIRECTORY, else $XDG_RUNTIME_DIR/s1serve (made 0700)
    xdg = os.path.join(t.tmp, "xdg")
    rt = os.path.join(t.tmp, "rt")
    os.mkdir(xdg, 0o700)
    os.mkdir(rt, 0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=xdg)
    env.pop("RUNTIME_DIRECTORY", None)
    for e, sock in ((env, os.path.join(xdg, "s1serve", "frontend.sock")),
                    (dict(env, RUNTIME_DIRECTORY=rt), os.path.join(rt, "frontend.sock"))):
        p = subprocess.Popen([fe, "--listen", "127.0.0.1:%d" % trio.free_port()],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e)
        try:
            end = time.time() + 10
            while not os.path.exists(sock) and time.time() < end and p.poll() is None:
                time.sleep(0.05)
            assert os.path.exists(sock), (sock, p.poll())
            assert stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700, sock
            assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600, sock
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
    print("private directories: mode 0755 / 0730, a symlink, a file, another user's directory and "
          "a long path refused; defaults under the runtime directory, sockets 0600 under umask 000")


if __name__ == "__main__":
    trio.main(test)
