#!/usr/bin/env python3
"""Prints the markdown tables of issue 18's second GPU run from its committed raw files (a run
folder holding partA/ and partB/, each the summary.txt and the unpacked results.tar.xz of
`scripts/gpu-issue18b --run partA|partB`), so that every number in the note is read from them:
  - per family (JEMM-27B in partA, Open-Jev-27B in partB): process-to-ready, first request, and per
    concurrency requests, requests/s and decisions/s of each run, warm p50 / p95 (nearest rank),
    failures, peak GPU memory; the concurrency-16 targets (decisions/s against 6x concurrency 1,
    p95 against 3x the concurrency-1 p50); the peer's rate through its one global lock (its
    requests are served one at a time at any concurrency: workloads in bench_serve's round robin,
    each at its median) against s1's;
  - per workload at concurrency 1: input tokens (s1 / peer), s1 p50 and p95 of each measured run,
    the peer's median of each round, s1 p50 / peer median (range over runs and rounds), the peer's
    split (host work: images, preprocessing, tokens / forwards) and its largest probability
    difference from s1's answer;
  - per workload and concurrency: the median Server-Timing split;
  - 27B bf16 against fp32 end to end and the vision tower at 27B width (parity_27b.json);
  - the steps' lines of both summaries (trio_cuda, test_engine, twins, directories).
Stdlib only (scripts/bench_serve.py's summarize for the raw lines).

usage: issue18b_tables.py RUN_DIR
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import bench_serve as bs  # noqa: E402

sys.path.insert(0, HERE)
from issue18_tables import f, load_jsonl  # noqa: E402


def p(xs, q):
    return 1000 * bs.nearest_rank(xs, q) if xs else None


def family(run_dir, part, name, title, peer_file):
    bdir = os.path.join(run_dir, part, "logs", name)
    raw = load_jsonl(os.path.join(bdir, "raw.jsonl"))
    if not raw:
        print(f"### {title}\n\nnot run (no {part}/logs/{name}/raw.jsonl)\n")
        return
    fam = bs.summarize(os.path.join(bdir, "raw.jsonl"))
    d = next(iter(fam.values()))
    ready, first = d.get("ready", {}), d.get("first", {})
    peer = load_jsonl(os.path.join(bdir, peer_file))
    timing = [r for r in peer if r.get("kind") == "timing"]
    print(f"### {title}\n")
    print(f"Process-to-ready {ready.get('process_to_ready_s', float('nan')):.1f} s; first request "
          f"({first.get('workload')}) {1000 * first.get('latency_s', float('nan')):.1f} ms; "
          f"executor {' '.join(ready.get('executor_args', []))}; {ready.get('credits')} credits.\n")
    # peer through its lock: the round robin's requests one after another, each at its median
    pmed = {}
    for r in timing:
        pmed.setdefault(r["workload"], []).append(r["median_ms"])
    wl_order = [r["workload"] for r in raw if r.get("kind") == "feasibility"]
    nq = {r["workload"]: r["decisions"] for r in raw if r.get("kind") == "feasibility"}
    peer_rps = peer_dps = None
    if pmed and all(w in pmed for w in wl_order):
        cyc = sum(min(pmed[w]) for w in wl_order) / 1000  # the fastest round: peer's best
        cyc_hi = sum(max(pmed[w]) for w in wl_order) / 1000
        peer_rps = (len(wl_order) / cyc_hi, len(wl_order) / cyc)
        peer_dps = (sum(nq[w] for w in wl_order) / cyc_hi, sum(nq[w] for w in wl_order) / cyc)
    print("| concurrency | requests | requests/s (runs) | decisions/s (runs) | warm p50 ms | "
          "warm p95 ms | failures | peak GPU MiB | s1 decisions/s / peer's (one lock) |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---|")
    c1 = {}
    for c in sorted(d["levels"]):
        lv = d["levels"][c]
        runs = [lv["runs"][k] for k in sorted(lv.get("runs", {}))]
        lat = [x for r in runs for x in r["lat"]]
        rps = [len(r["lat"]) / r["wall_s"] for r in runs if r["wall_s"] > 0]
        dps = [r["dec"] / r["wall_s"] for r in runs if r["wall_s"] > 0]
        if c == 1:
            c1 = {"dps": dps, "p50": p(lat, 50)}
        ratio = "–"
        if peer_dps and dps:
            ratio = f"{min(dps) / peer_dps[1]:.2f}–{max(dps) / peer_dps[0]:.2f}"
        mem = lv.get("memory", {})
        print(f"| {c} | {sum(r['n'] for r in runs)} | {' / '.join(f(x, 2) for x in rps)} | "
              f"{' / '.join(f(x, 2) for x in dps)} | {f(p(lat, 50))} | {f(p(lat, 95))} | "
              f"{sum(r['fail'] for r in runs)} | {mem.get('peak_gpu_mib') or '–'} | {ratio} |")
        if c == 16 and c1.get("dps") and min(c1["dps"]) > 0 and dps:
            lo, hi = min(dps) / max(c1["dps"]), max(dps) / min(c1["dps"])
            p95 = p(lat, 95)
            d["_t16"] = (lo, hi, p95 / c1["p50"] if p95 is not None and c1["p50"] else None)
    if peer_rps:
        print(f"\nPeer through its one lock (serve.py serializes inference): {peer_rps[0]:.2f}–"
              f"{peer_rps[1]:.2f} requests/s, {peer_dps[0]:.2f}–{peer_dps[1]:.2f} decisions/s at "
              "any concurrency (the round robin of the workloads, each at its median of a round; "
              "slowest–fastest round); its latency at concurrency c is about c times its service "
              "time.")
    if "_t16" in d:
        lo, hi, r95 = d["_t16"]
        print(f"\nConcurrency 16 against the targets: decisions/s {lo:.2f}–{hi:.2f}× concurrency 1 "
              f"(target ≥ 6×); p95 {f(r95, 2)}× the concurrency-1 p50 (target ≤ 3×).")
    # per workload at concurrency 1: s1 per run against the peer per round
    print("\n| workload | tokens s1 / peer | questions | s1 p50 run 1 / run 2 (ms) | s1 p95 run 1 / "
          "run 2 | peer median round 1 / 2 (ms) | s1 p50 / peer median (range) | peer host / "
          "forwards (ms, at its median) | peer − s1, largest probability |")
    print("|---|---|---:|---|---|---|---|---|---:|")
    req1 = [r for r in raw if r.get("kind") == "request" and r["concurrency"] == 1]
    for w in wl_order:
        per = [[r["latency_s"] for r in req1 if r["workload"] == w and r["run"] == k and
                r["status"] == 200] for k in (1, 2)]
        p50s = [p(x, 50) for x in per if x]
        pt = [r for r in timing if r["workload"] == w]
        pm = [r["median_ms"] for r in pt]
        ratio = f"{min(p50s) / max(pm):.2f}–{max(p50s) / min(pm):.2f}" if pm and p50s else "–"
        tok = next((r.get("tokens") for r in raw if r.get("kind") == "feasibility" and
                    r["workload"] == w), None)
        ptok = pt[0].get("tokens", pt[0].get("tokens_per_candidate")) if pt else None
        if pt and "tokens_per_candidate" in pt[0]:
            ptok = pt[0]["tokens_per_candidate"] * pt[0]["candidates"]
        split = (f"{f(pt[0].get('host_ms_at_median'))} / {f(pt[0].get('forwards_ms_at_median'))}"
                 if pt and "host_ms_at_median" in pt[0] else "–")
        diff = max((r["max_prob_diff_vs_s1"] for r in pt if r.get("max_prob_diff_vs_s1") is not None),
                   default=None)
        print(f"| {w} | {tok} / {ptok if ptok is not None else '–'} | {nq.get(w)} | "
              f"{' / '.join(f(x) for x in p50s)} | "
              f"{' / '.join(f(p(x, 95)) for x in per if x)} | {' / '.join(f(x) for x in pm) or '–'} "
              f"| {ratio} | {split} | {f(diff, 4)} |")
    # the split per workload and concurrency
    names = [s for s in bs.SPLIT if any(s in w["stages"] for lv in d["levels"].values()
                                        for w in lv.get("workloads", {}).values())]
    print("\nMedian Server-Timing split per workload (ms):\n")
    print("| concurrency | workload | p50 ms | p95 ms | " + " | ".join(names) + " |")
    print("|---:|---|---:|---:|" + "---:|" * len(names))
    for c in sorted(d["levels"]):
        for w, v in d["levels"][c].get("workloads", {}).items():
            print(f"| {c} | {w} | {f(p(v['lat'], 50))} | {f(p(v['lat'], 95))} | " + " | ".join(
                f(bs.nearest_rank(v["stages"][s], 50)) if v["stages"].get(s) else "–"
                for s in names) + " |")
    env = [r for r in peer if r.get("kind") in ("env", "bound_after_first_forward")]
    if env:
        e = env[-1]
        e0 = env[0]
        extra = ", ".join(f"{k} {round(e0[k], 1) if isinstance(e0[k], float) else e0[k]}"
                          for k in ("torch", "transformers", "peft", "fla",
                                                    "lora_dtypes", "adapter_pairs", "load_s")
                          if k in e0)
        print(f"\nPeer: GDN chunk rule {e.get('torch_chunk_gated_delta_rule')}, causal conv "
              f"{e.get('causal_conv1d_fn')} (bound after its first forward); {extra}.")
    btw = [r for r in raw if r.get("kind") == "between"]
    for b in btw:
        print(f"Peer run between s1's runs 1 and 2 at concurrency {b['concurrency']}: rc {b['rc']}, "
              f"{b['s']:.0f} s.")
    print()


def parity(run_dir):
    path = os.path.join(run_dir, "partB", "logs", "parity_27b.json")
    print("### 27B: bf16 against fp32 end to end (final-norm rows, max over readouts)\n")
    if not os.path.exists(path):
        print("not run (no partB/logs/parity_27b.json)\n")
        return
    d = json.load(open(path))
    print("| prompt | tokens | s1 bf16 vs transformers fp32 | transformers bf16 vs fp32 | ratio "
          f"(≤ {d['e2e_ratio_bound']}) | s1 vs transformers bf16 |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in d["results"]:
        if "e2e_s1_vs_fp32" in r:
            print(f"| {r['case']} | {r['n']} | {r['e2e_s1_vs_fp32']:.3e} | "
                  f"{r['e2e_hf_bf16_vs_fp32']:.3e} | {r['e2e_ratio']:.2f} | "
                  f"{r['e2e_s1_vs_hf_bf16']:.3e} |")
        else:
            print(f"| {r['case']} | {r['n']} | – | – | – | – |")
    v = d.get("vision")
    if v:
        def g(k):
            return f"{v[k]:.3e}" if isinstance(v.get(k), float) else "–"
        verdict = "not judged" if "pass" not in v else "pass" if v["pass"] else "FAIL"
        print(f"\nVision tower (grid {v['grid']}; model hidden {d.get('hidden')}): CUDA vs float32 "
              f"CPU tower {g('cuda_vs_cpu32')}, transformers bf16 vs fp32 {g('hf_bf16_vs_hf_fp32')} "
              f"(bound {d['e2e_ratio_bound']}×: {verdict}); CPU tower vs "
              f"transformers fp32 {g('hf_fp32_vs_cpu32')}; CPU tower {v['cpu_tower_s']:.0f} s.")
    print(f"\nFailures: {d['fails'] or 'none'}; transformers fp32 load and run "
          f"{f(d.get('hf_fp32_s'))} s, total {f(d.get('total_s'))} s.\n")


def steps(run_dir):
    print("### Steps\n")
    for part in ("partA", "partB"):
        path = os.path.join(run_dir, part, "summary.txt")
        if not os.path.exists(path):
            continue
        for line in open(path, errors="replace"):
            line = line.rstrip()
            if line.startswith("== ") or ": rc=" in line or "after waiting" in line or \
                    "started in the background" in line or " not run" in line:
                print(f"- {part}: `{line[:220]}`")
    print()


def main():
    run_dir = sys.argv[1]
    steps(run_dir)
    family(run_dir, "partA", "bench_jemm", "JEMM-27B (vision tower, r16 adapter kept)",
           "jemm_peer.jsonl")
    family(run_dir, "partB", "bench_oj27", "Open-Jev-27B (merged)", "open_jev_peer.jsonl")
    parity(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
