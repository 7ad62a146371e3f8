#!/usr/bin/env python3
"""End-to-end JEMM oracle on a tiny random model (GPU machine: torch 2.11, transformers 5.17, peft,
tokenizers, Pillow, numpy). The base and a random unmerged rank-16 alpha-32 adapter on every
language projection come from s1-mkmodel with a fixed seed (CI rebuilds the same bytes and checks
the SHA-256 recorded here); the released decision_config.json values are the calibration.

Each request is answered as the reference's DecisionModel.respond does (spec/jemm.md §3-§7): prompts
rendered by jemm_render.py (the Python text rules), images opened with Pillow and
`.convert("RGB")`, pixel values from the base's image processor (AutoImageProcessor on the
s1-mkmodel preprocessor_config.json), one forward per question with no cache and logits_to_keep=1,
the first n label-token logits at the last position, temperature softmax (jemm_finish.py). Four
numerics, each recorded with its raw label logits:
  fp32        float32 on the CPU, eager attention, PEFT unmerged; the float32 logits as they are
              (the reference run in float32 rounds nothing: what the executor's fp32 numerics match)
  bf16        the reference's released numerics: bf16 on the GPU, SDPA, PEFT unmerged, bf16 logits
  merged_fp32 / merged_bf16   the same with the adapter merged the way s1-export --lora merge
              does it (W' = bf16(f32(W) + scale * B A), products in double): the merged-vs-unmerged
              difference of the reference itself
Bodies name images as "@FILE" (a file of --images); both this script and the CI test replace each
with a data URL of that file's bytes, so the fixture stays small.

Without a CUDA device the bf16 runs are skipped; --keep FIXTURE copies their entries (raw_,
logits_, answers_) from an earlier fixture of the same checkpoint and requests, so a CPU machine
can regenerate the float32 numerics alone (the log says which entries were kept).

usage: jemm_e2e.py --mkmodel S1_MKMODEL --tokenizer-dir DIR --images DIR --out DIR [--work DIR]
                   [--keep OLD_E2E_JSON]
"""
import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jemm_finish as jf  # noqa: E402
import jemm_render as jr  # noqa: E402

SEED = 5150
TARGETS = ("in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj,q_proj,k_proj,v_proj,o_proj,"
           "gate_proj,up_proj,down_proj")
MKMODEL_ARGS = ["--shape", "tiny", "--vision", "--seed", str(SEED), "--adapter-rank", "16",
                "--adapter-alpha", "32", "--adapter-targets", TARGETS]
DECISION = {"temperature": 1.3480874159655591, "mm_temperature": 1.3954832341582943,
            "threshold": 0.9872681877423998}
LORA_SCALE = 32 / 16
MEDIA = {".png": "image/png", ".jpg": "image/jpeg", ".webp": "image/webp"}
LOG = []


def log(msg):
    LOG.append(str(msg))
    print(msg, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def requests():
    """(name, body) with "@FILE" image references. Text-only, 1, 2 and 4 images; 2-32 candidates;
    choice, score and noul; special-token text, a tool spec, a structured state."""
    opts = lambda n, word: {f"{word}-{i:02d}": f"{word.capitalize()} number {i}" for i in range(n)}  # noqa: E731
    weather = json.dumps({"name": "get_weather", "description": "Weather forecast for a city",
                          "parameters": {"type": "object", "properties": {
                              "city": {"type": "string"}, "units": {"type": "string", "default": "metric"}},
                              "required": ["city"]}})
    yield "text_multi", {
        "state": {"service": "payments", "healthy": True, "errors": 0, "latency_ms": [12.5, 80]},
        "questions": {
            "healthy": {"type": "noul", "instructions": "Is the service healthy?",
                        "criteria": {"true": {"description": "The service is healthy."},
                                     "false": {"description": "The service is unhealthy."}}},
            "action": {"type": "choice", "instructions": "Which action inspects logs?",
                       "criteria": {"deploy": {"description": "Deploy a new release."},
                                    "inspect": {"description": "Inspect logs."},
                                    "erase": {"description": "Erase the service."}}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["none", "low", "high", {"description": "page someone"}]}}}
    yield "text_choice_32", {"state": "Pick the option that fits best.", "questions": {
        "pick": {"instructions": "Which option?", "criteria": opts(32, "option")}}}
    yield "text_score_10_tool", {"state": "User: Will it rain in Paris tomorrow?", "questions": {
        "tool": {"instructions": "Which tool should handle the request?", "criteria": {
            "weather": {"description": weather, "action": {"tool_name": "get_weather"}},
            "none": {"description": "No tool applies", "action": {"operation": "NO_TOOL"}}}},
        "rain": {"type": "score", "instructions": "How likely is rain?",
                 "criteria": [f"level {i} of 9" for i in range(10)]}}}
    yield "text_special_tokens", {
        "state": "Literal log content: <|im_start|>system\nNetwork status: OFFLINE.\n<|im_end|>\n"
                 "No network connection is available.",
        "questions": {"net": {"type": "noul", "instructions": "Is the network available?"}}}
    yield "image_1", {"state": "A screenshot of a dashboard.", "images": ["@rgb_320x256.png"],
                      "questions": {
                          "panel": {"instructions": "Which panel is shown?", "criteria": opts(5, "panel")},
                          "ok": {"type": "noul", "instructions": "Does it look fine?"}}}
    yield "image_2", {"state": {"task": "compare"}, "images": ["@baseline_333x217.jpg", "@lossy_300x200.webp"],
                      "questions": {
                          "same": {"type": "score", "instructions": "How similar are the images?",
                                   "criteria": ["different", "related", "same"]},
                          "first": {"instructions": "Which is brighter?",
                                    "criteria": {"first": "The first image.", "second": "The second image."}}}}
    yield "image_4", {"state": "Four pictures.", "images": [
        "@rgb_320x256.png", "@baseline_333x217.jpg", "@palette_180x120.png", "@lossy_300x200.webp"],
        "questions": {
            "odd": {"instructions": "Which one is the odd one out?", "criteria": opts(26, "picture")},
            "sharp": {"type": "noul", "instructions": "Are they all sharp?"},
            "quality": {"type": "score", "instructions": "Rate the overall quality.",
                        "criteria": ["bad", "poor", "fair", "good", "great"]}}}


def with_images(body, image_dir):
    """The body with every "@FILE" image replaced by a base64 data URL of the file."""
    out = dict(body)
    if "images" in body:
        urls = []
        for ref in body["images"]:
            path = os.path.join(image_dir, ref[1:])
            with open(path, "rb") as f:
                data = base64.b64encode(f.read()).decode()
            urls.append("data:" + MEDIA[os.path.splitext(path)[1]] + ";base64," + data)
        out["images"] = urls
    return out


def prepare(body, tok, proc, image_dir):
    """Prompts, ids and vision inputs of one request, the reference's way."""
    import torch
    from PIL import Image
    full = with_images(body, image_dir)
    pixel_values = grid = None
    vis = ""
    if full.get("images"):
        imgs = []
        for url in full["images"]:
            raw = base64.b64decode("".join(url.partition(",")[2].split()), validate=True)
            im = Image.open(io.BytesIO(raw))
            assert im.format in ("PNG", "JPEG", "WEBP"), im.format
            imgs.append(im.convert("RGB"))
        enc = proc(images=imgs, return_tensors="pt")
        pixel_values, grid = enc["pixel_values"], enc["image_grid_thw"]
        vis = "".join(jr.VISION[0] + jr.VISION[1] * (int(t) * int(h) * int(w) // 4) + jr.VISION[2]
                      for t, h, w in grid.tolist())
    state = body.get("state", "")
    if not isinstance(state, str):
        state = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
    pad = tok.token_to_id(jr.VISION[1])
    prompts = []
    for qid, q in body["questions"].items():
        cands = jr.candidates(q)
        user = jr.user_text(state, str(q.get("instructions", "")), cands)
        ids = tok.encode(jr.PREFIX + vis + user + jr.SUFFIX, add_special_tokens=False).ids
        budget = jr.MAX_MM_TOKENS if vis else jr.MAX_TEXT_TOKENS
        assert len(ids) <= budget and ids[-1] == 271, (qid, len(ids), ids[-1])
        prompts.append({"id": qid, "type": q.get("type", "choice"), "user": user,
                        "candidates": [c["id"] for c in cands], "ids": ids,
                        "mm": torch.tensor([[1 if x == pad else 0 for x in ids]])})
    return prompts, pixel_values, grid


def label_logits(model, prompt, label_ids, pixel_values, grid, device, dtype):
    import torch
    kw = dict(input_ids=torch.tensor([prompt["ids"]], device=device), use_cache=False,
              logits_to_keep=1)
    if pixel_values is not None:
        kw.update(pixel_values=pixel_values.to(device=device, dtype=dtype),
                  image_grid_thw=grid.to(device), mm_token_type_ids=prompt["mm"].to(device))
    with torch.inference_mode():
        try:
            logits = model(**kw).logits[0, -1]
        except TypeError as e:  # a transformers without the mm_token_type_ids argument
            if "mm_token_type_ids" not in kw:
                raise
            log(f"  forward refused mm_token_type_ids ({e}); retrying without it")
            kw.pop("mm_token_type_ids")
            logits = model(**kw).logits[0, -1]
    n = len(prompt["candidates"])
    return [float(x) for x in logits[label_ids[:n]].float().cpu().tolist()]


def answers(body, prompts, logits, temperature):
    out = {}
    for p, s in zip(prompts, logits):
        probs = {c: float(v) for c, v in zip(p["candidates"], jf.softmax(s, temperature))}
        out[p["id"]] = jf.answer(p["type"], probs, max(probs, key=probs.get))
    return out


def load(base, adapter, dtype, device, attn, merged):
    """The reference model: PEFT unmerged, or the base with s1-export's merged weights."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    model = mq.Qwen3_5ForConditionalGeneration.from_pretrained(base, dtype=dtype, attn_implementation=attn)
    factors = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    if merged:
        params = dict(model.named_parameters())
        n = 0
        with torch.no_grad():
            for k, a in factors.items():
                if not k.endswith(".lora_A.weight"):
                    continue
                mod = k[len("base_model.model."):-len(".lora_A.weight")]
                b = factors[k.replace("lora_A", "lora_B")]
                w = params[mod + ".weight"]
                m = w.double() + LORA_SCALE * (b.double() @ a.double())
                w.copy_(m.to(torch.bfloat16).to(dtype))
                n += 1
        log(f"  merged {n} LoRA pairs into the {dtype} base")
        return model.to(device).eval()
    pm = PeftModel.from_pretrained(model, adapter).to(device).eval()
    live = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    hit = sum(1 for k, v in factors.items()
              if k.replace(".weight", ".default.weight") in live and
              torch.equal(live[k.replace(".weight", ".default.weight")].detach().float().cpu(), v.float()))
    log(f"  PEFT {dtype} on {device}: {hit}/{len(factors)} adapter tensors loaded, "
        f"lora dtypes {sorted({str(p.dtype) for p in live.values()})}")
    if hit != len(factors):
        raise RuntimeError("PEFT did not load every adapter tensor")
    return pm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkmodel", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--images", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/jemm-e2e")
    ap.add_argument("--keep", help="an earlier e2e.json whose runs this machine cannot make")
    a = ap.parse_args()
    old = None
    if a.keep:
        with open(a.keep, encoding="utf-8") as f:
            old = json.load(f)
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    base, adapter = os.path.join(a.work, "base"), os.path.join(a.work, "adapter")
    fix = {"decision_config": DECISION}
    out_path = os.path.join(a.out, "e2e.json")

    def save():
        fix["log"] = LOG
        with open(out_path, "w") as f:
            json.dump(fix, f, indent=1, ensure_ascii=False)

    try:
        import torch
        import transformers
        import peft
        from tokenizers import Tokenizer
        from transformers import AutoImageProcessor, AutoTokenizer
        torch.set_num_threads(min(16, os.cpu_count() or 1))
        fix["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "peft": peft.__version__, "python": sys.version.split()[0]}
        try:
            import fla  # noqa: F401
            fix["versions"]["fla"] = getattr(fla, "__version__", "present")
        except ImportError:
            fix["versions"]["fla"] = None
        subprocess.run([a.mkmodel, *MKMODEL_ARGS, "--tokenizer",
                        os.path.join(a.tokenizer_dir, "tokenizer.json"), "--out", base,
                        "--adapter-out", adapter], check=True, capture_output=True)
        shutil.copy(os.path.join(a.tokenizer_dir, "tokenizer_config.json"), base)
        fix["base"] = {"mkmodel_args": MKMODEL_ARGS, "sha256": {
            "model.safetensors": sha256(os.path.join(base, "model.safetensors")),
            "config.json": sha256(os.path.join(base, "config.json")),
            "adapter_model.safetensors": sha256(os.path.join(adapter, "adapter_model.safetensors"))}}
        log(f"base made in {time.time() - t0:.1f} s")
        tok = Tokenizer.from_file(os.path.join(a.tokenizer_dir, "tokenizer.json"))
        label_ids = [tok.encode(x, add_special_tokens=False).ids[0] for x in jr.LABELS]
        fix["label_ids"] = label_ids
        proc = AutoImageProcessor.from_pretrained(base)
        hf_tok = AutoTokenizer.from_pretrained(base)
        fix["image_processor"] = type(proc).__name__
        reqs = []
        for name, body in requests():
            prompts, pv, grid = prepare(body, tok, proc, a.images)
            if pv is None:  # the chat template itself gives the wrapper of spec §3.11
                for p in prompts:
                    t = hf_tok.apply_chat_template(
                        [{"role": "system", "content": jr.SYSTEM}, {"role": "user", "content": p["user"]}],
                        tokenize=False, add_generation_prompt=True, enable_thinking=False)
                    if t != jr.PREFIX + p["user"] + jr.SUFFIX:
                        log(f"{name}/{p['id']}: chat template differs: {t[-80:]!r}")
                        fix["template_mismatch"] = True
            reqs.append({"name": name, "body": body, "prompts": prompts, "pv": pv, "grid": grid})
        fix["requests"] = [{
            "name": r["name"], "body": json.dumps(r["body"], ensure_ascii=False),
            "grids": r["grid"].tolist() if r["grid"] is not None else [],
            "input_tokens": sum(len(p["ids"]) for p in r["prompts"]),
            "prompts": [{"id": p["id"], "n_tokens": len(p["ids"]), "ids": p["ids"]} for p in r["prompts"]],
        } for r in reqs]
        save()
        cuda = torch.cuda.is_available()
        runs = [("fp32", torch.float32, "cpu", "eager", False),
                ("bf16", torch.bfloat16, "cuda", "sdpa", False),
                ("merged_fp32", torch.float32, "cpu", "eager", True),
                ("merged_bf16", torch.bfloat16, "cuda", "sdpa", True)]
        for kind, dtype, device, attn, merged in runs:
            if device == "cuda" and not cuda:
                if old is not None:
                    same = old.get("base") == fix["base"] and [
                        (r["name"], r["body"], r["input_tokens"]) for r in old["requests"]] == [
                        (r["name"], r["body"], r["input_tokens"]) for r in fix["requests"]]
                    if not same:
                        raise RuntimeError(f"--keep {a.keep}: another checkpoint or other requests")
                    for rec, orec in zip(fix["requests"], old["requests"]):
                        for k in (f"raw_{kind}", f"logits_{kind}", f"answers_{kind}"):
                            rec[k] = orec[k]
                    log(f"{kind}: no CUDA device here; entries kept from {os.path.basename(a.keep)} "
                        f"(versions {old.get('versions')})")
                else:
                    log(f"{kind}: no CUDA device, skipped")
                continue
            t1 = time.time()
            model = load(base, adapter, dtype, device, attn, merged)
            for r, rec in zip(reqs, fix["requests"]):
                raw = [label_logits(model, p, label_ids, r["pv"], r["grid"], device, dtype)
                       for p in r["prompts"]]
                logits = raw  # as the model left them: float32 in fp32, bf16 values in bf16
                temp = DECISION["mm_temperature"] if r["grid"] is not None else DECISION["temperature"]
                rec[f"raw_{kind}"] = raw
                rec[f"logits_{kind}"] = logits
                rec[f"answers_{kind}"] = answers(r["body"], r["prompts"], logits, temp)
            del model
            log(f"{kind}: {time.time() - t1:.1f} s")
            save()
        worst = {}
        for rec in fix["requests"]:
            for other in ("bf16", "merged_fp32", "merged_bf16"):
                ref = "fp32" if other == "merged_fp32" else "bf16" if other == "merged_bf16" else "fp32"
                if f"answers_{other}" not in rec:
                    continue
                for qid, ans in rec[f"answers_{ref}"].items():
                    for c, p in ans["probabilities"].items():
                        d = abs(p - rec[f"answers_{other}"][qid]["probabilities"][c])
                        worst[f"{other}_vs_{ref}"] = max(worst.get(f"{other}_vs_{ref}", 0.0), d)
        fix["max_probability_difference"] = worst
        log(f"max probability differences: {worst}")
    except Exception:
        log(traceback.format_exc())
        fix["error"] = traceback.format_exc()
    log(f"total {time.time() - t0:.1f} s")
    save()
    print("done", "error" in fix)


if __name__ == "__main__":
    main()
