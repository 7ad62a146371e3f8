"""Malformed messages on the frontend's pool socket (where preprocessors dial in): bytes that are
not a message, a message of another protocol version, and an ASK without its fields are refused,
each logged by the frontend with its reason, and nothing else changes: the frontend stays ready
and answers the same request with the same bytes (timing aside) before and after. The messages
are sent with nngcat (Debian nng-utils) as a REQ peer, as a preprocessor would."""
import os
import subprocess
import time

import trio


def msgpack_map(pairs):
    """A msgpack fixmap of short string keys to small non-negative integers or short strings."""
    out = bytes([0x80 | len(pairs)])
    for k, v in pairs:
        out += bytes([0xa0 | len(k)]) + k.encode()
        out += bytes([0xa0 | len(v)]) + v.encode() if isinstance(v, str) else bytes([v])
    return out


def refusals(t):
    with open(t.logs["fe"], errors="replace") as f:
        log = f.read()
    return log, [log.count("s1-frontend: %s: " % what)
                 for what in ("refused a message", "refused an ask")]


def send_req(t, data, want):
    """One REQ message to the pool socket, as a preprocessor would send it; waits until the
    frontend's log shows `want` refusal counts, then ends the sender (nngcat keeps waiting for
    an answer that never comes) and returns what it printed: nothing, since a refused message
    is not answered."""
    path = os.path.join(t.tmp, "msg.bin")
    with open(path, "wb") as f:
        f.write(data)
    p = subprocess.Popen(["nngcat", "--req0", "--dial", t.fe_url, "--raw", "--file", path],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 15
    while refusals(t)[1] != want and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)  # an answer, were one sent, would have arrived
    p.kill()
    out = p.communicate()[0]
    log, got = refusals(t)
    assert got == want, (got, want, out, log)
    return out


def test(t):
    t.make_model()
    t.start_all()
    s, h, before = t.post(trio.VALID)
    assert s == 200, before
    bad = [b"not a message at all",
           msgpack_map([("v", 3), ("k", "ask")]),  # a message of another protocol version
           msgpack_map([("v", 4), ("k", "ask")])]  # an ASK with no fields
    for data, want in zip(bad, ([1, 0], [2, 0], [2, 1])):
        out = send_req(t, data, want)
        assert not out.strip(), out  # nothing answered
    log = refusals(t)[0]
    assert "version" in log.split("s1-frontend: refused a message: ")[2], log
    t.wait_health(200, want="ready")
    s, h, after = t.post(trio.VALID)
    assert s == 200 and trio.norm_timing(after) == trio.norm_timing(before), (before, after)
    print("pool: 3 malformed messages refused and logged; the same answer before and after")


if __name__ == "__main__":
    trio.main(test)
