#!/usr/bin/env python3
"""CI check of the float32 C forward against the transformers 5.17 oracle fixtures
(tests/fixtures/qwen35/, made by tests/oracle/qwen35_fixtures.py on the GPU machine).

For one fixture: rebuild its checkpoint with s1-mkmodel (same arguments; the SHA-256 must equal the
recorded one, else the generator drifted), export it with s1-export (plain, and with the adapter
merged and kept when the fixture has LoRA cases), run s1-forward on every case and compare:
final-norm hidden rows within 1e-4 relative (L2 per row), the same top-20 ids (a swap is accepted
only between logits the oracle itself puts within 1e-6 relative). Text cases also run through
s1-forward's prefix + continuation path (prefix_len 1, 63, 64, 65 where shorter than the prompt).
The image case runs with the oracle's merged image embeddings (text path, scatter, mRoPE) and, when
the build has the vision tower, with the pixel rows too. Standard library only.

Usage: qwen35_oracle_check.py --mkmodel BIN --export BIN --forward BIN --tokenizer FILE
                              --fixture tests/fixtures/qwen35/NAME.json
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HIDDEN_TOL = 1e-4
TIE_TOL = 1e-6
TOPN = 20


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def rel_err(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def top_ok(c_ids, o_ids, o_logits):
    """C's top-20 ids against the oracle's top-24: equal, except swaps among oracle ties."""
    scale = max(abs(v) for v in o_logits) or 1.0
    val = dict(zip(o_ids, o_logits))
    for i in range(TOPN):
        if c_ids[i] == o_ids[i]:
            continue
        if c_ids[i] not in val or abs(val[c_ids[i]] - o_logits[i]) > TIE_TOL * scale:
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    for k in ("mkmodel", "export", "forward", "tokenizer", "fixture"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--verbose", action="store_true", help="print every case's worst error")
    a = ap.parse_args()
    fix_dir = os.path.dirname(os.path.abspath(a.fixture))
    fix = json.load(open(a.fixture))
    name = fix["checkpoint"]
    work = tempfile.mkdtemp(prefix=f"s1_oracle_{name}_")
    failures = []
    worst = {"hidden": 0.0, "hidden_continued": 0.0, "logits": 0.0}
    n_runs = 0
    try:
        hf = os.path.join(work, "hf")
        cmd = [a.mkmodel] + fix["mkmodel_args"] + ["--tokenizer", a.tokenizer, "--out", hf]
        ad = None
        if fix.get("adapter_args"):
            ad = os.path.join(work, "adapter")
            cmd += ["--adapter-out", ad] + fix["adapter_args"]
        run(cmd)
        got = {"model.safetensors": sha256(os.path.join(hf, "model.safetensors"))}
        if ad:
            got["adapter_model.safetensors"] = sha256(os.path.join(ad, "adapter_model.safetensors"))
        if got != fix["sha256"]:
            print(f"FAIL {name}: checkpoint drift: s1-mkmodel now writes {got}, the fixture was "
                  f"made from {fix['sha256']}; regenerate tests/fixtures/qwen35 with "
                  f"tests/oracle/qwen35_fixtures.py")
            return 1
        dirs = {"base": os.path.join(work, "m_base")}
        run([a.export, "--family", "qwen3_5", "--base", hf, "--out", dirs["base"]])
        if ad:
            for mode in ("merge", "keep"):
                dirs["lora_" + mode] = os.path.join(work, "m_" + mode)
                run([a.export, "--family", "qwen3_5", "--base", hf, "--adapter", ad, "--lora",
                     mode, "--out", dirs["lora_" + mode]])
        vision_built = None
        for case in fix["cases"]:
            n = len(case["input_ids"])
            variants = [("one pass", None, None)]
            if "images" in case:
                img = case["images"][0]
                variants = [("image embeds", "embeds", None), ("image pixels", "pixels", None),
                            ("image embeds, prefix 6", "embeds", 6)]
            else:
                variants += [(f"prefix {p}", None, p) for p in (1, 63, 64, 65) if p < n]
            for label, img_kind, prefix in variants:
                inp = {"tokens": case["tokens"], "readout": case["readout"]}
                if img_kind:
                    inp["images"] = [{img_kind: os.path.join(fix_dir, img[img_kind]),
                                      "grid_thw": img["grid_thw"]}]
                if prefix:
                    inp["prefix_len"] = prefix
                ip, op = os.path.join(work, "in.json"), os.path.join(work, "out.json")
                json.dump(inp, open(ip, "w"))
                p = subprocess.run([a.forward, "--model", dirs[case["mode"]], "--input", ip,
                                    "--output", op], capture_output=True, text=True)
                if p.returncode != 0 and img_kind == "pixels" and "no vision tower" in p.stderr:
                    vision_built = False
                    print(f"SKIP {name}/{case['name']} ({label}): this build has no vision tower")
                    continue
                if p.returncode != 0:
                    failures.append(f"{case['name']} ({label}): s1-forward failed: "
                                    f"{p.stderr.strip()}")
                    continue
                if img_kind == "pixels":
                    vision_built = True
                n_runs += 1
                out = json.load(open(op))
                if out["n_tokens"] != n or out["readout"] != case["readout"]:
                    failures.append(f"{case['name']} ({label}): n_tokens {out['n_tokens']} / "
                                    f"readout {out['readout']}, expected {n} / {case['readout']}")
                    continue
                if "rope_delta" in case and case["rope_delta"] is not None and \
                        out["rope_delta"] != case["rope_delta"]:
                    failures.append(f"{case['name']}: rope_delta {out['rope_delta']} != "
                                    f"{case['rope_delta']}")
                key = "hidden_continued" if prefix else "hidden"
                if a.verbose:
                    errs = [rel_err(h, o) for h, o in zip(out["hidden"], case["hidden"])]
                    print(f"  {case['name']} ({label}): hidden rel err max {max(errs):.2e}")
                for i, pos in enumerate(case["readout"]):
                    e = rel_err(out["hidden"][i], case["hidden"][i])
                    worst[key] = max(worst[key], e)
                    if e > HIDDEN_TOL:
                        failures.append(f"{case['name']} ({label}) position {pos}: hidden rel err "
                                        f"{e:.3e} > {HIDDEN_TOL}")
                    c_top = out["logits_top"][i]
                    if not top_ok(c_top["ids"], case["top_ids"][i], case["top_logits"][i]):
                        failures.append(f"{case['name']} ({label}) position {pos}: top-20 ids "
                                        f"{c_top['ids'][:5]}... != oracle "
                                        f"{case['top_ids'][i][:5]}...")
                    le = rel_err(c_top["logits"], case["top_logits"][i][:TOPN])
                    worst["logits"] = max(worst["logits"], le)
        for f in failures:
            print("FAIL " + name + ": " + f)
        print(f"{name}: {len(fix['cases'])} cases, {n_runs} s1-forward runs; worst relative error "
              f"hidden {worst['hidden']:.2e} (continued {worst['hidden_continued']:.2e}), "
              f"top-20 logits {worst['logits']:.2e}; vision tower "
              f"{'checked' if vision_built else 'not built' if vision_built is False else 'n/a'}")
        return 1 if failures else 0
    except Exception as e:
        print(f"FAIL {name}: {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
