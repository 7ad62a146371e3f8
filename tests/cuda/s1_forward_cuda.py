#!/usr/bin/env python3
"""s1-forward --device cuda:0 against the CPU path on a random tiny-A model directory
(s1-mkmodel --shape tiny --vision, exported text + vision; images as merged embeddings): one pass
and prefix + continuation, readouts at several positions, in both engine numerics: the default
(ref-bf16) against the CPU path with --bf16-rounding (its twin), --numerics fp32-residual against
the float32 CPU path. Hidden rows within relative L2 max(2e-2, 1.5 x the distance between the two
CPU paths on the same input: what rounding as the bf16 reference costs on this model), the same
top-1 logit id and at least 4 of the top-5 ids; --repeat prints one timing JSON line with the
documented keys. Standard library only.

Usage: s1_forward_cuda.py --mkmodel BIN --export BIN --forward BIN --tokenizer FILE
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def npy(path, rows, cols):
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    h = hdr.encode()
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    vals = [0.05 * (((i * 7919) % 13) - 6) for i in range(rows * cols)]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + struct.pack("<%df" % len(vals), *vals))


def rel(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den) if den else math.sqrt(num)


def main():
    ap = argparse.ArgumentParser()
    for k in ("mkmodel", "export", "forward", "tokenizer"):
        ap.add_argument("--" + k, required=True)
    a = ap.parse_args()
    w = tempfile.mkdtemp(prefix="s1_forward_cuda_")
    fails = []

    def fwd(inp, extra=()):
        ip, op = os.path.join(w, "in.json"), os.path.join(w, "out.json")
        if os.path.exists(op):
            os.remove(op)
        with open(ip, "w") as f:
            json.dump(inp, f)
        p = subprocess.run([a.forward, "--model", os.path.join(w, "m"), "--input", ip, "--output",
                            op] + list(extra), capture_output=True, text=True)
        if p.returncode != 0:
            fails.append("s1-forward %s failed: %s" % (" ".join(extra), p.stderr.strip()))
            return None, p.stdout
        return json.load(open(op)), p.stdout

    try:
        hf = os.path.join(w, "hf")
        subprocess.run([a.mkmodel, "--shape", "tiny", "--seed", "9", "--tokenizer", a.tokenizer,
                        "--out", hf], check=True, capture_output=True)
        subprocess.run([a.export, "--family", "qwen3_5", "--base", hf, "--out",
                        os.path.join(w, "m")], check=True, capture_output=True)
        cfg = json.load(open(os.path.join(hf, "config.json")))
        img, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
        hidden = cfg["text_config"]["hidden_size"]
        npy(os.path.join(w, "img.npy"), 16, hidden)  # grid [1, 8, 8] → 16 merged rows
        toks = [(i * 7919 + 11) % 150000 for i in range(150)]
        toks_img = toks[:20] + [vs, img, ve] + toks[20:]
        cases = [
            ("one pass 150", {"tokens": toks, "readout": [0, 63, 64, 100, -1]}),
            ("prefix 70 + 80", {"tokens": toks, "prefix_len": 70, "readout": [10, 69, 70, -1]}),
            ("image embeds", {"tokens": toks_img, "readout": [21, 30, -1],
                              "images": [{"embeds": "img.npy", "grid_thw": [1, 8, 8]}]}),
        ]
        for name, inp in cases:
            cpu32, _ = fwd(inp)
            cpub, _ = fwd(inp, ["--bf16-rounding"])
            gref, _ = fwd(inp, ["--device", "cuda:0"])
            g32, _ = fwd(inp, ["--device", "cuda:0", "--numerics", "fp32-residual"])
            if not cpu32 or not cpub or not gref or not g32:
                continue
            for mode, cpu, gpu in (("ref-bf16", cpub, gref), ("fp32-residual", cpu32, g32)):
                if cpu["readout"] != gpu["readout"] or cpu["n_tokens"] != gpu["n_tokens"]:
                    fails.append("%s %s: readout or n_tokens differ" % (name, mode))
                    continue
                for i, (hc, hg) in enumerate(zip(cpu["hidden"], gpu["hidden"])):
                    e = rel(hg, hc)
                    tol = max(2e-2, 1.5 * rel(cpub["hidden"][i], cpu32["hidden"][i]))
                    tc, tg = cpu["logits_top"][i]["ids"], gpu["logits_top"][i]["ids"]
                    print("%-16s %-13s readout %4d: hidden rel %.3e (tol %.3e), top-1 %d/%d, "
                          "top-5 overlap %d" % (name, mode, cpu["readout"][i], e, tol, tc[0], tg[0],
                                                len(set(tc[:5]) & set(tg[:5]))))
                    if not e <= tol:
                        fails.append("%s %s readout %d: hidden rel %.3e > %.3e" %
                                     (name, mode, i, e, tol))
                    if tc[0] != tg[0] or len(set(tc[:5]) & set(tg[:5])) < 4:
                        fails.append("%s %s readout %d: top ids differ %s vs %s" %
                                     (name, mode, i, tc[:5], tg[:5]))
        _, out = fwd({"tokens": toks}, ["--device", "cuda:0", "--repeat", "3"])
        line = [l for l in out.splitlines() if l.startswith("{")]
        t = json.loads(line[-1]) if line else {}
        print("timing:", json.dumps(t))
        for k in ("n_tokens", "repeat", "median_ms", "min_ms", "max_ms", "ready_ms",
                  "device_used_bytes", "weights_bytes"):
            if k not in t:
                fails.append("timing JSON lacks %s" % k)
        if t.get("n_tokens") != 150 or not 0 < t.get("min_ms", 0) <= t.get("median_ms", 0) <= t.get("max_ms", 0):
            fails.append("timing JSON values wrong: %s" % t)
    finally:
        shutil.rmtree(w, ignore_errors=True)
    for f in fails:
        print("FAIL", f)
    print("s1_forward_cuda: %d failures" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
