#!/usr/bin/env python3
"""Oracle fixtures for the float32 C forward of the Qwen3.5 text backbone (executor/ex_qwen35.c).

Runs on the GPU machine (transformers 5.17, torch 2.11, peft, numpy), computing on the CPU in float32
with eager attention: the fp32 oracle of spec/qwen3_5.md §9.1. The checkpoints are NOT built here:
each comes from `s1-mkmodel` with the arguments recorded in the fixture, so that CI rebuilds the
same bytes (the SHA-256 of model.safetensors and adapter_model.safetensors is recorded to catch
drift), exports them with s1-export and compares s1-forward (tests/model/qwen35_oracle_check.py).

Checkpoints (s1-mkmodel, real 248320-row vocabulary with the Qwen3 tokenizer):
  tinyA   --shape tiny --vision          untied head, dk 16 != dv 24, ratio 2, with the vision tower;
          plus a random rank-4 PEFT adapter on every text projection (merged and kept cases)
  ratio3  --shape tiny --ratio3 --tied --causal   Hv = 6 (ratio 3), tied head, CausalLM key layout
Cases: text prompts of 1, 2, 63, 64, 65 and 200 tokens (both checkpoints), one image prompt
(tinyA; pixel rows and the oracle's merged image embeddings saved as .npy), and LoRA merged / kept
prompts (tinyA + adapter, PEFT). Each case keeps: tokens (one <|image_pad|> per image), expanded
input ids, 3-axis positions the model used, readout positions, final-norm hidden rows there and the
top-24 logits with ids.

Usage: python3 qwen35_fixtures.py --mkmodel S1_MKMODEL --tokenizer tokenizer.json --work DIR --out DIR
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

import transformers

TOP = 24
LENGTHS = [1, 2, 63, 64, 65, 200]
TARGETS = ("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,"
           "in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj")
CHECKPOINTS = {
    "tinyA": {"args": ["--shape", "tiny", "--vision", "--seed", "3101"],
              "adapter": ["--adapter-rank", "4", "--adapter-alpha", "8",
                          "--adapter-targets", TARGETS]},
    "ratio3": {"args": ["--shape", "tiny", "--ratio3", "--tied", "--causal", "--seed", "3102"]},
}
LOG = []


def log(msg):
    LOG.append(msg)
    print(msg, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def markers():
    import transformers.models.qwen3_5.modeling_qwen3_5 as mq
    src = open(mq.__file__).read()
    out = {k: (k in src) for k in ("solve_triangular", "fast_pos_embed_interpolate",
                                   "get_vision_interpolation_indices_and_weights",
                                   "mm_token_type_ids", "torch_chunk_gated_delta_rule",
                                   "torch_recurrent_gated_delta_rule")}
    return out


def load_model(path, causal):
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    cls = mq.Qwen3_5ForCausalLM if causal else mq.Qwen3_5ForConditionalGeneration
    try:
        model, info = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                          output_loading_info=True)
    except TypeError:
        model, info = cls.from_pretrained(path, torch_dtype=torch.float32,
                                          attn_implementation="eager", output_loading_info=True)
    model.eval()
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys",
                                                        "mismatched_keys")}
    log(f"[{os.path.basename(path)}] {cls.__name__}: loading info problems: {bad or 'none'}")
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            log(f"  A_log dtype {p.dtype}")
            break
    return model, bad


def find_module(model, suffixes):
    names = dict(model.named_modules())
    for suf in suffixes:
        for n in names:
            if n.endswith(suf) and "visual" not in n:
                return n, names[n]
    raise RuntimeError(f"no module ending in {suffixes}")


class Capture:
    """Final-norm output and the language model's inputs (embeddings after the image scatter,
    position ids) of the last forward."""

    def __init__(self, model):
        self.hidden = None
        self.embeds = None
        self.pos = None
        _, norm = find_module(model, ["language_model.norm", "model.norm"])
        norm.register_forward_hook(self._norm)
        try:
            _, lm = find_module(model, ["model.language_model"])
        except RuntimeError:
            _, lm = find_module(model, ["model.model", "model"])
        lm.register_forward_pre_hook(self._pre, with_kwargs=True)

    def _norm(self, mod, inp, out):
        self.hidden = out.detach().clone()

    def _pre(self, mod, args, kwargs):
        e = kwargs.get("inputs_embeds")
        if e is not None:
            self.embeds = e.detach().clone()
        p = kwargs.get("position_ids")
        if p is not None:
            self.pos = p.detach().clone()


def run(model, cap, ids, extra=None):
    kw = dict(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    if extra:
        kw.update(extra)
    with torch.no_grad():
        try:
            out = model(**kw)
        except TypeError as e:
            if extra and "mm_token_type_ids" in kw:
                log(f"  forward rejected a kwarg ({e}); retrying without mm_token_type_ids")
                kw.pop("mm_token_type_ids")
                out = model(**kw)
            else:
                raise
    hid = cap.hidden[0]
    last = out.hidden_states[-1][0]
    d = (hid - last).abs().max().item()
    if d != 0:
        log(f"  note: hidden_states[-1] differs from the final-norm hook by {d:.3e}")
    return hid, out.logits[0]


def readouts(n):
    r = sorted({0, n // 2, n - 1} | ({62, 63, 64, 127, 128} if n >= 130 else set()))
    return [p for p in r if p < n]


def case_record(name, mode, tokens, ids, pos3, ro, hid, logits, extra=None):
    top = [torch.topk(logits[p], TOP) for p in ro]
    rec = {
        "name": name, "mode": mode, "tokens": tokens, "input_ids": ids,
        "positions": pos3, "readout": ro,
        "hidden": [[float(x) for x in hid[p].tolist()] for p in ro],
        "top_ids": [[int(i) for i in t.indices.tolist()] for t in top],
        "top_logits": [[float(v) for v in t.values.tolist()] for t in top],
    }
    if extra:
        rec.update(extra)
    return rec


def pos_list(cap, n):
    if cap.pos is None:
        return None
    p = cap.pos
    if p.dim() == 3:   # [3 or 4, batch, n]
        p = p[-3:, 0, :]
    elif p.dim() == 2:  # [batch, n] text only
        p = p[0:1, :].expand(3, n)
    return [[int(x) for x in row] for row in p.tolist()]


def text_cases(model, cap, rng, vocab_text, mode, lengths):
    cases = []
    for n in lengths:
        ids = [int(x) for x in rng.integers(0, vocab_text, size=n)]
        hid, logits = run(model, cap, ids)
        ro = readouts(n)
        cases.append(case_record(f"{mode}_len{n}", mode, ids, ids, pos_list(cap, n), ro, hid,
                                 logits))
        log(f"  {mode} len {n}: hidden absmax {hid.abs().max().item():.3f}, "
            f"top logit {logits[-1].max().item():.4f}")
    return cases


def continuation_check(model, rng, vocab_text):
    """Oracle self-check (spec §4.10): prefix 64 + continuation 66 vs one pass, fp32."""
    ids = torch.tensor([[int(x) for x in rng.integers(0, vocab_text, size=130)]])
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states[-1]
        o1 = model(input_ids=ids[:, :64], use_cache=True)
        o2 = model(input_ids=ids[:, 64:], past_key_values=o1.past_key_values, use_cache=True,
                   output_hidden_states=True)
    d = (o2.hidden_states[-1][0] - full[0, 64:]).abs().max().item()
    log(f"  oracle continuation 64+66 vs one pass: max abs diff {d:.3e}")


def image_case(model, cap, cfg, rng, vocab_text, out_dir):
    grid = (1, 6, 8)
    n_patch = grid[0] * grid[1] * grid[2]
    n_img = n_patch // 4
    pix = ((rng.integers(0, 256, size=(n_patch, 1536)) - 128) / 128.0).astype(np.float32)
    img_id, vs, ve = cfg.image_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id
    pre = [int(x) for x in rng.integers(0, vocab_text, size=5)]
    post = [int(x) for x in rng.integers(0, vocab_text, size=3)]
    tokens = pre + [vs, img_id, ve] + post
    ids = pre + [vs] + [img_id] * n_img + [ve] + post
    mm = [1 if t == img_id else 0 for t in ids]
    extra = dict(pixel_values=torch.from_numpy(pix),
                 image_grid_thw=torch.tensor([list(grid)]),
                 mm_token_type_ids=torch.tensor([mm]))
    hid, logits = run(model, cap, ids, extra)
    n = len(ids)
    emb = cap.embeds[0][torch.tensor(ids) == img_id].numpy().astype(np.float32)
    np.save(os.path.join(out_dir, "tinyA_image_pixels.npy"), pix)
    np.save(os.path.join(out_dir, "tinyA_image_embeds.npy"), emb)
    pos3 = pos_list(cap, n)
    first = ids.index(img_id)
    ro = sorted({first, first + n_img - 1, first + n_img, n - 1})
    rope_delta = None
    if pos3:
        rope_delta = max(max(r) for r in pos3) + 1 - n
    try:  # the explicit helper, for the record
        r = model.model.get_rope_index(torch.tensor([ids]), mm_token_type_ids=torch.tensor([mm]),
                                       image_grid_thw=torch.tensor([list(grid)]))
        helper = r[0][:, 0, :].tolist() if isinstance(r, tuple) else None
        log(f"  get_rope_index equals the positions used: {helper == pos3}")
    except Exception as e:
        log(f"  get_rope_index call failed: {e!r}")
    log(f"  image: {n} tokens, {n_img} image rows, rope_delta {rope_delta}, "
        f"embeds absmax {np.abs(emb).max():.3f}")
    return case_record("image", "base", tokens, ids, pos3, ro, hid, logits, {
        "images": [{"pixels": "tinyA_image_pixels.npy", "embeds": "tinyA_image_embeds.npy",
                    "grid_thw": list(grid)}],
        "rope_delta": rope_delta})


def lora_cases(hf_dir, adapter_dir, rng, vocab_text):
    from peft import PeftModel
    from safetensors.numpy import load_file
    cases = []
    factors = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    for mode in ("lora_keep", "lora_merge"):
        base, bad = load_model(hf_dir, False)
        pm = PeftModel.from_pretrained(base, adapter_dir)
        pm.eval()
        # every factor in the file must sit in a live LoRA module with the same values
        live = {n: p for n, p in pm.named_parameters() if "lora_" in n}
        matched = 0
        for k, v in factors.items():
            key = k.replace(".weight", ".default.weight")
            if key in live and np.array_equal(live[key].detach().numpy(), v.astype(np.float32)):
                matched += 1
        log(f"  {mode}: {matched}/{len(factors)} adapter tensors loaded into PEFT modules")
        if matched != len(factors):
            raise RuntimeError("PEFT did not load every adapter tensor")
        if mode == "lora_merge":
            model = pm.merge_and_unload()
            with torch.no_grad():  # s1-export merges in fp32 and rounds once to bf16
                for p in model.parameters():
                    p.copy_(p.to(torch.bfloat16).to(torch.float32))
        else:
            model = pm
        cap = Capture(model)
        for n in (1, 65):
            ids = [int(x) for x in rng.integers(0, vocab_text, size=n)]
            hid, logits = run(model, cap, ids)
            ro = readouts(n)
            cases.append(case_record(f"{mode}_len{n}", mode, ids, ids, pos_list(cap, n), ro, hid,
                                     logits))
            log(f"  {mode} len {n}: hidden absmax {hid.abs().max().item():.3f}")
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkmodel", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "numpy": np.__version__}
    try:
        import peft
        versions["peft"] = peft.__version__
    except Exception as e:
        versions["peft"] = repr(e)
    mk = markers()
    log(f"versions {versions}; markers {mk}")
    tok_sha = sha256(a.tokenizer)
    vocab_text = 151643  # regular (non-added) ids of the Qwen3 tokenizer
    status = 0
    for name, spec in CHECKPOINTS.items():
        t0 = time.time()
        hf = os.path.join(a.work, name)
        args = list(spec["args"])
        cmd = [a.mkmodel] + args + ["--tokenizer", a.tokenizer, "--out", hf]
        adapter_dir = None
        if "adapter" in spec:
            adapter_dir = os.path.join(a.work, name + "_adapter")
            cmd += ["--adapter-out", adapter_dir] + spec["adapter"]
        subprocess.run(cmd, check=True)
        shas = {"model.safetensors": sha256(os.path.join(hf, "model.safetensors"))}
        if adapter_dir:
            shas["adapter_model.safetensors"] = sha256(
                os.path.join(adapter_dir, "adapter_model.safetensors"))
        causal = "--causal" in args
        rng = np.random.default_rng(int(args[args.index("--seed") + 1]))
        fix = {"checkpoint": name, "mkmodel_args": args,
               "adapter_args": spec.get("adapter"), "tokenizer_sha256": tok_sha,
               "sha256": shas, "oracle": {"versions": versions, "markers": mk,
                                          "device": "cpu", "dtype": "float32",
                                          "attn_implementation": "eager"},
               "cases": []}
        try:
            model, bad = load_model(hf, causal)
            fix["oracle"]["loading_problems"] = bad
            cfg = model.config
            cap = Capture(model)
            fix["cases"] += text_cases(model, cap, rng, vocab_text, "base", LENGTHS)
            try:
                continuation_check(model, rng, vocab_text)
            except Exception as e:
                log(f"  continuation check failed: {e!r}")
            if not causal:
                try:
                    fix["cases"].append(image_case(model, cap, cfg, rng, vocab_text, a.out))
                except Exception:
                    log("  image case FAILED:\n" + traceback.format_exc())
                    status = 1
            del model
            if adapter_dir:
                try:
                    fix["cases"] += lora_cases(hf, adapter_dir, rng, vocab_text)
                except Exception:
                    log("  LoRA cases FAILED:\n" + traceback.format_exc())
                    status = 1
        except Exception:
            log(f"[{name}] FAILED:\n" + traceback.format_exc())
            status = 1
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump(fix, f, separators=(",", ":"))
        log(f"[{name}] {len(fix['cases'])} cases in {time.time() - t0:.1f} s; sha256 {shas}")
    with open(os.path.join(a.out, "oracle_log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
