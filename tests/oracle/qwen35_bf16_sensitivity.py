#!/usr/bin/env python3
"""How far transformers' own bf16 forward moves when its input moves by one bf16 ulp in a few
elements: the noise amplification of a checkpoint, measured on the oracle alone (no s1 code).

Two implementations that are both correct differ in the fp32 accumulation order of their GEMMs,
which flips the bf16 rounding of a small fraction of the outputs by one ulp. Whether such flips stay
small or grow through the layers is a property of the weights, not of the implementation: this
script flips one ulp in a fraction `--flip` of the embedding rows (the input of decoder layer 0) and
reports ||h' - h|| / ||h|| of the final-norm rows (the parity metric of qwen35_bf16_parity.py), per
layer too, with the rms of the residual stream per layer (spec/qwen3_5.md §10.4 step 4 asks for
activations of O(0.1-10)).

Usage: qwen35_bf16_sensitivity.py --model DIR [--device cpu|cuda] [--lengths 1,17,64]
                                  [--flip 1e-3] [--seeds 3] [--scale-branch-out F]
                                  [--out FILE.json]
--flip F below 1 flips a fraction F of the elements, F >= 1 exactly int(F) elements.
DIR is an s1 model directory (s1-model.json + weights.safetensors) or a transformers folder.
Reported, not judged (exit 0 unless loading fails).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

MAX_ID = 151643


def load(path, device):
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    from qwen35_bf16_parity import model_folder
    with tempfile.TemporaryDirectory() as tmp:
        folder = path
        if os.path.exists(os.path.join(path, "s1-model.json")):
            folder, _ = model_folder(path, tmp)
        model = mq.Qwen3_5ForConditionalGeneration.from_pretrained(
            folder, dtype=torch.bfloat16, attn_implementation="sdpa", device_map=device)
    model.eval()
    return model


def flip_ulps(x, frac, gen):
    """x (bf16 tensor) with the last mantissa bit of a random `frac` of its elements flipped (of
    exactly int(frac) elements when frac >= 1)."""
    import torch
    bits = x.contiguous().view(torch.int16).clone()
    if frac >= 1:  # exactly int(frac) elements, at random places
        flat = bits.view(-1)
        idx = torch.randperm(flat.numel(), generator=gen)[: int(frac)].to(bits.device)
        flat[idx] ^= 1
        return bits.view(torch.bfloat16)
    mask = torch.rand(bits.shape, generator=gen, device="cpu").to(bits.device) < frac
    bits[mask] ^= 1
    return bits.view(torch.bfloat16)


def run(model, ids, flip, seed):
    """Final-norm rows and per-layer residual outputs of one forward, the layer-0 input perturbed
    when flip > 0."""
    import torch
    lm = model.model.language_model
    cap = {"layers": []}
    hooks = [lm.norm.register_forward_hook(lambda m, i, o: cap.__setitem__("h", o.detach()))]
    for layer in lm.layers:
        hooks.append(layer.register_forward_hook(
            lambda m, i, o: cap["layers"].append((o[0] if isinstance(o, tuple) else o).detach())))
    if flip > 0:
        gen = torch.Generator().manual_seed(seed)

        def pre(m, args, kwargs):
            if args:
                return (flip_ulps(args[0], flip, gen),) + tuple(args[1:]), kwargs
            kwargs["hidden_states"] = flip_ulps(kwargs["hidden_states"], flip, gen)
            return args, kwargs
        hooks.append(lm.layers[0].register_forward_pre_hook(pre, with_kwargs=True))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids], device=model.device), use_cache=False)
    for h in hooks:
        h.remove()
    return cap["h"][0].float().cpu().numpy(), [x[0].float().cpu().numpy() for x in cap["layers"]]


def rel(a, b):
    d = np.linalg.norm(b, axis=-1)
    return np.linalg.norm(a - b, axis=-1) / np.where(d > 0, d, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--lengths", default="1,17,64")
    ap.add_argument("--flip", type=float, default=1e-3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--scale-branch-out", type=float, default=1.0,
                    help="multiply the residual-branch output projections (o_proj, down_proj, "
                         "linear_attn.out_proj) by this factor first: another init of the same "
                         "checkpoint, e.g. 1/sqrt(2L) for the std-0.02/sqrt(2L) scheme")
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch
    torch.manual_seed(0)
    model = load(a.model, a.device)
    if a.scale_branch_out != 1.0:
        with torch.no_grad():
            for n, p in model.model.language_model.named_parameters():
                if n.endswith(("o_proj.weight", "down_proj.weight", "out_proj.weight")):
                    p.mul_(a.scale_branch_out)
    rng = np.random.default_rng(5)
    res = []
    for t in [int(x) for x in a.lengths.split(",")]:
        ids = [int(x) for x in rng.integers(0, MAX_ID, size=t)]
        h0, layers0 = run(model, ids, 0.0, 0)
        rms = [float(np.sqrt(np.mean(x ** 2))) for x in layers0]
        for s in range(a.seeds):
            h1, layers1 = run(model, ids, a.flip, 100 + s)
            per_layer = [float(rel(x1, x0).max()) for x1, x0 in zip(layers1, layers0)]
            r = float(rel(h1, h0).max())
            res.append({"len": t, "seed": s, "final_norm_rel_max": r, "layer_rel_max": per_layer,
                        "residual_rms": rms})
            print(f"len {t:4d} seed {s}: final-norm rel max {r:.3e}  layer rel "
                  + " ".join(f"{x:.1e}" for x in per_layer[:: max(1, len(per_layer) // 8)])
                  + f"  residual rms {rms[0]:.2f}..{rms[-1]:.2f}", flush=True)
    worst = max(r["final_norm_rel_max"] for r in res)
    what = f"{int(a.flip)} element(s)" if a.flip >= 1 else f"a fraction {a.flip:g}"
    print(f"sensitivity: {what} of the layer-0 inputs moved by one bf16 ulp -> final-norm rows "
          f"move by up to {worst:.3e} (relative)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": a.model, "flip": a.flip, "scale_branch_out": a.scale_branch_out, "results": res, "worst": worst}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
