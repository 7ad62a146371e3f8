#!/usr/bin/env python3
"""Prints the markdown tables of notes/issue18-gpu-runs.md from a committed issue-18 run folder
(notes/gpu-runs/<date>-H200-issue18/: part1 and part2 as scripts/gpu-issue18 wrote them), so every
number in the note is read from the raw files. Stdlib only.

usage: issue18_tables.py RUN_DIR
"""
import json
import os
import re
import sys


def load_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
    return out


def f(x, d=1):
    return "–" if x is None else f"{x:.{d}f}"


def parity(run):
    print("### Layer-by-layer parity (s1 layer i on transformers' bf16 input of layer i)\n")
    print("| shape | prompt | tokens | layers within transformers' spread | s1 error (min–max) "
          "| spread (min–max) | worst err / spread |")
    print("|---|---|---:|---:|---|---|---|")
    p4 = os.path.join(run, "part1", "parity_4b.json")
    if os.path.exists(p4):
        d = json.load(open(p4))
        for r in d["results"]:
            w = max(range(len(r["s1_err"])), key=lambda i: r["s1_err"][i] / r["spread"][i])
            print(f"| 4B | {r['case']} | {r['n']} | {r['pass_layers']}/{len(r['s1_err'])} | "
                  f"{min(r['s1_err']):.2e}–{max(r['s1_err']):.2e} | {min(r['spread']):.2e}–"
                  f"{max(r['spread']):.2e} | layer {w}: {r['s1_err'][w]:.2e} / {r['spread'][w]:.2e} |")
    log27 = os.path.join(run, "part2", "parity_27b.log")
    if os.path.exists(log27):  # the 27B run ended before its JSON (see the note): from the log
        txt = open(log27).read()
        spread = {m.group(1): (m.group(2), m.group(3), m.group(4)) for m in re.finditer(
            r"^\s*(\S+): n (\d+), transformers' spread per layer \(flip [^)]*\) (\S+)\.\.(\S+),",
            txt, re.M)}
        for m in re.finditer(r"^\s*(\S+): layers within transformers' spread (\d+)/(\d+); s1 "
                             r"(\S+)\.\.(\S+); worst ratio layer (\d+) (\S+) / (\S+)$", txt, re.M):
            n, s0, s1 = spread.get(m.group(1), ("?", "?", "?"))
            print(f"| 27B | {m.group(1)} | {n} | {m.group(2)}/{m.group(3)} | {m.group(4)}–"
                  f"{m.group(5).rstrip(';')} | {s0}–{s1} | layer {m.group(6)}: {m.group(7)} / "
                  f"{m.group(8)} |")
    print()
    if os.path.exists(p4):
        print("### bf16 against fp32, end to end (final-norm rows, max over readouts)\n")
        print("| shape | prompt | s1 bf16 vs transformers fp32 | transformers bf16 vs fp32 | ratio "
              "(≤ 1.25) | s1 vs transformers bf16 |")
        print("|---|---|---:|---:|---:|---:|")
        for r in d["results"]:
            if "e2e_s1_vs_fp32" in r:
                print(f"| 4B | {r['case']} | {r['e2e_s1_vs_fp32']:.3e} | "
                      f"{r['e2e_hf_bf16_vs_fp32']:.3e} | {r['e2e_ratio']:.2f} | "
                      f"{r['e2e_s1_vs_hf_bf16']:.3e} |")
        v = d.get("vision")
        if v:
            print(f"\nVision tower (4B, grid {v['grid']}): CUDA vs float32 CPU tower "
                  f"{v.get('cuda_vs_cpu32', 0):.3e}, transformers bf16 vs fp32 "
                  f"{v.get('hf_bf16_vs_hf_fp32', 0):.3e} (bound 1.25×: "
                  f"{'pass' if v.get('pass') else 'FAIL'}); CPU tower vs transformers fp32 "
                  f"{v.get('hf_fp32_vs_cpu32', 0):.3e}; CPU tower {v['cpu_tower_s']:.0f} s.")
        print()


def latency(run, part, label, peer_rows, title):
    sp = os.path.join(run, part, "c1", f"{label}_summary.json")
    if not os.path.exists(sp):
        return
    s = json.load(open(sp))
    print(f"### {title}\n")
    print(f"Process-to-ready {s['process_to_ready_s']:.1f} s, first request "
          f"{s['first_request_ms']:.0f} ms, failures {s['failures']}, peak GPU memory "
          f"{s['peak_gpu_memory_mib']} MiB (nvidia-smi, executor alone).\n")
    runs = s["runs"]
    hdr = "| workload | tokens | questions | s1 p50 run 1 / run 2 (ms) | s1 p95 run 1 / run 2 | " \
          "decisions/s | " + " | ".join(h for h, _ in peer_rows) + \
          f" | s1 p50 / {peer_rows[-1][0].split(' (')[0]} p50 (range over runs) |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for name in runs[0]["workloads"]:
        w = [r["workloads"][name] for r in runs]
        peers = [fn(name) for _, fn in peer_rows]
        ref = next((p for p in reversed(peers) if p and p[0] is not None), None)
        ratio = "–"
        if ref:
            lo = min(x["p50_ms"] for x in w) / max(v for v in ref if v is not None)
            hi = max(x["p50_ms"] for x in w) / min(v for v in ref if v is not None)
            ratio = f"{lo:.2f}–{hi:.2f}"
        print(f"| {name} | {s['input_tokens'].get(name)} | {w[0]['questions']} | "
              f"{' / '.join(f(x['p50_ms']) for x in w)} | {' / '.join(f(x['p95_ms']) for x in w)} | "
              f"{' / '.join(f(x['decisions_per_s']) for x in w)} | "
              + " | ".join(" / ".join(f(v) for v in p) if p else "–" for p in peers) +
              f" | {ratio} |")
    print("\nMedian split of the measured requests (ms; server-timing header and the executor's "
          "S1_EXECUTOR_TIMINGS line):\n")
    keys = ["preprocess_ms", "queue_ms", "execute_ms", "finish_ms", "executor_vision_ms",
            "executor_prefix_ms", "executor_rows_ms", "executor_readout_ms"]
    print("| workload | " + " | ".join(k.replace("_ms", "").replace("executor_", "ex ")
                                         for k in keys) + " |")
    print("|" + "---|" * (len(keys) + 1))
    for name, v in s["median_split_ms"].items():
        print(f"| {name} | " + " | ".join(f(v.get(k), 2) for k in keys) + " |")
    print()


def main():
    run = sys.argv[1]
    parity(run)
    pj = load_jsonl(os.path.join(run, "part1", "omnijev-peer-timing.jsonl"))

    def omni(variant):
        def get(name):
            v = [r["ms_median"] for r in pj if r.get("kind") == "timing" and
                 r.get("variant") == variant and r.get("workload") == name]
            return v or None
        return get
    latency(run, "part1", "omnijev4b", [("peer base (ms, rounds)", omni("base")),
                                        ("peer + LoRA r32 unmerged", omni("lora_unmerged"))],
            "OmniJev-4B at concurrency 1 (one 1600×900 PNG)")
    oj = load_jsonl(os.path.join(run, "part2", "open_jev_peer.jsonl"))

    def ojp(name):
        v = [r["median_ms"] for r in oj if r.get("kind") == "timing" and r["workload"] == name]
        return v or None
    latency(run, "part2", "open_jev27b", [("peer (ms, rounds)", ojp)],
            "Open-Jev-27B at concurrency 1")
    env = [r for r in oj if r.get("kind") == "bound_after_first_forward"]
    if env:
        print(f"Open-Jev peer paths: GDN {env[0]['torch_chunk_gated_delta_rule']}, conv "
              f"{env[0]['causal_conv1d_fn']}.")
    penv = [r for r in pj if r.get("kind") == "env"]
    if penv:
        print(f"OmniJev peer: is_flash_linear_attention_available "
              f"{penv[0].get('is_flash_linear_attention_available')}, is_causal_conv1d_available "
              f"{penv[0].get('is_causal_conv1d_available')}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
