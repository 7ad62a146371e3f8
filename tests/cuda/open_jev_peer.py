#!/usr/bin/env python3
"""The Open-Jev reference procedure as a speed peer (issue 18): one transformers forward per
candidate prompt (spec/open_jev.md: each candidate is its own verification prompt; the last
hidden state goes through the FP32 scalar head), on the same GPU and the same s1 model directory
(weights read through qwen35_bf16_parity.model_folder), bf16, sdpa, with whatever fast Gated
DeltaNet and conv paths the installed packages give transformers (flash-linear-attention's
`fla` when importable; the paths actually bound are recorded).

The workloads are serve_latency.py's: each request's candidate prompts (noul 1, choice one per
option, score one per level) of the token count s1 reported for it (usage.input_tokens, split
evenly over the request's candidates: the prompts of one question differ only by the candidate
text, so this is the mean length), with seeded random ids. Per request: CUDA events around all of
its candidate forwards in order; --warmup excluded, then --reps timed per workload and round.

With --workloads FILE (bench_serve.py's S1_BENCH_WORKLOADS file, --between) the workloads are
bench_serve.py's instead: each one's request body and the token count s1 reported for it.

usage: open_jev_peer.py --model DIR (--summary S1_SUMMARY.json | --workloads FILE) --out FILE.jsonl
         [--rounds 1] [--reps 10] [--warmup 2] [--round-label N]
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, HERE)


def candidates(body):
    n = 0
    for q in body["questions"].values():
        t = q.get("type", "choice")
        c = q.get("criteria")
        n += 1 if t == "noul" else len(c) if c is not None else len(q.get("options", []))
    return n


def bound_impls(mq):
    """Which implementation transformers bound for the GDN chunk rule and the causal conv."""
    out = {}
    for name in ("torch_chunk_gated_delta_rule", "causal_conv1d_fn"):
        f = getattr(mq, name, None)
        impl = None
        try:
            impl = inspect.getclosurevars(f).nonlocals.get("implementation")
        except (TypeError, ValueError):
            pass
        impl = impl or f
        out[name] = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', '?')}"
    out["fla_imported"] = "fla" in sys.modules
    out["causal_conv1d_imported"] = "causal_conv1d" in sys.modules
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--summary")
    ap.add_argument("--workloads", default=os.environ.get("S1_BENCH_WORKLOADS"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--round-label", type=int, default=1)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (host timer)")
    a = ap.parse_args()
    dev = a.device
    import tempfile
    import torch
    import transformers
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    from qwen35_bf16_parity import model_folder
    import serve_latency as sl
    torch.backends.cuda.matmul.allow_tf32 = False
    if a.summary:
        with open(a.summary) as f:
            s1 = json.load(f)
        W = sl.workloads("open_jev", None)
        toks = s1.get("input_tokens", {})
    elif a.workloads:
        with open(a.workloads) as f:
            bw = json.load(f)
        W = {k: (v["body"], v["questions"]) for k, v in bw.items()}
        toks = {k: v["tokens"] for k, v in bw.items()}
    else:
        ap.error("--summary or --workloads (S1_BENCH_WORKLOADS)")
    sel = [k for k in W if k in toks and toks[k] and (not a.only or k in a.only.split(","))]
    log = open(a.out, "a")

    def put(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folder, man = model_folder(a.model, tmp)
        model = mq.Qwen3_5ForConditionalGeneration.from_pretrained(
            folder, dtype=torch.bfloat16, attn_implementation="sdpa", device_map=dev)
    model.eval()
    head = torch.randn(model.config.text_config.hidden_size, device=dev, dtype=torch.float32,
                       generator=torch.Generator(device=dev).manual_seed(3)) * 0.01
    put({"kind": "env", "torch": torch.__version__, "transformers": transformers.__version__,
         "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
         "load_s": time.monotonic() - t0,
         **bound_impls(mq)})
    g = torch.Generator(device=dev).manual_seed(11)
    lm = model.model.language_model
    with torch.no_grad():
        plans = {}
        for k in sel:
            nc = candidates(W[k][0])
            per = max(1, round(toks[k] / nc))
            plans[k] = [torch.randint(0, 151643, (1, per), device=dev, generator=g)
                        for _ in range(nc)]

        def request(ids_list):
            ps = []
            for ids in ids_list:
                h = lm(input_ids=ids, use_cache=False).last_hidden_state[0, -1].float()
                ps.append(torch.sigmoid(h @ head))
            return torch.stack(ps).cpu()
        first = True
        for rnd in range(a.rounds):
            for k in sel:
                for _ in range(a.warmup):
                    request(plans[k])
                if first:
                    put({"kind": "bound_after_first_forward", **bound_impls(mq)})
                    first = False
                ts = []
                for _ in range(a.reps):
                    if dev != "cuda":
                        h0 = time.perf_counter()
                        request(plans[k])
                        ts.append((time.perf_counter() - h0) * 1e3)
                        continue
                    torch.cuda.synchronize()
                    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
                    e0.record()
                    request(plans[k])
                    e1.record()
                    e1.synchronize()
                    ts.append(e0.elapsed_time(e1))
                ts.sort()
                put({"kind": "timing", "workload": k, "round": a.round_label + rnd,
                     "candidates": len(plans[k]), "tokens_per_candidate": plans[k][0].shape[1],
                     "median_ms": statistics.median(ts), "min_ms": ts[0], "max_ms": ts[-1],
                     "p95_ms": ts[max(0, -(-len(ts) * 95 // 100) - 1)], "n": len(ts),
                     "peak_alloc_GiB": torch.cuda.max_memory_allocated() / 2**30
                     if dev == "cuda" else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
