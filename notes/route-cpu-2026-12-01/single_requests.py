"""Interleaved single-client latencies of three Open-Jev requests of scripts/bench_serve.py's
workloads (noul_60w, noul_3000w, mixed_8q), 4 each, against trios started from several binary
folders in turn, 3 rounds (the machine is shared: interleaving puts the builds under the same load).
usage: /usr/bin/python3 single_requests.py MODEL_DIR LABEL=BIN_DIR [LABEL=BIN_DIR ...]"""
import os
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import bench_serve as bs  # noqa: E402


class Args:
    device, executors, preprocessors, credits, executor_arg, ready_timeout = "cpu", 1, 1, 16, [], 300


def measure(bindir, model, names, n=4):
    a = Args()
    a.bin = bindir
    t = bs.Trio(a, model, tempfile.mkdtemp())
    t.up()
    items = {w[0]: w for w in bs.workloads("open_jev", "full")}
    out = {}
    try:
        with httpx.Client(timeout=600) as cl:
            for name in names:
                lat = []
                for _ in range(n):
                    t0 = time.time()
                    r = cl.post("http://127.0.0.1:%d/v1/systemone" % t.port, content=items[name][1],
                                headers={"content-type": "application/json"})
                    lat.append(time.time() - t0)
                    assert r.status_code == 200, r.text[:200]
                out[name] = sorted(lat)
    finally:
        t.down()
    return out


if __name__ == "__main__":
    model, builds = sys.argv[1], [x.split("=", 1) for x in sys.argv[2:]]
    for rep in range(3):
        for label, b in builds:
            r = measure(b, model, ["noul_60w", "noul_3000w", "mixed_8q"])
            print(rep, label, {k: " ".join("%.3f" % x for x in v) for k, v in r.items()}, flush=True)
