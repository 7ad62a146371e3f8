"""A sticky error retires the executor, and no request gets a wrong answer: a model directory whose
final norm holds NaN (a real export, one tensor overwritten, its manifest hash updated) loads, its
warm-up readout is NaN, so the executor retires: /health says 503 unavailable with the reason,
requests get 503 unavailable, and the executor exits 3 for its supervisor to restart it."""
import hashlib
import json
import os
import struct
import time

import trio

TENSOR = "model.language_model.norm.weight"


def poison(model_dir):
    path = os.path.join(model_dir, "weights.safetensors")
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header[TENSOR]
        assert t["dtype"] == "BF16", t
        start, end = t["data_offsets"]
        f.seek(8 + n + start)
        f.write(struct.pack("<H", 0x7fc0) * ((end - start) // 2))  # bf16 quiet NaN
    with open(path, "rb") as f:
        data = f.read()
    mpath = os.path.join(model_dir, "s1-model.json")
    with open(mpath) as f:
        m = json.load(f)
    m["files"]["weights.safetensors"] = {"sha256": hashlib.sha256(data).hexdigest(),
                                         "bytes": len(data)}
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)


def test(t):
    poison(t.make_model())
    t.start_executor()
    t.start_frontend()
    t.start_preprocessor(credits=2)
    h = t.wait_health(503, timeout=60, want="unavailable")
    assert "NaN" in h["reason"], h
    s, _, b = t.post(trio.VALID)
    assert s == 503 and json.loads(b)["error"]["type"] == "unavailable", (s, b)
    rc = t.procs["ex"].wait(30)
    assert rc == 3, rc
    s, _, b = t.post(trio.VALID)
    assert s == 503 and json.loads(b)["error"]["type"] == "unavailable", (s, b)
    print("NaN model: health %r, requests 503 unavailable, executor exit %d" % (h["reason"], rc))


if __name__ == "__main__":
    trio.main(test)
