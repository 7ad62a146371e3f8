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
  s1      --forward S1_FORWARD --model DIR --inputs DIR --shape S [--repeats N] --raw FILE
          runs `s1-forward --device cuda:0 --repeat N` on every single_*.json input and
          `bench_rows` (--rows-tool, tests/bench) on every rows_*.json input, reads the timing (median,
          min, max ms; process-to-ready; peak device memory) and appends JSON lines to FILE.
  table   --raw FILE   one table per shape: case, s1 ms, peer ms, ratio, target
          max(peer / 5, 1.5 x floor) with the floor of spec/benchmark.md, pass / miss.
`time` also appends to --raw FILE when given (with --shape).
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
    if a.raw:
        with open(a.raw, "a") as f:
            for r in results:
                f.write(json.dumps(dict(side="peer", shape=a.shape, **r)) + "\n")
            f.write(json.dumps({"side": "peer", "shape": a.shape, "case": "_process",
                                "load_s": load_s, "process_to_first_result_s": ready_s,
                                "peak_mem_gib": out["peak_mem_gib"], "device": dev}) + "\n")


# ---- our side ------------------------------------------------------------------------------------

TIMING_KEYS = {  # what s1-forward --repeat may print, mapped to our names
    "ms_median": ("ms_median", "median_ms", "median"), "ms_min": ("ms_min", "min_ms", "min"),
    "ms_max": ("ms_max", "max_ms", "max"),
    "ready_ms": ("ready_ms", "process_to_ready_ms", "ready"),
    "peak_device_mib": ("peak_device_mib", "peak_mib", "peak_device_memory_mib"),
    "peak_device_bytes": ("peak_device_bytes", "peak_bytes", "device_used_bytes"),
    "first_ms": ("first_ms",), "weights_bytes": ("weights_bytes",),
}


def find_timing(obj):
    """The first dict inside obj (depth-first) holding a median, flattened to our names."""
    if isinstance(obj, dict):
        got = {}
        for ours, names in TIMING_KEYS.items():
            for n in names:
                if isinstance(obj.get(n), (int, float)):
                    got[ours] = float(obj[n])
                    break
        if "ms_median" in got:
            for k, v in obj.items():
                if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
                    got.setdefault("ms_all", v)
            return got
        for v in obj.values():
            t = find_timing(v)
            if t:
                return t
    elif isinstance(obj, list):
        for v in obj:
            t = find_timing(v)
            if t:
                return t
    return None


def parse_s1(stdout, out_json):
    t = find_timing(out_json)
    if t:
        return t
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                t = find_timing(json.loads(line))
            except ValueError:
                t = None
            if t:
                return t
    import re
    got = {}
    for ours, names in TIMING_KEYS.items():
        for n in names:
            m = re.search(r"\b" + n + r"\b[^0-9\n]{0,12}([0-9]+(?:\.[0-9]+)?)", stdout)
            if m:
                got[ours] = float(m.group(1))
                break
    return got if "ms_median" in got else None


def cmd_s1(a):
    """s1-forward per single input (one process each); bench_rows once for the rows inputs (and the
    single ones too with --singles-via-rows-tool: one model load for every case, for 27B)."""
    import subprocess
    recs, batch = [], []
    for name in sorted(os.listdir(a.inputs)):
        if not name.endswith(".json"):
            continue
        case = name[:-5]
        path = os.path.join(a.inputs, name)
        with open(path) as f:
            inp = json.load(f)
        size = (len(inp["rows"]), len(inp["rows"][0])) if "rows" in inp else (1, len(inp["tokens"]))
        rec = {"side": "s1", "shape": a.shape, "case": case, "tokens": size[1], "batch": size[0]}
        if "rows" in inp or a.singles_via_rows_tool:
            if not a.rows_tool:
                rec["error"] = "not run: no --rows-tool (s1-forward runs one sequence)"
                recs.append(rec)
            else:
                batch.append((path, rec))
            continue
        outp = os.path.join(a.work, f"s1_{a.shape}_{case}.json")
        cmd = [a.forward, "--model", a.model, "--device", a.device, "--input", path,
               "--output", outp, "--repeat", str(a.repeats)] + a.extra
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        rec.update(process_wall_s=time.monotonic() - t, cmd=" ".join(cmd))
        log = r.stdout + r.stderr
        if r.returncode != 0:
            rec["error"] = f"exit {r.returncode}: {log.strip()[-1500:]}"
        else:
            with open(outp) as f:
                o = json.load(f)
            tm = parse_s1(log, {k: v for k, v in o.items() if k != "logits_top"})
            if not tm:
                rec["error"] = "no timing found in the output: " + log.strip()[-1500:]
            else:
                rec.update(tm)
            try:
                rec["top5_last"] = [int(x) for x in o["logits_top"][-1]["ids"][:5]]
            except (KeyError, IndexError, TypeError):
                pass
        print(json.dumps({k: v for k, v in rec.items() if k not in ("ms_all", "cmd")}),
              flush=True)
        recs.append(rec)
    if batch:
        cmd = [a.rows_tool, "--model", a.model, "--device", a.device, "--repeat", str(a.repeats)]
        for path, _ in batch:
            cmd += ["--input", path]
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t
        lines = {}
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                try:
                    o = json.loads(line)
                    lines[o.get("input")] = o
                except ValueError:
                    pass
        for path, rec in batch:
            rec.update(process_wall_s=wall, cmd=" ".join(cmd), tool="bench_rows")
            o = lines.get(path)
            if o is None:
                rec["error"] = (f"exit {r.returncode}, no line for this input: "
                                + (r.stdout + r.stderr).strip()[-1500:])
            else:
                rec.update(find_timing(o) or {})
                rec["top5_last"] = o.get("top5_row0")
            print(json.dumps({k: v for k, v in rec.items() if k not in ("ms_all", "cmd")}),
                  flush=True)
            recs.append(rec)
    with open(a.raw, "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


# ---- the table -----------------------------------------------------------------------------------

# spec/benchmark.md: floor = max(weight bytes / 4.3 TB/s, 2 * non-embedding params * tokens /
# 790 TFLOP/s) as written there, per shape: (ms for the weights, ms per 100 tokens).
FLOOR = {"4b": (2.1, 1.06), "27b": (11.7, 6.4)}


def floor_ms(shape, tokens):
    w, per100 = FLOOR[shape]
    return max(w, per100 * tokens / 100.0)


def cmd_table(a):
    recs = []
    with open(a.raw) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    shapes = []
    for r in recs:
        if r.get("shape") not in shapes and r.get("shape") in FLOOR:
            shapes.append(r["shape"])
    status = 0
    for shape in shapes:
        s1 = {r["case"]: r for r in recs if r["side"] == "s1" and r["shape"] == shape}
        peer = {r["case"]: r for r in recs if r["side"] == "peer" and r["shape"] == shape}
        cases = [c for c in peer if not c.startswith("_")]
        cases += [c for c in s1 if c not in cases and not c.startswith("_")]
        cases.sort(key=lambda c: (c.startswith("rows"), peer.get(c, s1.get(c)).get("tokens", 0)
                                  * peer.get(c, s1.get(c)).get("batch", 1)))
        print(f"\n{shape} shape ({peer.get('_process', {}).get('device', 'GPU')}; ms are medians)")
        print(f"{'case':<12} {'s1 ms':>9} {'peer ms':>9} {'peer/s1':>8} {'target':>8} "
              f"{'result':<7} top-5")
        for c in cases:
            p, s = peer.get(c, {}), s1.get(c, {})
            n = p.get("tokens", s.get("tokens", 0)) * p.get("batch", s.get("batch", 1))
            pm, sm = p.get("ms_median"), s.get("ms_median")
            target = max((pm or 0) / 5.0, 1.5 * floor_ms(shape, n))
            if sm is None:
                res = "not run"
                status = 1
            elif sm <= target:
                res = "pass"
            else:
                res = "MISS"
                status = 1
            top = ""
            if s.get("top5_last") and p.get("top5_last"):  # rows: row 0 on both sides
                top = "same" if set(s["top5_last"]) == set(p["top5_last"]) else "DIFFER"
            f = lambda v: f"{v:9.2f}" if v is not None else f"{'-':>9}"
            ratio = f"{pm / sm:8.2f}" if pm and sm else f"{'-':>8}"
            print(f"{c:<12} {f(sm)} {f(pm)} {ratio} {target:8.2f} {res:<7} {top}")
        pr = peer.get("_process", {})
        s1_ready = [r.get("ready_ms") for r in s1.values() if r.get("ready_ms") is not None]
        s1_peak = [r["peak_device_mib"] if "peak_device_mib" in r else r["peak_device_bytes"] / 2**20
                   for r in s1.values() if "peak_device_mib" in r or "peak_device_bytes" in r]
        print(f"s1: process-to-ready {max(s1_ready) / 1e3 if s1_ready else float('nan'):.1f} s "
              f"(worst), device memory in use {max(s1_peak) / 1024 if s1_peak else float('nan'):.1f}"
              f" GiB; peer: load {pr.get('load_s', float('nan')):.1f} s, process to first result "
              f"{pr.get('process_to_first_result_s', float('nan')):.1f} s, peak "
              f"{pr.get('peak_mem_gib', float('nan')):.1f} GiB")
        for c in cases:
            if s1.get(c, {}).get("error"):
                print(f"  s1 {c}: {s1[c]['error'][:300]}")
    return status


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
    pt.add_argument("--shape", default="")
    pt.add_argument("--raw")
    ps = sub.add_parser("s1")
    ps.add_argument("--forward", required=True)
    ps.add_argument("--model", required=True)
    ps.add_argument("--inputs", required=True)
    ps.add_argument("--shape", required=True)
    ps.add_argument("--repeats", type=int, default=10)
    ps.add_argument("--device", default="cuda:0")
    ps.add_argument("--work", default=tempfile.gettempdir())
    ps.add_argument("--raw", required=True)
    ps.add_argument("--rows-tool", help="tests/bench/bench_rows (rows inputs)")
    ps.add_argument("--singles-via-rows-tool", action="store_true",
                    help="time the single sequences with the rows tool too (one model load)")
    ps.add_argument("extra", nargs="*", help="more s1-forward arguments (after --)")
    pb = sub.add_parser("table")
    pb.add_argument("--raw", required=True)
    a = p.parse_args()
    if a.cmd == "inputs":
        return cmd_inputs(a)
    if a.cmd == "time":
        return cmd_time(a)
    if a.cmd == "s1":
        return cmd_s1(a)
    return cmd_table(a)


if __name__ == "__main__":
    sys.exit(main())
