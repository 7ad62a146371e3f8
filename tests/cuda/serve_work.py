#!/usr/bin/env python3
"""The work a benchmark request asks of the GPU, and how much of the H200's bf16 matrix roof a
measured run used: the arithmetic the note on concurrency rests on (notes/2026-12-05-serve-roofline.md).

  serve_work.py record --bin BUILD --family F --tokenizer QWEN35.json [--tokenizer-config CFG]
                       --out WORK.json [--keep DIR]
      Here, on the CPU: a tiny random directory of family F made as the GPU runs make theirs
      (s1-mkmodel --family F, the same tokenizer; only the widths differ, and the token counts,
      image grids and readouts of a program do not depend on them), the trio started with
      `s1-executor --record`, every workload of scripts/bench_serve.py sent once, in order, then
      `s1-replay --describe` of the records: per workload the tokens the backbone launches, each
      row's whole-sequence tokens, the causal query-key pairs, the image patches and readouts,
      and the answer's usage.input_tokens.
  serve_work.py roofline --work WORK.json --raw RAW.jsonl --shape 4b|9b|27b [--roof-tflops 790]
      Prints the tables: per workload the FLOPs of one request on the shape's real dimensions, the
      rate its median execute time at concurrency 1 implies and spec/benchmark.md's floor for it
      (max(bf16 weights / 4.3 TB/s, FLOPs / the roof)); per measured run, the FLOPs the
      requests it completed asked for over its wall time, against the roof. Refuses a raw file
      whose token counts differ from WORK.json's (another tokenizer or workload set).

FLOPs counted (2 per multiply-add), dimensions of ../shared/spec/qwen3_5.md §1.1-1.2 (text and
vision config of each shape):
  - linear: every launched token through every projection and MLP of every layer;
  - attention: 4·Hq·D per causal query-key pair per full-attention layer (Q·Kᵀ and P·V);
  - Gated DeltaNet, chunk 64: 6·dk·dv (W·S, Q·S, the update) + 64·(2·dk + 2·dv) (the chunk's
    K·Kᵀ, Q·Kᵀ, solves and A·V') per token and value head;
  - LM head: 2·H·vocab per full-vocabulary log-prob position, 2·H per label logit;
  - vision: patch embedding, every tower layer's projections and MLP, its attention within each
    image (4·V per patch pair), the merger.
Not counted: LoRA kept unmerged (r·(in + out) per adapted linear: under 1 % of the linear FLOPs at
r ≤ 32), norms, activations, rotary, the heads. So every rate is a lower bound on the arithmetic
done. The roof: 790 TFLOP/s, the bf16 dense matrix rate measured on this machine kind
(/work/.library/device/KINDS.md, notes/cuda-kernels.md). Stdlib only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

# spec/qwen3_5.md §1.1 (text) and §1.2 (vision), per shape
SHAPES = {
    "4b": dict(H=2560, I=9216, L=32, full_every=4, Hq=16, Hkv=4, D=256, Hk=16, Hv=32, dk=128,
               dv=128, vocab=248320, vdepth=24, V=1024, F=4096, O=2560),
    "9b": dict(H=4096, I=12288, L=32, full_every=4, Hq=16, Hkv=4, D=256, Hk=16, Hv=32, dk=128,
               dv=128, vocab=248320, vdepth=27, V=1152, F=4304, O=4096),
    "27b": dict(H=5120, I=17408, L=64, full_every=4, Hq=24, Hkv=4, D=256, Hk=16, Hv=48, dk=128,
                dv=128, vocab=248320, vdepth=27, V=1152, F=4304, O=5120),
}
PATCH_DIM = 1536  # 3 channels · 2 frames · 16 · 16
COPY_TBS = 4.3    # the copy rate of spec/benchmark.md's floor, TB/s
CHUNK = 64


def per_token_linear(s):
    """FLOPs of one token through every linear layer of the text backbone."""
    n_full = s["L"] // s["full_every"]
    n_lin = s["L"] - n_full
    H = s["H"]
    full = H * 2 * s["Hq"] * s["D"] + H * 2 * s["Hkv"] * s["D"] + s["Hq"] * s["D"] * H
    gdn = (H * (2 * s["Hk"] * s["dk"] + 2 * s["Hv"] * s["dv"]) + H * 2 * s["Hv"]
           + s["Hv"] * s["dv"] * H)
    mlp = 3 * H * s["I"]
    return 2 * (n_full * full + n_lin * gdn + s["L"] * mlp)


def vision_params(s):
    """Weights of the vision tower: patch embedding, layers, merger."""
    V = s["V"]
    return PATCH_DIM * V + s["vdepth"] * (4 * V * V + 2 * V * s["F"]) + 4 * V * 4 * V + 4 * V * s["O"]


def floor_ms(s, d, flops, roof):
    """spec/benchmark.md's floor of one request: max(bf16 weight bytes read once / 4.3 TB/s,
    FLOPs / the roof), in ms; the tower's weights count when the program has images."""
    params = per_token_linear(s) // 2 + (vision_params(s) if d["patches"] else 0)
    return max(2 * params / (COPY_TBS * 1e12), flops / (roof * 1e12)) * 1e3


def request_flops(s, d):
    """{part: FLOPs} of one program described by s1-replay --describe (dict of ints)."""
    n_full = s["L"] // s["full_every"]
    n_lin = s["L"] - n_full
    V, p = s["V"], d["patches"]
    vision = (2 * p * PATCH_DIM * V
              + s["vdepth"] * (2 * p * (4 * V * V + 2 * V * s["F"]) + 4 * V * d["patch_pairs"])
              + 2 * (p // 4) * (4 * V * 4 * V + 4 * V * s["O"]))
    return {
        "linear": d["launched"] * per_token_linear(s),
        "attention": n_full * 4 * s["Hq"] * s["D"] * d["pairs"],
        "gdn": n_lin * d["launched"] * s["Hv"] * (6 * s["dk"] * s["dv"]
                                                 + CHUNK * (2 * s["dk"] + 2 * s["dv"])),
        "lm_head": 2 * s["H"] * (s["vocab"] * d["logprob_positions"] + d["label_ids"]),
        "vision": vision,
    }


# ---- record -----------------------------------------------------------------------------------

def record(a):
    import bench_serve
    work = a.keep or tempfile.mkdtemp(prefix="s1-serve-work-")
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o700)  # ipc sockets need a private folder
    model, rec = os.path.join(work, "model"), os.path.join(work, "rec")
    shutil.rmtree(model, ignore_errors=True)
    shutil.rmtree(rec, ignore_errors=True)
    mk = [os.path.join(a.bin, "tools/mkmodel/s1-mkmodel"), "--shape", "tiny", "--vision",
          "--seed", "1", "--tokenizer", a.tokenizer, "--family", a.family, "--s1-out", model]
    if a.family == "omnijev":  # as scripts/gpu-issue14's OmniJev-4B
        mk += ["--tied", "--adapter-rank", "32", "--adapter-alpha", "64", "--adapter-targets",
               "q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj,gate_proj,up_proj,"
               "down_proj"]
    elif a.family == "jemm":  # as scripts/gpu-issue18b's JEMM-27B
        mk += ["--adapter-rank", "16", "--adapter-alpha", "32", "--adapter-targets",
               "in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj,q_proj,k_proj,v_proj,o_proj,"
               "gate_proj,up_proj,down_proj"]
    if a.tokenizer_config:
        mk += ["--tokenizer-config", a.tokenizer_config]
    subprocess.run(mk, check=True, stdout=subprocess.DEVNULL)
    args = types.SimpleNamespace(bin=a.bin, device="cpu", executors=1, preprocessors=1, credits=1,
                                 executor_arg=["--record", rec], ready_timeout=300)
    trio = bench_serve.Trio(args, model, work)
    items = bench_serve.workloads(a.family, "full")
    usage = {}
    import httpx
    try:
        trio.up()
        with httpx.Client(timeout=600) as cl:
            for name, body, n_q in items:  # one at a time: record i is workload i
                t0, lat, status, data, st = bench_serve.post(cl, trio.port, body)
                if status != 200:
                    raise SystemExit("serve_work: %s: %d %s" % (name, status, data[:300]))
                usage[name] = json.loads(data)["usage"]["input_tokens"]
    finally:
        trio.down()
    r = subprocess.run([os.path.join(a.bin, "tools/s1-replay"), rec, "--describe"],
                       stdout=subprocess.PIPE, check=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("record ")]
    if len(lines) != len(items):
        raise SystemExit("serve_work: %d programs recorded for %d requests:\n%s"
                         % (len(lines), len(items), r.stdout))
    out = {"family": a.family, "tokenizer_sha256": sha256(a.tokenizer), "workloads": {}}
    for (name, _, n_q), ln in zip(items, lines):
        d = dict(kv.split("=", 1) for kv in ln.split()[2:])
        d.pop("request")
        w = {k: int(v) for k, v in d.items()}
        w.update(questions=n_q, usage_tokens=usage[name])
        out["workloads"][name] = w
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("serve_work: %d workloads of %s described in %s" % (len(items), a.family, a.out))


def sha256(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- roofline ---------------------------------------------------------------------------------

def median(xs):
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if s else None


def roofline(a):
    s = SHAPES[a.shape]
    work = json.load(open(a.work))["workloads"]
    reqs, runs = [], []
    with open(a.raw) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "request":
                reqs.append(r)
            elif r.get("kind") == "run":
                runs.append(r)
    for r in reqs:
        w = work.get(r["workload"])
        if w is None or (r.get("tokens") is not None and r["tokens"] != w["usage_tokens"]):
            raise SystemExit("serve_work: %s: %s tokens in the raw file, %s described"
                             % (r["workload"], r.get("tokens"), w and w["usage_tokens"]))
    gf = {name: request_flops(s, w) for name, w in work.items()}
    tot = {name: sum(v.values()) for name, v in gf.items()}
    roof = a.roof_tflops
    print("Per request (%s dimensions; GFLOP; execute = median Server-Timing `execute` at "
          "concurrency 1):\n" % a.shape)
    print("| workload | tokens launched / usage | patches | GFLOP | of it linear / attention / "
          "GDN / LM head / vision | execute ms | TFLOP/s while executing | of the roof | "
          "floor ms | execute / floor |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    c1, c1_ms, floors = {}, {}, {}
    for name, w in work.items():
        ex = [r["server_timing_ms"].get("execute") for r in reqs
              if r["workload"] == name and r["concurrency"] == 1 and r.get("status") == 200]
        ex = [x for x in ex if x]
        m = median(ex)
        rate = tot[name] / (m / 1e3) / 1e12 if m else None
        c1[name] = rate
        parts = " / ".join("%.1f" % (gf[name][k] / 1e9) for k in
                           ("linear", "attention", "gdn", "lm_head", "vision"))
        fl = floors[name] = floor_ms(s, w, tot[name], roof)
        c1_ms[name] = m
        print("| %s | %d / %d | %d | %.1f | %s | %s | %s | %s | %.1f | %s |" % (
            name, w["launched"], w["usage_tokens"], w["patches"], tot[name] / 1e9, parts,
            "%.1f" % m if m else "–", "%.0f" % rate if rate else "–",
            "%.0f %%" % (100 * rate / roof) if rate else "–", fl,
            "%.2f" % (m / fl) if m else "–"))
    one = [(name, c1_ms[name], floors[name]) for name, w in work.items()
           if w["questions"] == 1 and c1_ms[name]]
    if one:
        print("\nSingle-question workloads (%s): mean execute %.1f ms, mean floor %.1f ms." % (
            ", ".join(x[0] for x in one), sum(x[1] for x in one) / len(one),
            sum(x[2] for x in one) / len(one)))
    print("\nPer measured run (FLOPs of the requests it completed over its wall time; the mix's "
          "ceiling is the requests/s at which the roof would be spent on this mix):\n")
    print("| concurrency | run | requests | wall s | requests/s | TFLOP/s | of the roof | "
          "mix GFLOP per request | requests/s at the roof | measured / concurrency 1 | "
          "roof / concurrency 1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for run in runs:
        done = [r for r in reqs if r["concurrency"] == run["concurrency"] and r["run"] == run["run"]
                and r.get("status") == 200]
        flops = sum(tot[r["workload"]] for r in done)
        rate = flops / run["wall_s"] / 1e12
        rps = len(done) / run["wall_s"]
        mix = flops / len(done) if done else 0
        at_roof = roof * 1e12 / mix if mix else 0
        if run["concurrency"] == runs[0]["concurrency"] and base is None:
            base = rps
        print("| %d | %d | %d | %.2f | %.2f | %.0f | %.0f %% | %.1f | %.2f | %.2f× | %.2f× |" % (
            run["concurrency"], run["run"], len(done), run["wall_s"], rps, rate,
            100 * rate / roof, mix / 1e9, at_roof, rps / base, at_roof / base))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--bin", required=True, help="a build folder (meson layout)")
    r.add_argument("--family", required=True, choices=("omnijev", "open_jev", "jemm"))
    r.add_argument("--tokenizer", required=True)
    r.add_argument("--tokenizer-config")
    r.add_argument("--out", required=True)
    r.add_argument("--keep", help="work folder to keep (model, records, trio logs)")
    q = sub.add_parser("roofline")
    q.add_argument("--work", required=True)
    q.add_argument("--raw", required=True)
    q.add_argument("--shape", required=True, choices=sorted(SHAPES))
    q.add_argument("--roof-tflops", type=float, default=790.0)
    a = p.parse_args()
    record(a) if a.cmd == "record" else roofline(a)


if __name__ == "__main__":
    main()
