#!/usr/bin/env python3
"""The peer of the GPU benchmark (spec/benchmark.md): transformers 5.17 + torch 2.11 on the same GPU,
Qwen3_5ForConditionalGeneration in bf16 with sdpa attention and the PyTorch Gated DeltaNet path
(no fla), timing prefill to the last-position logit on the same token ids as s1-forward.

Two subcommands:
  inputs  --out DIR [--seed S] [--max-id N] [--lengths 128,512,...] [--rows 16x64,64x48]
          writes the seeded token ids, shared with our side, as s1-forward inputs:
          DIR/single_<T>.json = {"tokens": [...], "readout": [-1]} and
          DIR/rows_<B>x<T>.json = {"rows": [[...], ...]} (B independent sequences of T tokens).
  time    --model DIR --inputs DIR [--repeats N] [--warmup W] [--out FILE]
          DIR is a s1-mkmodel checkpoint (config.json + safetensors) or a s1serve model directory
          (s1-model.json + weights.safetensors, read through a shim folder of links). Times every
          input file: single sequences as one forward (use_cache=False, logits_to_keep=1), rows as
          one batched forward of B sequences (the form of the table in spec/benchmark.md). CUDA
          events around each forward, median/min/max over N after W excluded warm-ups. Prints one
          JSON line per case and writes them all (plus load time, peak memory, device) to FILE.
Leaves out: the prefix + copied-cache row procedure of OmniJev (rows here are independent
sequences, as in the benchmark table) and fla kernels.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

T0 = time.monotonic()

LENGTHS = [128, 512, 1024, 2048, 3400]
ROWS = [(16, 64), (64, 48)]
# Qwen3 tokenizer: ids below 151643 are ordinary BPE tokens (no <|image_pad|> or other specials,
# which s1-forward would expand or the model would treat as markers).
MAX_ID = 151643
SEED = 20261129


def cmd_inputs(a):
    import numpy as np
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    lengths = [int(x) for x in a.lengths.split(",") if x]
    rows = [tuple(int(v) for v in r.split("x")) for r in a.rows.split(",") if r]
    for t in lengths:
        ids = rng.integers(0, a.max_id, size=t).tolist()
        with open(os.path.join(a.out, f"single_{t}.json"), "w") as f:
            json.dump({"tokens": ids, "readout": [-1]}, f)
    for b, t in rows:
        ids = rng.integers(0, a.max_id, size=(b, t)).tolist()
        with open(os.path.join(a.out, f"rows_{b}x{t}.json"), "w") as f:
            json.dump({"rows": ids}, f)
    print(f"bench_peer: wrote {len(lengths)} single and {len(rows)} rows inputs to {a.out} "
          f"(seed {a.seed}, ids < {a.max_id})")


def model_folder(path, tmp):
    """A folder from_pretrained can read: the checkpoint itself, or a shim over a model directory."""
    man = os.path.join(path, "s1-model.json")
    if not os.path.exists(man):
        return path
    with open(man) as f:
        m = json.load(f)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(m["config"], f)
    os.symlink(os.path.abspath(os.path.join(path, "weights.safetensors")),
               os.path.join(tmp, "model.safetensors"))
    return tmp


def load(path):
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    with tempfile.TemporaryDirectory() as tmp:
        folder = model_folder(path, tmp)
        t = time.monotonic()
        model, info = mq.Qwen3_5ForConditionalGeneration.from_pretrained(
            folder, dtype=torch.bfloat16, attn_implementation="sdpa", device_map="cuda",
            output_loading_info=True)
        torch.cuda.synchronize()
        load_s = time.monotonic() - t
    model.eval()
    missing = [k for k in info.get("missing_keys", []) if "visual" not in k]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        raise SystemExit(f"bench_peer: {path}: loading problems: missing {missing[:5]}, "
                         f"unexpected {list(info.get('unexpected_keys', []))[:5]}, "
                         f"mismatched {list(info.get('mismatched_keys', []))[:5]}")
    return model, load_s


def time_case(model, ids, repeats, warmup):
    import torch

    def fwd():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    with torch.no_grad():
        for _ in range(warmup):
            logits = fwd()
        torch.cuda.synchronize()
        ms = []
        for _ in range(repeats):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            logits = fwd()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
    last = logits[:, -1, :].float()
    if not torch.isfinite(last).all():
        raise SystemExit("bench_peer: non-finite logits")
    top5 = torch.topk(last, 5, dim=-1).indices.tolist()
    return ms, top5


def cmd_time(a):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_name(0)
    model, load_s = load(a.model)
    cases = []
    for name in sorted(os.listdir(a.inputs)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(a.inputs, name)) as f:
            inp = json.load(f)
        if "rows" in inp:
            seqs = inp["rows"]
        else:
            seqs = [inp["tokens"]]
        cases.append((name[:-5], torch.tensor(seqs, dtype=torch.long, device="cuda")))
    cases.sort(key=lambda c: (c[1].shape[0] > 1, c[1].numel()))
    ready_s = None
    results = []
    for name, ids in cases:
        ms, top5 = time_case(model, ids, a.repeats, a.warmup)
        if ready_s is None:
            ready_s = time.monotonic() - T0
        r = {"case": name, "batch": ids.shape[0], "tokens": ids.shape[1],
             "ms_median": statistics.median(ms), "ms_min": min(ms), "ms_max": max(ms),
             "ms_all": ms, "top5_last": top5[0]}
        print(json.dumps({k: v for k, v in r.items() if k != "ms_all"}), flush=True)
        results.append(r)
    out = {"peer": "transformers", "transformers": __import__("transformers").__version__,
           "torch": torch.__version__, "device": dev, "model": os.path.abspath(a.model),
           "dtype": "bfloat16", "attn": "sdpa", "repeats": a.repeats, "warmup": a.warmup,
           "load_s": load_s, "process_to_first_result_s": ready_s,
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
           "params": sum(p.numel() for p in model.parameters()), "cases": results}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "cases"}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("inputs")
    pi.add_argument("--out", required=True)
    pi.add_argument("--seed", type=int, default=SEED)
    pi.add_argument("--max-id", type=int, default=MAX_ID)
    pi.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    pi.add_argument("--rows", default=",".join(f"{b}x{t}" for b, t in ROWS))
    pt = sub.add_parser("time")
    pt.add_argument("--model", required=True)
    pt.add_argument("--inputs", required=True)
    pt.add_argument("--repeats", type=int, default=10)
    pt.add_argument("--warmup", type=int, default=3)
    pt.add_argument("--out")
    a = p.parse_args()
    if a.cmd == "inputs":
        cmd_inputs(a)
    else:
        cmd_time(a)


if __name__ == "__main__":
    sys.exit(main())
