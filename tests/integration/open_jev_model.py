"""Turns an s1-export Qwen3.5 model directory into a small Open-Jev one for the service tests:
heads.safetensors with a seeded random fp32 scalar head (open_jev.head.weight [1, H] and
open_jev.head.bias [1]), manifest family "open_jev" with its "open_jev" and "chat" sections, and the
new file listed with its SHA-256. Stdlib only. Used until recipe/open_jev/ provides its own script.

usage: open_jev_model.py MODEL_DIR [--seed N] [--temperature T] [--max-length N]
"""
import argparse
import hashlib
import json
import os
import random
import struct


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--temperature", type=float, default=1.7)
    ap.add_argument("--max-length", type=int, default=1024)
    a = ap.parse_args()
    mpath = os.path.join(a.model_dir, "s1-model.json")
    with open(mpath) as f:
        m = json.load(f)
    cfg = m["config"].get("text_config", m["config"])
    hidden = cfg["hidden_size"]
    rng = random.Random(a.seed)
    w = [rng.gauss(0.0, 1.0) / hidden ** 0.5 for _ in range(hidden)]
    hpath = os.path.join(a.model_dir, "heads.safetensors")
    write_safetensors(hpath, {"open_jev.head.weight": ([1, hidden], w),
                              "open_jev.head.bias": ([1], [0.125])})
    with open(hpath, "rb") as f:
        data = f.read()
    m["files"]["heads.safetensors"] = {"sha256": hashlib.sha256(data).hexdigest(),
                                       "bytes": len(data)}
    m["family"] = "open_jev"
    m["chat"] = {"prefix": "<|im_start|>user\n",
                 "suffix": "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"}
    m["open_jev"] = {"model_id": "Qwen/Qwen3.5-9B", "temperature": a.temperature,
                     "max_length": a.max_length, "aliases": ["open-jev", "jev-latest"],
                     "metadata": {"checkpoint_sha256": hashlib.sha256(data).hexdigest(),
                                  "base_revision": "random-tiny",
                                  "backbone_parameter_dtypes": ["float32"],
                                  "code_commit": None}}
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)


if __name__ == "__main__":
    main()
