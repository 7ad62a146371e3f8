#!/usr/bin/env python3
"""Parity of s1's bf16 forward with transformers 5.17 layer by layer, end to end against fp32, and of
the vision tower (issue 18). On the GPU machine s1 is `s1-forward --device cuda:0` (the CUDA
engine, ref-bf16 numerics) against Qwen3_5ForConditionalGeneration in bf16 with sdpa on the same
GPU; with --device cpu both run on the CPU (s1-forward --bf16-rounding, transformers bf16 on the CPU:
the same rounding points, for a machine without a GPU; bounds as on the GPU).

Prompts: seeded random text ids (--lengths) and, with --image GH,GW, one prompt with a random
GH×GW-patch image (3-axis mRoPE positions), each through transformers once with hooks on every
decoder layer: its input x_i and output y_i. Then, per prompt and layer:
  1. transformers' own spread, measured first: its layer i run again on x_i with the last bit of a
     fraction --flip of the elements flipped (--seeds draws; as qwen35_bf16_sensitivity.py does
     end to end): spread_i = max over draws of max over rows ||y_i' - y_i|| / ||y_i||. Replaying the
     layer on the unflipped x_i must give y_i bit for bit (else the replay is not the forward).
     The bound is bound_i = spread_i, fixed here before s1 runs.
  2. s1's layer i alone on transformers' own x_i (s1-forward layer_in / layer_out):
     err_i = max over rows ||s1_i(x_i) - y_i|| / ||y_i||; the layer passes when err_i <= bound_i.
     A layer over its bound is named with its numbers (a bug to chase, not a bound to widen).
End to end (--fp32, default on): transformers fp32 on the same prompts; per prompt and readout row
(positions 0, n/2, n-1), d_s1 = ||s1 - fp32|| / ||fp32|| of the final-norm rows (s1's own whole
forward, s1's vision tower on the image prompt) and d_hf = the same for transformers bf16; the
prompt passes when max d_s1 <= 1.25 * max d_hf.
Vision tower (--image, a model with the tower): the merged rows of s1's CUDA tower (vision_only,
vision_out), of s1's float32 CPU tower (--cpu-forward: an s1-forward that runs on the CPU, in the
background while the rest runs), of transformers bf16 and fp32 (get_image_features) on the same
pixels; judged: ||cuda - cpu32|| / ||cpu32|| <= 1.25 * ||hf_bf16 - hf_fp32|| / ||hf_fp32||, and
the CPU tower within 1e-4 of transformers fp32 (float32 against float32; reported with both).

--no-layers skips the layer-by-layer part (the spreads, s1's layer jobs): the end-to-end and vision
checks alone (issue 18's 27B rerun, whose layer part had passed before the fp32 load failed).

Usage: qwen35_layer_parity.py --model DIR --forward S1_FORWARD --work DIR [--device cuda:0|cpu]
         [--lengths 17,129,333] [--image 16,24] [--flip 0.01] [--seeds 3] [--no-fp32] [--no-layers]
         [--cpu-forward S1_FORWARD] [--vision-grid 8,8] [--seed N] [--out FILE.json]
Exit status 0 only when every judged check passes.
On a machine without a GPU (torch CPU from PyPI in a scratch venv, outside CI): python3 -m venv V;
V/bin/pip install --no-deps torch==2.11.0; V/bin/pip install transformers==5.17.0 numpy sympy
networkx jinja2 nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 'nvidia-cufile<1.16';
LD_LIBRARY_PATH=/usr/local/cuda/lib64 plus those packages' lib folders (torch's CUDA build
imports them even on the CPU).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from qwen35_bf16_parity import model_folder  # noqa: E402

MAX_ID = 151643
E2E_RATIO = 1.25
CPU_TOWER_TOL = 1e-4
DEV = "cuda"


def rowrel(a, b):
    """max over rows of ||a - b|| / ||b|| (rows: the last axis), float64."""
    a = np.asarray(a, np.float64).reshape(-1, np.shape(b)[-1])
    b = np.asarray(b, np.float64).reshape(-1, np.shape(b)[-1])
    d = np.linalg.norm(b, axis=1)
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.where(d > 0, d, 1.0)))


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    d = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / d) if d > 0 else float("inf")


def flip_ulps(x, frac, gen):
    """x (bf16 tensor) with the last mantissa bit of a random fraction `frac` of its elements
    flipped (at least one element)."""
    import torch
    bits = x.contiguous().view(torch.int16).clone()
    flat = bits.view(-1)
    k = max(1, int(round(frac * flat.numel())))
    idx = torch.randperm(flat.numel(), generator=gen)[:k].to(bits.device)
    flat[idx] ^= 1
    return bits.view(torch.bfloat16)


def hf_load(path, dtype):
    import tempfile
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    with tempfile.TemporaryDirectory() as tmp:
        folder, man = model_folder(path, tmp)
        model = mq.Qwen3_5ForConditionalGeneration.from_pretrained(
            folder, dtype=getattr(torch, dtype), attn_implementation="sdpa", device_map=DEV)
    model.eval()
    return model, man


def hf_inputs(model, case, pixels):
    import torch
    ids = case["hf_ids"]
    kw = dict(input_ids=torch.tensor([ids], device=DEV), use_cache=False)
    if pixels is not None:
        img = model.config.image_token_id
        kw.update(pixel_values=torch.from_numpy(pixels).to(DEV, model.dtype),
                  image_grid_thw=torch.tensor([case["grid"]], device=DEV),
                  mm_token_type_ids=torch.tensor([[1 if t == img else 0 for t in ids]], device=DEV))
    return kw


def hf_trace(model, case, pixels):
    """One forward with hooks: per layer (x_i bf16 tensor, replay args, kwargs, y_i), and the
    final-norm rows [n, H] float32."""
    import torch
    lm = model.model.language_model
    cap = {"layers": [], "norm": None}
    hooks = []
    for i, layer in enumerate(lm.layers):
        def pre(m, args, kwargs, i=i):
            x = args[0] if args else kwargs["hidden_states"]
            cap["layers"].append({"x": x.detach().clone(), "args": args[1:],
                                  "kwargs": {k: v for k, v in kwargs.items() if k != "hidden_states"},
                                  "kw_x": not args})
        hooks.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        hooks.append(layer.register_forward_hook(
            lambda m, a, o, i=i: cap["layers"][i].__setitem__("y", (o[0] if isinstance(o, tuple) else o).detach().clone())))
    hooks.append(lm.norm.register_forward_hook(lambda m, a, o: cap.__setitem__("norm", o.detach())))
    with torch.no_grad():
        model(**hf_inputs(model, case, pixels))
    for h in hooks:
        h.remove()
    return cap["layers"], cap["norm"][0].float().cpu().numpy()


def replay(layer, rec, x):
    import torch
    with torch.no_grad():
        if rec["kw_x"]:
            o = layer(hidden_states=x, *rec["args"], **rec["kwargs"])
        else:
            o = layer(x, *rec["args"], **rec["kwargs"])
    return o[0] if isinstance(o, tuple) else o


def run_s1(forward, model, device, jobs, work, tag):
    """One s1-forward process for every job [(name, body)], largest first (the CUDA engine is kept
    between jobs that fit its reservation)."""
    cmd = [forward, "--model", model, "--device", device]
    for name, body in jobs:
        inp = os.path.join(work, f"{tag}_{name}.in.json")
        with open(inp, "w") as f:
            json.dump(body, f)
        cmd += ["--input", inp, "--output", os.path.join(work, f"{tag}_{name}.out.json")]
    if device == "cpu":
        cmd.append("--bf16-rounding")
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"s1-forward exited {r.returncode}: {r.stderr.strip()[-3000:]}")
    out = {}
    for name, _ in jobs:
        with open(os.path.join(work, f"{tag}_{name}.out.json")) as f:
            out[name] = json.load(f)
    return out, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--forward", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--lengths", default="17,129,333")
    ap.add_argument("--image", default="16,24", help="GH,GW patches of the image prompt ('' = none)")
    ap.add_argument("--flip", type=float, default=0.01)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--no-fp32", action="store_true")
    ap.add_argument("--no-layers", action="store_true", help="end to end and vision only")
    ap.add_argument("--cpu-forward", help="s1-forward for the float32 CPU tower (vision check)")
    ap.add_argument("--vision-grid", default="8,8")
    ap.add_argument("--seed", type=int, default=1818)
    ap.add_argument("--out")
    a = ap.parse_args()
    global DEV
    DEV = "cpu" if a.device == "cpu" else "cuda"
    import torch
    os.makedirs(a.work, exist_ok=True)
    t_start = time.monotonic()
    rng = np.random.default_rng(a.seed)
    with open(os.path.join(a.model, "s1-model.json")) as f:
        man = json.load(f)
    cfg = man["config"]
    tc = cfg.get("text_config", cfg)
    L, H = tc["num_hidden_layers"], tc["hidden_size"]
    has_vision = bool(man.get("vision"))
    cases = []
    for t in [int(x) for x in a.lengths.split(",") if x]:
        ids = [int(x) for x in rng.integers(0, MAX_ID, size=t)]
        cases.append({"name": f"text{t}", "hf_ids": ids, "tokens": ids})
    pixels = None
    vpix = None
    if a.image and has_vision:
        gh, gw = (int(x) for x in a.image.split(","))
        img, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
        pixels = ((rng.integers(0, 256, size=(gh * gw, 1536)) - 128) / 128.0).astype(np.float32)
        np.save(os.path.join(a.work, "image_pixels.npy"), pixels)
        pre = [int(x) for x in rng.integers(0, MAX_ID, size=11)]
        post = [int(x) for x in rng.integers(0, MAX_ID, size=7)]
        n_img = gh * gw // 4
        cases.append({"name": "image", "hf_ids": pre + [vs] + [img] * n_img + [ve] + post,
                      "tokens": pre + [vs, img, ve] + post, "grid": [1, gh, gw],
                      "pixels": "image_pixels.npy"})
    for c in cases:
        n = len(c["hf_ids"])
        c["readout"] = sorted({0, n // 2, n - 1})
    # the float32 CPU tower in the background (slow at real width: one CPU thread)
    cpu_tower = None
    if pixels is not None and a.cpu_forward:
        vgh, vgw = (int(x) for x in a.vision_grid.split(","))
        vpix = ((rng.integers(0, 256, size=(vgh * vgw, 1536)) - 128) / 128.0).astype(np.float32)
        np.save(os.path.join(a.work, "vision_pixels.npy"), vpix)
        vbody = {"tokens": [cfg["vision_start_token_id"], cfg["image_token_id"],
                            cfg["vision_end_token_id"]],
                 "images": [{"pixels": "vision_pixels.npy", "grid_thw": [1, vgh, vgw]}],
                 "vision_only": True, "vision_out": "vision_cpu.npy"}
        with open(os.path.join(a.work, "vision_cpu.in.json"), "w") as f:
            json.dump(vbody, f)
        cpu_tower = subprocess.Popen(
            [a.cpu_forward, "--model", a.model, "--device", "cpu", "--input",
             os.path.join(a.work, "vision_cpu.in.json"), "--output",
             os.path.join(a.work, "vision_cpu.out.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        t_cpu0 = time.monotonic()

    # 1. transformers bf16: traces, then its own spread per layer (the bounds), before s1 runs
    t0 = time.monotonic()
    model, _ = hf_load(a.model, "bfloat16")
    t_load = time.monotonic() - t0
    lm = model.model.language_model
    gen = torch.Generator().manual_seed(a.seed + 1)
    results = []
    hf_final = {}
    for c in cases:
        recs, fin = hf_trace(model, c, pixels if "grid" in c else None)
        assert len(recs) == L, (len(recs), L)
        hf_final[c["name"]] = fin
        if a.no_layers:
            print(f"{c['name']:>9}: n {len(c['hf_ids'])} (layers skipped: --no-layers)", flush=True)
            continue
        xs = np.stack([r["x"][0].float().cpu().numpy() for r in recs])
        np.save(os.path.join(a.work, f"layer_in_{c['name']}.npy"), xs.astype(np.float32))
        c["y"] = np.stack([r["y"][0].float().cpu().numpy() for r in recs])
        c["spread"], c["replay_exact"] = [], []
        for i, r in enumerate(recs):
            y0 = replay(lm.layers[i], r, r["x"])
            c["replay_exact"].append(bool(torch.equal(y0, r["y"])))
            sp = 0.0
            for s in range(a.seeds):
                y1 = replay(lm.layers[i], r, flip_ulps(r["x"], a.flip, gen))
                sp = max(sp, rowrel(y1[0].float().cpu().numpy(), r["y"][0].float().cpu().numpy()))
            c["spread"].append(sp)
        print(f"{c['name']:>9}: n {len(c['hf_ids'])}, transformers' spread per layer (flip "
              f"{a.flip:g}, {a.seeds} draws) {min(c['spread']):.2e}..{max(c['spread']):.2e}, replay "
              f"exact {sum(c['replay_exact'])}/{L}", flush=True)
    hf_vis = {}
    if vpix is not None:
        with torch.no_grad():
            g = torch.tensor([[1, vgh, vgw]], device=DEV)
            out = model.model.get_image_features(torch.from_numpy(vpix).to(DEV, model.dtype), g)
            feats = out.pooler_output if hasattr(out, "pooler_output") else out
            feats = feats[0] if isinstance(feats, (tuple, list)) else feats
            hf_vis["bf16"] = feats.float().cpu().numpy().reshape(-1, feats.shape[-1])
    t_hf = time.monotonic() - t0
    # every reference to the bf16 model goes before the fp32 one loads (27B: 54 + 101 GiB would not
    # fit; the H200 run of 2026-12-01 failed here while `lm` still held the language model)
    del model, lm
    recs = None
    import gc
    gc.collect()
    if DEV == "cuda":
        torch.cuda.empty_cache()

    # 2. s1: every layer alone on transformers' inputs, and its own whole forward (one process)
    jobs = []
    for c in cases:
        body = {"tokens": c["tokens"], "layer_in": f"layer_in_{c['name']}.npy",
                "layer_out": f"layer_out_{c['name']}.npy"}
        if "grid" in c:
            body["images"] = [{"grid_thw": c["grid"]}]
        if not a.no_layers:
            jobs.append((len(c["hf_ids"]), "L_" + c["name"], body))
        e2e = {"tokens": c["tokens"], "readout": c["readout"]}
        if "grid" in c:
            e2e["images"] = [{"pixels": c["pixels"], "grid_thw": c["grid"]}]
        jobs.append((len(c["hf_ids"]) - 1, "E_" + c["name"], e2e))
    if vpix is not None and DEV == "cuda":
        jobs.append((0, "V_cuda", {"tokens": [cfg["vision_start_token_id"], cfg["image_token_id"],
                                              cfg["vision_end_token_id"]],
                                   "images": [{"pixels": "vision_pixels.npy",
                                               "grid_thw": [1, vgh, vgw]}],
                                   "vision_only": True, "vision_out": "vision_cuda.npy"}))
    jobs.sort(key=lambda j: -j[0])
    s1, t_s1 = run_s1(a.forward, a.model, a.device, [(n, b) for _, n, b in jobs], a.work, "s1")
    fails = []
    print(f"s1-forward: {len(jobs)} jobs in {t_s1:.1f} s", flush=True)
    for c in cases:
        if a.no_layers:
            results.append({"case": c["name"], "n": len(c["hf_ids"]), "pass_layers": None})
            continue
        lo = np.load(os.path.join(a.work, f"layer_out_{c['name']}.npy"))
        c["err"] = [rowrel(lo[i], c["y"][i]) for i in range(L)]
        bad = [i for i in range(L) if not (c["err"][i] <= c["spread"][i])]
        for i in bad:
            fails.append(f"{c['name']} layer {i} ({tc['layer_types'][i]}): s1 {c['err'][i]:.3e} > "
                         f"transformers' spread {c['spread'][i]:.3e}")
        worst = max(range(L), key=lambda i: c["err"][i] / max(c["spread"][i], 1e-30))
        print(f"{c['name']:>9}: layers within transformers' spread {L - len(bad)}/{L}; s1 "
              f"{min(c['err']):.2e}..{max(c['err']):.2e}; worst ratio layer {worst} "
              f"{c['err'][worst]:.3e} / {c['spread'][worst]:.3e}", flush=True)
        results.append({"case": c["name"], "n": len(c["hf_ids"]), "layer_types": tc["layer_types"],
                        "spread": c["spread"], "s1_err": c["err"],
                        "replay_exact": c["replay_exact"],
                        "pass_layers": L - len(bad)})
        del c["y"]
    summary = {"model": os.path.abspath(a.model), "device": a.device, "layers": L, "hidden": H,
               "flip": a.flip, "seeds": a.seeds, "e2e_ratio_bound": E2E_RATIO,
               "layers_run": not a.no_layers,
               "hf_load_s": t_load, "hf_bf16_s": t_hf, "s1_s": t_s1, "results": results,
               "fails": fails}

    def save():
        summary["total_s"] = time.monotonic() - t_start
        if a.out:
            with open(a.out, "w") as f:
                json.dump(summary, f, indent=1)
    save()  # the layer results stand even if a later stage fails
    # 3. end to end against transformers fp32
    if not a.no_fp32:
        t0 = time.monotonic()
        if DEV == "cuda":
            summary["gpu_bytes_before_fp32"] = torch.cuda.memory_allocated()
        model32, _ = hf_load(a.model, "float32")
        if DEV == "cuda":
            summary["hf_fp32_gpu_bytes"] = torch.cuda.memory_allocated()
        for c, r in zip(cases, results):
            _, fin32 = hf_trace(model32, c, pixels if "grid" in c else None)
            o = s1["E_" + c["name"]]
            pos = o["readout"]
            d_s1 = max(rel(h, fin32[p]) for h, p in zip(o["hidden"], pos))
            d_hf = max(rel(hf_final[c["name"]][p], fin32[p]) for p in pos)
            d_s1hf = max(rel(h, hf_final[c["name"]][p]) for h, p in zip(o["hidden"], pos))
            ok = d_s1 <= E2E_RATIO * d_hf
            if not ok:
                fails.append(f"{c['name']}: s1 bf16 {d_s1:.3e} from transformers fp32 > "
                             f"{E2E_RATIO} x transformers bf16's {d_hf:.3e}")
            r.update({"e2e_s1_vs_fp32": d_s1, "e2e_hf_bf16_vs_fp32": d_hf,
                      "e2e_s1_vs_hf_bf16": d_s1hf, "e2e_ratio": d_s1 / d_hf if d_hf else None,
                      "e2e_pass": ok})
            print(f"{c['name']:>9}: vs transformers fp32: s1 bf16 {d_s1:.3e}, transformers bf16 "
                  f"{d_hf:.3e} (ratio {d_s1 / d_hf:.2f} <= {E2E_RATIO}: {'pass' if ok else 'FAIL'});"
                  f" s1 vs transformers bf16 {d_s1hf:.3e}", flush=True)
        if vpix is not None:
            with torch.no_grad():
                out = model32.model.get_image_features(torch.from_numpy(vpix).to(DEV, model32.dtype),
                                                       torch.tensor([[1, vgh, vgw]], device=DEV))
                feats = out.pooler_output if hasattr(out, "pooler_output") else out
                feats = feats[0] if isinstance(feats, (tuple, list)) else feats
                hf_vis["fp32"] = feats.float().cpu().numpy().reshape(-1, feats.shape[-1])
        del model32
        if DEV == "cuda":
            torch.cuda.empty_cache()
        t_fp32 = time.monotonic() - t0
    # 4. vision tower: CUDA against the float32 CPU tower, transformers bf16/fp32 for scale
    vision = None
    if cpu_tower is not None:
        try:
            _, err = cpu_tower.communicate(timeout=max(10.0, 900 - (time.monotonic() - t_start)))
        except subprocess.TimeoutExpired:
            cpu_tower.kill()
            err = "timeout"
        vision = {"grid": [1, vgh, vgw], "cpu_tower_s": time.monotonic() - t_cpu0}
        if cpu_tower.returncode != 0:
            fails.append(f"vision: the CPU tower failed: {str(err)[-300:]}")
        else:
            vc = np.load(os.path.join(a.work, "vision_cpu.npy"))
            vision["hf_fp32_vs_cpu32"] = rel(hf_vis["fp32"], vc) if "fp32" in hf_vis else None
            if DEV == "cuda":
                vg = np.load(os.path.join(a.work, "vision_cuda.npy"))
                vision["cuda_vs_cpu32"] = rel(vg, vc)
                if "fp32" in hf_vis:
                    vision["cuda_vs_hf_fp32"] = rel(vg, hf_vis["fp32"])
                    vision["hf_bf16_vs_hf_fp32"] = rel(hf_vis["bf16"], hf_vis["fp32"])
                    ok = vision["cuda_vs_cpu32"] <= E2E_RATIO * vision["hf_bf16_vs_hf_fp32"]
                    vision["pass"] = ok
                    if not ok:
                        fails.append(f"vision: CUDA tower {vision['cuda_vs_cpu32']:.3e} from the CPU "
                                     f"tower > {E2E_RATIO} x transformers bf16's "
                                     f"{vision['hf_bf16_vs_hf_fp32']:.3e}")
            if vision.get("hf_fp32_vs_cpu32") is not None and \
                    not vision["hf_fp32_vs_cpu32"] <= CPU_TOWER_TOL:
                fails.append(f"vision: CPU tower {vision['hf_fp32_vs_cpu32']:.3e} from transformers "
                             f"fp32 > {CPU_TOWER_TOL}")
            print("vision tower " + ", ".join(f"{k} {v:.3e}" if isinstance(v, float) else f"{k} {v}"
                                              for k, v in vision.items()), flush=True)
    summary.update({"hf_fp32_s": None if a.no_fp32 else t_fp32, "vision": vision})
    save()
    n_lay = sum(r["pass_layers"] or 0 for r in results)
    print(f"layer parity {os.path.basename(a.model.rstrip('/'))}: {len(cases)} prompts x {L} layers, "
          + ("layers not run (--no-layers); " if a.no_layers else
             f"{n_lay}/{len(cases) * L} within transformers' own spread; ") +
          f"{'PASS' if not fails else 'FAIL: ' + '; '.join(fails[:12])}"
          f"{' (+%d more)' % (len(fails) - 12) if len(fails) > 12 else ''}", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
