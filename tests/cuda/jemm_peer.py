#!/usr/bin/env python3
"""The JEMM reference procedure as a speed peer (issue 18): what the authors' server does per
request (ypcypc/JEMM jemm/model.py DecisionModel.respond; spec/jemm.md §5-§7), with transformers
5.17 and PEFT on an s1 model directory (`s1-mkmodel --s1-out --family jemm`, the rank-16 adapter
kept): Qwen3_5ForConditionalGeneration in --dtype with SDPA attention, wrapped by
PeftModel.from_pretrained(..., is_trainable=False) (the adapter NOT merged; PEFT keeps its factors
in float32 and adds the branch before rounding, as the reference runs), and per request:
  decode every image (base64, Pillow open, format and pixel checks, convert("RGB")), then for each
  question in order: candidates and user text (tests/oracle/jemm_render.py, the reference's text
  rules), for an image request the base's image processor on all the images again (the reference
  calls its processor once per question), the token ids of the chat wrapper (spec §3.11/§3.12:
  the chat template's output, tokenized with `tokenizers` on the directory's tokenizer.json;
  asserted equal to the directory's own chat prefix and suffix), one forward with no cache and
  logits_to_keep=1, the first n label-token logits at the last position to float32 on the host,
  the temperature softmax in float64 (tests/oracle/jemm_finish.py: NumPy logaddexp.reduce).
Timed per request on the host clock (the forwards end in a copy to the host, so the GPU work is
inside): the span of the reference's `latency_ms` (from the parsed body to the last answer). Not
timed: the HTTP layer and JSON parsing of serve.py (about 1 ms in Python; s1's numbers are
client-side round trips, so this favours the peer slightly). The GDN chunk rule and the causal
conv bound by transformers are recorded (flash-linear-attention's `fla` where importable).

  time    --model DIR --workloads FILE --out FILE.jsonl [--rounds 2] [--reps 5] [--warmup 2]
          FILE: bench_serve.py's S1_BENCH_WORKLOADS file ({workload: {tokens, questions, body,
          answer}}); per workload and round one "timing" line (median / min / max / p95 ms, the
          split host-work / forwards), its input tokens against s1's, and the largest probability
          difference from s1's answer (bf16 on both sides; random weights: not judged here).
  answer  --model DIR --requests FILE.json --images DIR --out FILE.json
          FILE.json: [{"name", "body"}] with "@FILE" image references (tests/oracle/jemm_e2e.py's
          convention); writes per request the input tokens, the raw label logits and the answers.
Common: [--device cuda|cpu] [--dtype bfloat16|float32] (a CPU float32 run is what
tests/oracle/jemm_peer_fixture.py records and CI compares s1 with: tests/jemm/test_jemm_peer.py).
"""
import argparse
import base64
import binascii
import io
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, HERE)
import jemm_finish as jf  # noqa: E402
import jemm_render as jr  # noqa: E402

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP")
MEDIA = {".png": "image/png", ".jpg": "image/jpeg", ".webp": "image/webp"}


def log(out, rec):
    line = json.dumps(rec)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


def adapter_folder(model_dir, man, tmp):
    """A PEFT adapter folder from the directory's kept adapter (adapter.safetensors: fp32
    `model.language_model.layers.L.MOD.lora_A|lora_B`, A [r, in], B [out, r]): the same tensors
    under PEFT's names, LoRA r / alpha from the manifest, target modules exactly the adapted
    language-model linears (a full-match regex: nothing in the vision tower)."""
    from safetensors.torch import load_file, save_file
    ad = man["adapter"]
    factors = load_file(os.path.join(model_dir, ad["file"]))
    mods = sorted({k.rsplit(".", 1)[0] for k in factors})
    leaves = sorted({m.rsplit(".", 1)[1] for m in mods})
    renamed = {"base_model.model." + k + ".weight": v for k, v in factors.items()}
    os.makedirs(tmp, exist_ok=True)
    save_file(renamed, os.path.join(tmp, "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": int(ad["rank"]), "lora_alpha": float(ad["alpha"]),
           "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
           "target_modules": r".*language_model\.layers\.\d+\.\w+\.(%s)" % "|".join(leaves),
           "task_type": None, "use_dora": False, "use_rslora": False}
    with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    return tmp, factors, len(mods)


class Peer:
    def __init__(self, model_dir, device, dtype):
        import torch
        from peft import PeftModel
        from tokenizers import Tokenizer
        from transformers import AutoImageProcessor
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
        self.torch, self.device = torch, device
        t0 = time.monotonic()
        with open(os.path.join(model_dir, "s1-model.json")) as f:
            man = json.load(f)
        assert man.get("family") == "jemm" and man.get("adapter"), "not a JEMM directory with a kept adapter"
        jm = man["jemm"]
        assert man["chat"]["prefix"] == jr.PREFIX and man["chat"]["suffix"] == jr.SUFFIX, man["chat"]
        self.labels = jm["label_token_ids"]
        self.temperature, self.mm_temperature = jm["temperature"], jm["mm_temperature"]
        self.image_token = man["config"]["image_token_id"]
        self.tmp = tempfile.TemporaryDirectory()
        base = os.path.join(self.tmp.name, "base")
        os.makedirs(base)
        with open(os.path.join(base, "config.json"), "w") as f:
            json.dump(man["config"], f)
        os.symlink(os.path.abspath(os.path.join(model_dir, "weights.safetensors")),
                   os.path.join(base, "model.safetensors"))
        with open(os.path.join(base, "preprocessor_config.json"), "w") as f:
            json.dump(man["image_processor"], f)
        self.tok = Tokenizer.from_file(os.path.join(model_dir, man["tokenizer"]["file"]))
        self.proc = AutoImageProcessor.from_pretrained(base)
        adir, factors, pairs = adapter_folder(model_dir, man, os.path.join(self.tmp.name, "adapter"))
        t1 = time.monotonic()
        model = mq.Qwen3_5ForConditionalGeneration.from_pretrained(
            base, dtype=getattr(torch, dtype), device_map={"": device}, attn_implementation="sdpa")
        self.model = PeftModel.from_pretrained(model, adir, is_trainable=False).eval()
        live = {n: p for n, p in self.model.named_parameters() if "lora_" in n}
        hit = sum(1 for k, v in factors.items()
                  if "base_model.model." + k + ".default.weight" in live and torch.equal(
                      live["base_model.model." + k + ".default.weight"].detach().float().cpu(),
                      v.float()))
        if hit != len(factors) or len(live) != len(factors):
            raise RuntimeError(f"PEFT loaded {hit} of {len(factors)} adapter tensors "
                               f"({len(live)} LoRA parameters live)")
        self.dtype = next(self.model.parameters()).dtype
        self.info = {"adapter_pairs": pairs, "adapter_tensors_loaded": hit,
                     "lora_dtypes": sorted({str(p.dtype) for p in live.values()}),
                     "base_dtype": str(self.dtype), "image_processor": type(self.proc).__name__,
                     "prep_s": round(t1 - t0, 2), "load_s": round(time.monotonic() - t1, 2)}
        self.fwd_s = 0.0

    def decode_images(self, items):
        """jemm/systemone.py's rules (spec §5.1-5.2): RGB Pillow images."""
        from PIL import Image
        if items is None:
            return []
        if not isinstance(items, list) or len(items) > jr.MAX_IMAGES:
            raise ValueError("images must be a list of at most 4 base64 strings")
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise ValueError(f"image {i} is not a base64 string")
            if item.startswith("data:"):
                head, _, item = item.partition(",")
                if not head.endswith(";base64"):
                    raise ValueError(f"image {i} is not a base64 data URL")
            try:
                with Image.open(io.BytesIO(base64.b64decode("".join(item.split()), validate=True))) as im:
                    if im.format not in IMAGE_FORMATS:
                        raise ValueError(f"image {i} is not PNG, JPEG or WebP")
                    if im.width * im.height > jr.MAX_IMAGE_PIXELS:
                        raise ValueError(f"image {i} exceeds {jr.MAX_IMAGE_PIXELS} pixels")
                    out.append(im.convert("RGB"))
            except (binascii.Error, OSError, Image.DecompressionBombError) as e:
                raise ValueError(f"image {i} could not be decoded") from e
        return out

    def respond(self, body):
        """(response dict, raw label logits per question) for one request body."""
        torch = self.torch
        started = time.perf_counter()
        images = self.decode_images(body.get("images"))
        state = body.get("state", "")
        if not isinstance(state, str):
            state = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        questions = body.get("questions")
        if not isinstance(questions, dict) or not questions:
            raise ValueError("no questions")
        temperature = self.mm_temperature if images else self.temperature
        answers, raws, tokens = {}, [], 0
        for qid, q in questions.items():
            cands = jr.candidates(q)
            user = jr.user_text(state, str(q.get("instructions", "")), cands)
            kw = {}
            vis = ""
            if images:  # the reference's processor call, once per question
                enc = self.proc(images=images, return_tensors="pt")
                grid = enc["image_grid_thw"]
                vis = "".join(jr.VISION[0] + jr.VISION[1] * (int(t) * int(h) * int(w) // 4) +
                              jr.VISION[2] for t, h, w in grid.tolist())
            ids = self.tok.encode(jr.PREFIX + vis + user + jr.SUFFIX, add_special_tokens=False).ids
            if len(ids) > (jr.MAX_MM_TOKENS if images else jr.MAX_TEXT_TOKENS):
                raise ValueError("UNSUPPORTED: input exceeds token budget")
            inp = torch.tensor([ids], dtype=torch.long)
            if images:
                kw = {"pixel_values": enc["pixel_values"].to(self.device, dtype=self.dtype),
                      "image_grid_thw": grid.to(self.device),
                      "mm_token_type_ids": (inp == self.image_token).long().to(self.device)}
            f0 = time.perf_counter()
            with torch.inference_mode():
                logits = self.model(input_ids=inp.to(self.device), **kw, use_cache=False,
                                    logits_to_keep=1).logits[0, -1]
                scores = logits[self.labels[:len(cands)]].float().cpu().tolist()
            self.fwd_s += time.perf_counter() - f0
            probs = {c["id"]: float(p) for c, p in zip(cands, jf.softmax(scores, temperature))}
            answers[qid] = jf.answer(q.get("type", "choice"), probs, max(probs, key=probs.get))
            raws.append(scores)
            tokens += len(ids)
        return {"model": "JEMM", "answers": answers, "usage": {
            "input_tokens": tokens, "output_tokens": 0,
            "latency_ms": (time.perf_counter() - started) * 1000}}, raws


def max_prob_diff(a, b):
    return max(abs(p - b[qid]["probabilities"][c]) for qid, ans in a.items()
               for c, p in ans["probabilities"].items())


def env_record(peer):
    import torch
    import transformers
    import peft
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    from open_jev_peer import bound_impls
    rec = {"kind": "env", "torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__, "device": peer.device,
           "gpu": torch.cuda.get_device_name(0) if peer.device.startswith("cuda") else "cpu",
           **peer.info, **bound_impls(mq)}
    try:
        import fla
        rec["fla"] = getattr(fla, "__version__", "present")
    except ImportError:
        rec["fla"] = None
    return rec


def cmd_time(a):
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    from open_jev_peer import bound_impls
    torch.backends.cuda.matmul.allow_tf32 = False
    out = open(a.out, "a")
    with open(a.workloads) as f:
        W = json.load(f)
    sel = [k for k in W if not a.only or k in a.only.split(",")]
    peer = Peer(a.model, a.device, a.dtype)
    log(out, env_record(peer))
    first = True
    for rnd in range(a.rounds):
        for k in sel:
            w = W[k]
            for _ in range(a.warmup):
                resp, _ = peer.respond(w["body"])
            if first:
                log(out, {"kind": "bound_after_first_forward", **bound_impls(mq)})
                first = False
            ts, fw = [], []
            for _ in range(a.reps):
                if a.device.startswith("cuda"):
                    torch.cuda.synchronize()
                peer.fwd_s = 0.0
                h0 = time.perf_counter()
                resp, _ = peer.respond(w["body"])
                ts.append((time.perf_counter() - h0) * 1e3)
                fw.append(peer.fwd_s * 1e3)
            diff = max_prob_diff(resp["answers"], w["answer"]["answers"]) if w.get("answer") else None
            order = sorted(range(len(ts)), key=ts.__getitem__)
            med = order[len(order) // 2]
            log(out, {"kind": "timing", "workload": k, "round": a.round_label + rnd,
                      "questions": len(w["body"]["questions"]),
                      "images": len(w["body"].get("images") or []),
                      "tokens": resp["usage"]["input_tokens"], "s1_tokens": w.get("tokens"),
                      "median_ms": ts[med], "min_ms": ts[order[0]], "max_ms": ts[order[-1]],
                      "p95_ms": ts[order[max(0, -(-len(ts) * 95 // 100) - 1)]], "n": len(ts),
                      "forwards_ms_at_median": fw[med], "host_ms_at_median": ts[med] - fw[med],
                      "max_prob_diff_vs_s1": diff,
                      "peak_alloc_GiB": torch.cuda.max_memory_allocated() / 2**30
                      if a.device.startswith("cuda") else None})
    return 0


def with_images(body, image_dir):
    out = dict(body)
    if "images" in body:
        urls = []
        for ref in body["images"]:
            path = os.path.join(image_dir, ref[1:])
            with open(path, "rb") as f:
                urls.append("data:%s;base64,%s" % (MEDIA[os.path.splitext(path)[1]],
                                                   base64.b64encode(f.read()).decode()))
        out["images"] = urls
    return out


def answer_requests(model_dir, reqs, image_dir, device, dtype):
    """[(name, body with "@FILE" images)] -> (env record, [{"name", "input_tokens", "raw",
    "answers"}])."""
    peer = Peer(model_dir, device, dtype)
    res = []
    for name, body in reqs:
        resp, raw = peer.respond(with_images(body, image_dir))
        res.append({"name": name, "input_tokens": resp["usage"]["input_tokens"], "raw": raw,
                    "answers": resp["answers"]})
    return env_record(peer), res


def cmd_answer(a):
    with open(a.requests) as f:
        reqs = [(r["name"], r["body"]) for r in json.load(f)]
    env, res = answer_requests(a.model, reqs, a.images, a.device, a.dtype)
    with open(a.out, "w") as f:
        json.dump({"env": env, "requests": res}, f, indent=1, ensure_ascii=False)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("time", "answer"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--device", default="cuda")
        p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
        if name == "time":
            p.add_argument("--workloads", default=os.environ.get("S1_BENCH_WORKLOADS"))
            p.add_argument("--rounds", type=int, default=2)
            p.add_argument("--round-label", type=int, default=1)
            p.add_argument("--reps", type=int, default=5)
            p.add_argument("--warmup", type=int, default=2)
            p.add_argument("--only", default="")
        else:
            p.add_argument("--requests", required=True)
            p.add_argument("--images", required=True)
    a = ap.parse_args()
    if a.cmd == "time" and not a.workloads:
        ap.error("time: --workloads (or S1_BENCH_WORKLOADS from bench_serve.py --between)")
    return cmd_time(a) if a.cmd == "time" else cmd_answer(a)


if __name__ == "__main__":
    sys.exit(main())
