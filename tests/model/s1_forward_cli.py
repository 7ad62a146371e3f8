#!/usr/bin/env python3
"""s1-forward end to end on a small random model (s1-mkmodel --shape tiny --tied, exported):
a prefix split at 64 tokens is bit-identical to the one-pass forward (chunk grids coincide), other
splits agree within 1e-5, readouts resolve negative positions, image embeddings are scattered, and
each bad input is refused with a message naming the problem. Standard library only.

An image file given by path (decoded and prepared by preprocessor/image, then the vision tower)
must give the same bits as its pixel rows from s1-pixels given as .npy.

Usage: s1_forward_cli.py --mkmodel BIN --export BIN --forward BIN --tokenizer FILE
                         --pixels S1_PIXELS_BIN --image PNG
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


def npy(path, rows, cols, dtype="<f4", fill=0.01):
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (dtype, rows, cols)
    h = hdr.encode()
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    fmt = "<%d%s" % (rows * cols, "f" if dtype == "<f4" else "d")
    vals = [fill * ((i * 7919) % 13 - 6) for i in range(rows * cols)]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + struct.pack(fmt, *vals))


def main():
    ap = argparse.ArgumentParser()
    for k in ("mkmodel", "export", "forward", "tokenizer", "pixels", "image"):
        ap.add_argument("--" + k, required=True)
    a = ap.parse_args()
    w = tempfile.mkdtemp(prefix="s1_forward_cli_")
    fails = []

    def fwd(inp, extra=(), model="m"):
        ip, op = os.path.join(w, "in.json"), os.path.join(w, "out.json")
        if os.path.exists(op):
            os.remove(op)
        with open(ip, "w") as f:
            f.write(inp if isinstance(inp, str) else json.dumps(inp))
        p = subprocess.run([a.forward, "--model", os.path.join(w, model), "--input", ip,
                            "--output", op] + list(extra), capture_output=True, text=True)
        return p.returncode, p.stderr, (json.load(open(op)) if p.returncode == 0 else None)

    try:
        hf = os.path.join(w, "hf")
        subprocess.run([a.mkmodel, "--shape", "tiny", "--tied", "--seed", "5", "--tokenizer",
                        a.tokenizer, "--out", hf], check=True, capture_output=True)
        subprocess.run([a.export, "--family", "qwen3_5", "--base", hf, "--out",
                        os.path.join(w, "m")], check=True, capture_output=True)
        cfg = json.load(open(os.path.join(hf, "config.json")))
        img_id, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
        toks = [(i * 7919 + 11) % 150000 for i in range(130)]
        ro = [0, 63, 64, 65, 100, -1]
        rc, err, one = fwd({"tokens": toks, "readout": ro})
        if rc:
            return print("FAIL one pass: " + err) or 1
        if one["readout"] != [0, 63, 64, 65, 100, 129] or one["n_tokens"] != 130 or \
                len(one["logits_top"][0]["ids"]) != 20:
            fails.append(f"readout/n_tokens/top-20 shape wrong: {one['readout']}")
        for p in (1, 63, 64, 65, 129):
            rc, err, cont = fwd({"tokens": toks, "readout": ro, "prefix_len": p})
            if rc:
                fails.append(f"prefix {p}: {err}")
                continue
            worst = 0.0
            for h1, h2 in zip(one["hidden"], cont["hidden"]):
                num = math.sqrt(sum((x - y) ** 2 for x, y in zip(h1, h2)))
                worst = max(worst, num / math.sqrt(sum(y * y for y in h1)))
            if p == 64 and cont["hidden"] != one["hidden"]:
                fails.append(f"prefix 64 is not bit-identical to one pass (rel {worst:.2e})")
            if worst > 1e-5:
                fails.append(f"prefix {p}: rel err {worst:.2e} > 1e-5")
            print(f"prefix {p}: worst rel err vs one pass {worst:.2e}")
        # image embeddings scattered into the <|image_pad|> rows: rows change, text before does not
        npy(os.path.join(w, "e.npy"), 6, 64)
        itoks = toks[:5] + [vs, img_id, ve] + toks[5:8]
        rc, err, im = fwd({"tokens": itoks, "readout": [4, 6, 11, -1],
                           "images": [{"embeds": "e.npy", "grid_thw": [1, 4, 6]}]})
        rc2, err2, tx = fwd({"tokens": toks[:5], "readout": [4]})
        if rc or rc2:
            fails.append(f"image embeds run failed: {err}{err2}")
        else:
            if im["n_tokens"] != 5 + 1 + 6 + 1 + 3 or im["rope_delta"] != -3:
                fails.append(f"image expansion: n_tokens {im['n_tokens']} rope_delta {im['rope_delta']}")
            if im["hidden"][0] != tx["hidden"][0]:
                fails.append("text before the image changed")
        # refusals, each with a message naming the problem
        bad = [
            ("not json", "{", "not a JSON object"),
            ("no tokens", {"readout": [0]}, "\"tokens\""),
            ("token range", {"tokens": [1, 10 ** 9]}, "outside the vocabulary"),
            ("readout range", {"tokens": [1, 2], "readout": [5]}, "readout[0]"),
            ("pads vs images", {"tokens": [1, img_id, img_id],
                                "images": [{"embeds": "e.npy", "grid_thw": [1, 4, 6]}]},
             "<|image_pad|>"),
            ("embeds rows", {"tokens": [1, img_id],
                             "images": [{"embeds": "e.npy", "grid_thw": [1, 4, 8]}]}, "rows"),
            ("odd grid", {"tokens": [1, img_id],
                          "images": [{"embeds": "e.npy", "grid_thw": [1, 3, 6]}]}, "grid_thw"),
            ("missing file", {"tokens": [1, img_id],
                              "images": [{"pixels": "nope.npy", "grid_thw": [1, 4, 6]}]},
             "nope.npy"),
            ("f64 npy", {"tokens": [1, img_id],
                         "images": [{"embeds": "d.npy", "grid_thw": [1, 4, 6]}]}, "float32"),
        ]
        npy(os.path.join(w, "d.npy"), 6, 64, "<f8")
        for name, inp, needle in bad:
            rc, err, _ = fwd(inp)
            if rc == 0 or needle not in err:
                fails.append(f"refusal '{name}': rc {rc}, stderr {err.strip()!r} lacks {needle!r}")
        # an image file vs its s1-pixels rows, on a checkpoint with the vision tower
        subprocess.run([a.mkmodel, "--shape", "tiny", "--tied", "--vision", "--seed", "6",
                        "--tokenizer", a.tokenizer, "--out", hf + "v"], check=True,
                       capture_output=True)
        subprocess.run([a.export, "--family", "qwen3_5", "--base", hf + "v", "--out",
                        os.path.join(w, "mv")], check=True, capture_output=True)
        pdir = os.path.join(w, "px")
        subprocess.run([a.pixels, a.image, "--out", pdir], check=True, capture_output=True)
        meta = json.load(open(os.path.join(pdir, "0.json")))
        raw = open(os.path.join(pdir, "0.f32"), "rb").read()
        hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 1536), }" % meta["n_patches"]
        h = hdr.encode()
        h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
        with open(os.path.join(w, "p.npy"), "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + raw)
        itoks = toks[:3] + [vs, img_id, ve] + toks[3:5]
        r1 = fwd({"tokens": itoks, "readout": [4, -1], "images": [os.path.abspath(a.image)]},
                 model="mv")
        r2 = fwd({"tokens": itoks, "readout": [4, -1],
                  "images": [{"pixels": "p.npy", "grid_thw": meta["grid_thw"]}]}, model="mv")
        if r1[0] or r2[0]:
            fails.append(f"image file / pixels runs failed: {r1[1]}{r2[1]}")
        elif r1[2] != r2[2] or r1[2]["n_tokens"] != 7 + meta["n_image_tokens"]:
            fails.append("image file and its s1-pixels rows give different results")
        else:
            print(f"image file {os.path.basename(a.image)}: grid {meta['grid_thw']}, "
                  f"{r1[2]['n_tokens']} tokens, equal to its pixel rows")
        rc, err, _ = fwd({"tokens": itoks, "readout": [-1],
                          "images": [{"pixels": "p.npy", "grid_thw": meta["grid_thw"]}]})
        if rc == 0 or "no vision tower" not in err:
            fails.append(f"pixels on a text-only directory: rc {rc} {err!r}")
        rc, err, _ = fwd({"tokens": [1]}, ["--device", "tpu"])
        if rc == 0 or "is not cpu, cuda or cuda:N" not in err:
            fails.append(f"--device tpu accepted: {err!r}")
        # cuda:0 runs where a GPU is; elsewhere it must fail with a message naming the device
        rc, err, _ = fwd({"tokens": [1]}, ["--device", "cuda:0"])
        if rc != 0 and "unavailable" not in err and "without CUDA" not in err:
            fails.append(f"--device cuda:0 without a GPU: rc {rc} {err!r}")
    finally:
        shutil.rmtree(w, ignore_errors=True)
    for f in fails:
        print("FAIL " + f)
    print(f"s1-forward CLI: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
