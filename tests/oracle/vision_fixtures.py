#!/usr/bin/env python3
"""Oracle fixtures for the float32 C vision tower (executor/ex_vision.c), from transformers 5.17.

Runs on the GPU machine (transformers, torch, safetensors, numpy), but computes on the CPU in float32
with eager attention: that is the fp32 oracle of spec/qwen3_5.md §9.1. For each test configuration
it builds the HF vision model (Qwen3_5VisionModel), seeds and perturbs the weights (every LayerNorm
weight and bias, every bias, a wider pos_embed), rounds the weights to bf16 (so the checkpoint is a
realistic BF16 file and the fp32 model holds exactly those values), saves them as
`<name>.safetensors` under the prefix `model.visual.`, and runs a few images through it.

Pixel values are not stored: they come from a counter-based hash that tests/vision/ re-implements
(see `pixels()` below), so the fixtures hold only weights and outputs. Written to OUT_DIR:
  index.json                   configs, versions, markers, cases (grids, seeds, files, checksums)
  <cfg>.safetensors            BF16 weights, keys `model.visual.*`
  <cfg>_<case>.out.bin         merger output, float32 little-endian [n_patches/4, out_hidden]
  <cfg>_<case>.blk<k>.bin      optional per-stage outputs [n_patches, hidden] (k = 0: patch embed +
                               position embedding; k = i+1: after block i)
It also re-computes every case with an independent float64 implementation of the spec (§6) and
prints the largest deviations, as a check of the spec against the installed transformers.

Usage: python3 vision_fixtures.py OUT_DIR
"""
import json
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

import transformers
from safetensors.torch import save_file

PATCH_DIM = 3 * 2 * 16 * 16

# tiny-A (spec §10.1) and a second configuration with the real 9B/27B head dim 72 (one head), a 6x6
# learned position grid, the exact-erf GELU in the blocks and depth 1.
CONFIGS = {
    "tinyA": {
        "model_type": "qwen3_5_vision",
        "depth": 2, "hidden_size": 48, "num_heads": 2, "intermediate_size": 96,
        "hidden_act": "gelu_pytorch_tanh", "in_channels": 3,
        "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
        "num_position_embeddings": 16, "out_hidden_size": 64,
        "deepstack_visual_indexes": [],
    },
    "hd72": {
        "model_type": "qwen3_5_vision",
        "depth": 1, "hidden_size": 72, "num_heads": 1, "intermediate_size": 88,
        "hidden_act": "gelu", "in_channels": 3,
        "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
        "num_position_embeddings": 36, "out_hidden_size": 40,
        "deepstack_visual_indexes": [],
    },
}

# name -> list of (t, h, w); seeds are derived from the grid so that a two-image case reuses the
# pixels of its one-image cases. `blocks`: also dump the per-stage outputs.
CASES = {
    "tinyA": [
        ("g1x16x16", [(1, 16, 16)], False),
        ("g1x20x16", [(1, 20, 16)], False),
        ("g1x20x14", [(1, 20, 14)], True),
        ("g1x4x6", [(1, 4, 6)], False),
        ("g2x4x6", [(2, 4, 6)], False),
        ("two", [(1, 4, 6), (1, 20, 14)], False),
    ],
    "hd72": [
        ("g1x8x12", [(1, 8, 12)], True),
        ("g1x20x14", [(1, 20, 14)], False),
        ("g1x2x2", [(1, 2, 2)], False),
        ("two", [(1, 2, 2), (1, 8, 12)], False),
    ],
}


def grid_seed(t, h, w):
    return (t * 1000003 + h * 1009 + w * 7 + 12345) & 0xFFFFFFFF


def pixels(seed, n_rows, dim=PATCH_DIM):
    """Deterministic pixel rows in [-1, 1), multiples of 1/128 (exact in float32).
    Element i (row-major over [n_rows, dim]): h = uint32(i * 0x9E3779B9 + seed), then the
    murmur3 fmix32 finaliser; value = ((h >> 24) - 128) / 128."""
    m = np.uint64(0xFFFFFFFF)
    i = np.arange(n_rows * dim, dtype=np.uint64)
    h = (i * np.uint64(0x9E3779B9) + np.uint64(seed)) & m
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & m
    h ^= h >> np.uint64(16)
    v = ((h >> np.uint64(24)).astype(np.int32) - 128).astype(np.float32) / np.float32(128.0)
    return v.reshape(n_rows, dim)


def markers():
    import transformers.models.qwen3_5.modeling_qwen3_5 as mq
    src = open(mq.__file__).read()
    out = {name: (name in src) for name in (
        "fast_pos_embed_interpolate", "get_vision_interpolation_indices_and_weights",
        "rot_pos_emb", "get_vision_position_ids", "get_vision_attention_seqlens",
        "solve_triangular", "deepstack")}
    out["vision_classes"] = sorted(n for n in dir(mq) if "Vision" in n)
    try:
        import transformers.vision_utils as vu
        vsrc = open(vu.__file__).read()
        m = re.search(r"source = (.*)", vsrc)
        out["vision_utils_source_line"] = m.group(1).strip() if m else None
    except Exception as e:  # older layout
        out["vision_utils_source_line"] = "n/a: %r" % (e,)
    return out


def build_model(vc):
    """Returns (model, how). Tries the vision model class directly, then the full model's .visual."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    from transformers.models.qwen3_5 import configuration_qwen3_5 as cq
    errors = []
    kw = dict(vc)
    for drop in ([], ["deepstack_visual_indexes"], ["deepstack_visual_indexes", "model_type"]):
        k2 = {k: v for k, v in kw.items() if k not in drop}
        try:
            cfg = cq.Qwen3_5VisionConfig(**k2)
            try:
                cfg._attn_implementation = "eager"
            except Exception as e:
                errors.append("set eager on config: %r" % (e,))
            model = mq.Qwen3_5VisionModel(cfg)
            return model, "Qwen3_5VisionModel(Qwen3_5VisionConfig(drop=%s))" % drop, errors
        except Exception as e:
            errors.append("vision config drop=%s: %r" % (drop, e))
    text = {
        "model_type": "qwen3_5_text", "vocab_size": 512, "hidden_size": vc["out_hidden_size"],
        "intermediate_size": 96, "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 24, "linear_conv_kernel_dim": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                            "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                            "mrope_section": [3, 3, 2]},
    }
    cfg = cq.Qwen3_5Config(text_config=text, vision_config=dict(vc))
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:
        errors.append("set eager on full config: %r" % (e,))
    full = mq.Qwen3_5ForConditionalGeneration(cfg)
    return full.model.visual, "Qwen3_5ForConditionalGeneration(...).model.visual", errors


def perturb(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("bias"):
                p.add_(0.1 * n)
            elif "norm" in name:
                p.add_(0.1 * n)  # LayerNorm weight: 1 + N(0, 0.1)
            elif name.startswith("pos_embed"):
                p.copy_(0.5 * n)
            elif name.endswith("attn.qkv.weight"):
                p.mul_(8.0)  # sharper attention so that a wrong segment or rotary shows
            elif name.endswith("mlp.linear_fc1.weight") or name == "merger.linear_fc1.weight":
                p.mul_(8.0)  # GELU inputs of O(1), where the erf and tanh forms differ
            elif name.endswith("mlp.linear_fc2.weight"):
                p.mul_(3.0)  # a block MLP that moves the residual stream
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def run_model(model, pix, grid):
    """Returns (merged [N/4, O], stages [k][N, V]) from the HF model."""
    stages = {}
    hooks = [model.blocks[0].register_forward_pre_hook(
        lambda m, args, kwargs: stages.__setitem__(0, (args[0] if args else kwargs["hidden_states"]).detach().clone()),
        with_kwargs=True)]
    for i, blk in enumerate(model.blocks):
        def post(m, args, out, i=i):
            t = out[0] if isinstance(out, (tuple, list)) else out
            stages[i + 1] = t.detach().clone()
        hooks.append(blk.register_forward_hook(post))
    try:
        with torch.no_grad():
            out = model(pix, grid_thw=grid)
    finally:
        for h in hooks:
            h.remove()
    n = pix.shape[0]
    o = model.config.out_hidden_size
    cands = []
    if isinstance(out, torch.Tensor):
        cands.append(out)
    else:
        for key in ("pooler_output", "last_hidden_state"):
            v = getattr(out, key, None)
            if isinstance(v, torch.Tensor):
                cands.append(v)
        if isinstance(out, (tuple, list)):
            cands += [v for v in out if isinstance(v, torch.Tensor)]
    merged = [c for c in cands if tuple(c.shape) == (n // 4, o)]
    if not merged:
        raise RuntimeError("no merger output of shape %s among %s" % ((n // 4, o), [tuple(c.shape) for c in cands]))
    return merged[0].detach().clone(), [stages[k] for k in sorted(stages)]


# ---------- independent float64 implementation of spec §6 (a check, not the oracle) ----------

def ref_forward(sd, vc, pix, grids):
    V = vc["hidden_size"]; nh = vc["num_heads"]; hd = V // nh; S = int(round(math.sqrt(vc["num_position_embeddings"])))
    g = {k: v.double() for k, v in sd.items()}
    x = pix.double() @ g["patch_embed.proj.weight"].reshape(V, -1).T + g["patch_embed.proj.bias"]
    rows, cols, segs = [], [], []
    for (t, h, w) in grids:
        for _ in range(t):
            for bh in range(h // 2):
                for bw in range(w // 2):
                    for ih in range(2):
                        for iw in range(2):
                            rows.append(2 * bh + ih); cols.append(2 * bw + iw)
            segs.append(h * w)
    hs = []
    for (t, h, w) in grids:
        hs += [(h, w)] * (t * h * w)
    E = g["pos_embed.weight"]
    pe = torch.zeros_like(x)
    for r, (row, col) in enumerate(zip(rows, cols)):
        h, w = hs[r]
        sr = row * (S - 1) / max(h - 1, 1); sc = col * (S - 1) / max(w - 1, 1)
        r0, c0 = int(math.floor(sr)), int(math.floor(sc)); fr, fc = sr - r0, sc - c0
        r1, c1 = min(r0 + 1, S - 1), min(c0 + 1, S - 1)
        pe[r] = ((1 - fr) * (1 - fc) * E[r0 * S + c0] + (1 - fr) * fc * E[r0 * S + c1]
                 + fr * (1 - fc) * E[r1 * S + c0] + fr * fc * E[r1 * S + c1])
    x = x + pe
    stages = [x.clone()]
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd // 2, 2, dtype=torch.float64) / (hd // 2)))
    rr = torch.tensor(rows, dtype=torch.float64)[:, None] * inv
    cc = torch.tensor(cols, dtype=torch.float64)[:, None] * inv
    ang = torch.cat([rr, cc, rr, cc], dim=1)  # [N, hd]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def rot(q):
        q1, q2 = q[..., : hd // 2], q[..., hd // 2:]
        return q * cos + torch.cat([-q2, q1], dim=-1) * sin

    def ln(x, p):
        return F.layer_norm(x, (V,), g[p + ".weight"], g[p + ".bias"], 1e-6)

    def act(x, kind):
        if kind == "gelu_pytorch_tanh":
            return F.gelu(x, approximate="tanh")
        return F.gelu(x)

    n = x.shape[0]
    for i in range(vc["depth"]):
        p = "blocks.%d." % i
        a = ln(x, p + "norm1")
        qkv = (a @ g[p + "attn.qkv.weight"].T + g[p + "attn.qkv.bias"]).reshape(n, 3, nh, hd)
        q, k, v = rot(qkv[:, 0]), rot(qkv[:, 1]), qkv[:, 2]
        o = torch.empty(n, nh, hd, dtype=torch.float64)
        s0 = 0
        for L in segs:
            qs, ks, vs = q[s0:s0 + L].transpose(0, 1), k[s0:s0 + L].transpose(0, 1), v[s0:s0 + L].transpose(0, 1)
            pr = torch.softmax(qs @ ks.transpose(1, 2) * hd ** -0.5, dim=-1)
            o[s0:s0 + L] = (pr @ vs).transpose(0, 1)
            s0 += L
        x = x + o.reshape(n, V) @ g[p + "attn.proj.weight"].T + g[p + "attn.proj.bias"]
        m = ln(x, p + "norm2")
        f = act(m @ g[p + "mlp.linear_fc1.weight"].T + g[p + "mlp.linear_fc1.bias"], vc["hidden_act"])
        x = x + f @ g[p + "mlp.linear_fc2.weight"].T + g[p + "mlp.linear_fc2.bias"]
        stages.append(x.clone())
    y = ln(x, "merger.norm").reshape(n // 4, 4 * V)
    z = F.gelu(y @ g["merger.linear_fc1.weight"].T + g["merger.linear_fc1.bias"])
    return z @ g["merger.linear_fc2.weight"].T + g["merger.linear_fc2.bias"], stages


def relerr(a, b):
    b = b.double(); a = a.double()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(8)
    index = {
        "generator": "tests/oracle/vision_fixtures.py",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "device": "cpu", "dtype": "float32", "attn": "eager",
        "markers": markers(),
        "pixels": "element i of [n_rows, 1536]: h = fmix32(uint32(i * 0x9E3779B9 + seed)); value = ((h >> 24) - 128) / 128",
        "error_metric": "max|c - o| / max|o| over the tensor",
        "configs": {},
    }
    for ci, (name, vc) in enumerate(CONFIGS.items()):
        try:
            index["configs"][name] = run_config(out_dir, ci, name, vc)
        except Exception:
            import traceback
            traceback.print_exc()
            index["configs"][name] = {"error": traceback.format_exc()}
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    print(json.dumps(index["markers"]))
    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print("fixtures: %d files, %d bytes" % (len(os.listdir(out_dir)), total))


def run_config(out_dir, ci, name, vc):
    torch.manual_seed(1234 + ci)
    model, how, notes = build_model(vc)
    model = model.to(torch.float32).eval()
    try:
        model.set_attn_implementation("eager")
    except Exception as e:
        notes.append("set_attn_implementation: %r" % (e,))
    gen = torch.Generator().manual_seed(99 + ci)
    perturb(model, gen)
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file({"model.visual." + k: v.to(torch.bfloat16) for k, v in sd.items()},
              os.path.join(out_dir, name + ".safetensors"))
    inv = getattr(getattr(model, "rotary_pos_emb", None), "inv_freq", None)
    cinfo = {
        "vision_config": vc, "weights": name + ".safetensors", "built_with": how, "notes": notes,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "resolved_config": {k: v for k, v in model.config.to_dict().items()
                            if isinstance(v, (int, float, str, list, dict, type(None)))},
        "n_tensors": len(sd),
        "tensors": {k: list(v.shape) for k, v in sd.items()},
        "rotary_inv_freq": inv.tolist() if inv is not None else None,
        "cases": [],
    }
    print("[%s] built with %s; attn=%s; %d tensors; notes=%s" % (name, how, cinfo["attn_implementation"], len(sd), notes))
    for cname, grids, dump in CASES[name]:
        seeds = [grid_seed(*g) for g in grids]
        pix = np.concatenate([pixels(s, t * h * w) for s, (t, h, w) in zip(seeds, grids)])
        pix_t = torch.from_numpy(pix)
        grid_t = torch.tensor(grids, dtype=torch.int64)
        merged, stages = run_model(model, pix_t, grid_t)
        base = "%s_%s" % (name, cname)
        merged.numpy().astype("<f4").tofile(os.path.join(out_dir, base + ".out.bin"))
        case = {
            "name": cname, "grids": [list(g) for g in grids], "seeds": seeds,
            "pixel_sums": [float(pixels(s, t * h * w).astype(np.float64).sum()) for s, (t, h, w) in zip(seeds, grids)],
            "n_patches": int(pix.shape[0]), "output": base + ".out.bin",
            "output_shape": list(merged.shape),
            "output_absmax": float(merged.abs().max()),
            "stages": [],
        }
        if dump:
            for k, s in enumerate(stages):
                fn = "%s.blk%d.bin" % (base, k)
                s.numpy().astype("<f4").tofile(os.path.join(out_dir, fn))
                case["stages"].append(fn)
        ref, rstages = ref_forward(sd, vc, pix_t, grids)
        case["spec_f64_vs_oracle"] = relerr(merged, ref)
        case["spec_f64_vs_oracle_stages"] = [relerr(a, b) for a, b in zip(stages, rstages)]
        case["stage_std"] = [float(s.std()) for s in stages]
        print("[%s/%s] n=%d out %s absmax %.3g; f64 spec vs oracle: out %.3g stages %s; stage std %s" % (
            name, cname, pix.shape[0], tuple(merged.shape), case["output_absmax"],
            case["spec_f64_vs_oracle"], ["%.2g" % e for e in case["spec_f64_vs_oracle_stages"]],
            ["%.3g" % e for e in case["stage_std"]]))
        cinfo["cases"].append(case)
    # the two-image call must equal its one-image calls (the oracle's own isolation)
    by = {c["name"]: c for c in cinfo["cases"]}
    two = by["two"]
    parts = [np.fromfile(os.path.join(out_dir, "%s_g%dx%dx%d.out.bin" % (name, *g)), dtype="<f4") for g in two["grids"]]
    whole = np.fromfile(os.path.join(out_dir, two["output"]), dtype="<f4")
    cinfo["oracle_two_vs_single_absdiff"] = float(np.abs(np.concatenate(parts) - whole).max())
    print("[%s] oracle two-image vs single calls: max abs diff %.3g" % (name, cinfo["oracle_two_vs_single_absdiff"]))
    return cinfo


if __name__ == "__main__":
    main()
