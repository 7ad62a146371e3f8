#!/usr/bin/env python3
"""The JEMM speed peer's own answers on a tiny model, for CI to compare s1 with (issue 18: the peer
must compute what s1 computes before its times mean anything). Builds a tiny JEMM directory with
`s1-mkmodel --s1-out --family jemm` (vision tower, a random rank-16 alpha-32 adapter kept on every
language projection; fixed seed: CI rebuilds the same bytes and checks the SHA-256 recorded here),
runs tests/cuda/jemm_peer.py's request path (Peer.respond: the reference procedure with transformers
+ PEFT, adapter unmerged) on the CPU in float32 over tests/oracle/jemm_e2e.py's requests (text
only, 1, 2 and 4 images; 2 to 32 candidates; choice, score and noul; special tokens, a tool spec,
a structured state; "@FILE" images from --images), and writes per request the input tokens, the
float32 label logits and the answers. tests/jemm/test_jemm_peer.py serves the same directory with
the trio (CPU, float32 numerics) and holds every probability to these within 5e-5.

Needs torch 2.11, transformers 5.17, peft 0.21, tokenizers, Pillow, numpy (not CI's venv: e.g.
scripts/bench's .venv-bench plus the peft wheel on PYTHONPATH).

usage: jemm_peer_fixture.py --mkmodel S1_MKMODEL --tokenizer-dir DIR --images DIR --out FILE
                            [--work DIR]
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "cuda"))
import jemm_e2e  # noqa: E402
import jemm_peer  # noqa: E402

SEED = 1818
MKMODEL_ARGS = ["--shape", "tiny", "--vision", "--seed", str(SEED), "--family", "jemm",
                "--adapter-rank", "16", "--adapter-alpha", "32", "--adapter-targets",
                jemm_e2e.TARGETS]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mkmodel", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--images", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/jemm-peer-fixture")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    t0 = time.time()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    model = os.path.join(a.work, "jemm")
    subprocess.run([a.mkmodel, *MKMODEL_ARGS, "--tokenizer",
                    os.path.join(a.tokenizer_dir, "tokenizer.json"), "--tokenizer-config",
                    os.path.join(a.tokenizer_dir, "tokenizer_config.json"), "--s1-out", model],
                   check=True, capture_output=True)
    reqs = list(jemm_e2e.requests())
    env, res = jemm_peer.answer_requests(model, reqs, a.images, "cpu", "float32")
    fix = {"generator": "tests/oracle/jemm_peer_fixture.py", "mkmodel_args": MKMODEL_ARGS,
           "sha256": {f: sha256(os.path.join(model, f))
                      for f in ("weights.safetensors", "adapter.safetensors")},
           "env": env, "requests": []}
    for (name, body), r in zip(reqs, res):
        fix["requests"].append({"name": name, "body": json.dumps(body, ensure_ascii=False),
                                "input_tokens": r["input_tokens"], "raw_fp32": r["raw"],
                                "answers_fp32": r["answers"]})
    fix["seconds"] = round(time.time() - t0, 1)
    with open(a.out, "w") as f:
        json.dump(fix, f, indent=1, ensure_ascii=False)
        f.write("\n")
    shutil.rmtree(a.work, ignore_errors=True)
    print(f"{a.out}: {len(res)} requests, {sum(len(r['raw']) for r in res)} questions, "
          f"{fix['seconds']} s; {env['lora_dtypes']} LoRA, {env['adapter_pairs']} pairs")


if __name__ == "__main__":
    main()
