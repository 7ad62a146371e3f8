#!/usr/bin/env python3
"""End-to-end OmniJev oracle on a tiny random checkpoint (torch 2.11, transformers 5.17, peft,
tokenizers, Pillow; the CPU is enough). The backbone runs in transformers (float32 on the CPU, the
spec's all-fp32 reference, §11.5: mso/infer.py loads the base in float32 on the CPU); features,
heads and finishing are re-implemented here from spec/omnijev.md §6-§9 (the authors' mso/branch.py,
v04.py and head.py are not public); compile (prompts, shared prefix, rows, positions) comes from
omnijev_compile.py, the spec's compile oracle.

Checkpoint: s1-mkmodel (tiny, vision, tied, seed SEED, rank-4 alpha-8 PEFT adapter on the
release's target modules; CI rebuilds the same bytes and checks the SHA-256 recorded here), the
random heads of recipe/omnijev/make_demo_checkpoint.py re-saved with torch.save (head.pt, ord.pt
as state dicts; new_tok_emb.pt as a bare float32 [2, hidden] tensor, the release format of §11.3),
written to OUT/package and committed. The reference path per request (§4.5): one prefix pass over
the first L ids with the image (the model's own mRoPE positions), then every row continues its
own deep copy of the prefix cache with positions p0 + i on all three axes; a full forward of
prefix + row checks the first row of every question. Nothing is rounded to bf16 (the float32 run):
the option rows of the tied embedding are new_tok_emb as stored (float32, not bf16-exact values),
the LM-feature logits are float32 and their log-softmax over all 248,079 rows is torch's float32
one (§7). The video form (§2.3, §10.6): the mosaic PNG of --video cropped into its 16 frames with
Pillow, each frame its own image to the processor (records.video_content).

usage: omnijev_e2e.py --mkmodel S1_MKMODEL --tokenizer QWEN35_TOKENIZER.json --image PNG
                      --video MOSAIC_PNG --out DIR
"""
import argparse
import base64
import collections
import copy
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "recipe", "omnijev"))
import omnijev_compile as oc  # noqa: E402

SEED = 606
TARGETS = "q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj,gate_proj,up_proj,down_proj"
MKMODEL_ARGS = ["--shape", "tiny", "--vision", "--tied", "--seed", str(SEED), "--adapter-rank", "4",
                "--adapter-alpha", "8", "--adapter-targets", TARGETS]
HEAD_ARGS = ["--width", "32", "--ord-width", "16", "--seed", str(SEED)]
LOG = []


def log(msg):
    LOG.append(str(msg))
    print(msg, flush=True)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def requests(url):
    st = {"images": [url]}
    bench = next(c[2] for c in oc.cases()[0] if c[0] == "bench_12")
    return [
        ("one_noul", {"model": "omnijev", "state": st, "questions": {
            "hello": {"type": "noul", "instructions": "The page says hello."}}}),
        ("three", {"model": "omnijev-4b-v1.1", "state": st, "questions": {
            "url": {"type": "noul", "instructions": "The address bar shows a local server.",
                    "region": {"box": [100, 50, 760, 190.5]}},
            "next": {"type": "choice", "instructions": "Which operation comes next?",
                     "options": [{"key": "close", "text": "close the tab"}, {"text": "reload the page"},
                                 {"text": ""}, {"abstain": True}, {"key": "addr", "region": {"box": [0, 150, 1000, 250]}}]},
            "risk": {"type": "score", "instructions": "How risky is acting on this screen?",
                     "levels": ["safe", "check first", "dangerous"]}}}),
        ("twelve", {"state": st, "questions": bench}),
        ("choice_255", {"state": st, "questions": {
            "many": {"type": "choice", "instructions": "Which number is shown?",
                     "options": [{"text": str(i)} for i in range(255)]}}}),
        ("shared_start", {"state": st, "questions": {
            "blue": {"type": "noul", "instructions": "Is the button on the left side blue?"},
            "red": {"type": "noul", "instructions": "Is the button on the left side red?"},
            "size": {"type": "choice", "instructions": "Is the button on the left side small or large?",
                     "criteria": {"small": None, "large": "larger than the text"}},
            "tone": {"type": "score", "instructions": "Is the button on the left side easy to find? Rate it.",
                     "criteria": {"bad": "it is bad", "ok": None, "good": ""}}}}),
        ("unicode_and_empty", {"state": st, "questions": {
            "\u554f": {"type": "choice", "instructions": "\u753b\u9762\u306b\u4f55\u304c\u3042\u308a\u307e\u3059\u304b\uff1f \U0001F600",
                       "options": [{"text": "\u732b"}, {"text": "\u72ac \U0001F436"}, {"text": "caf\u00e9"}]},
            "same": {"type": "choice", "instructions": "Pick one.",
                     "options": [{"key": "a", "text": "the same"}, {"key": "b", "text": "the same"}]},
            "none": {"type": "choice", "instructions": "Nothing to pick.", "options": [{"abstain": True}]},
            "ctl": {"type": "noul", "instructions": "Stop here<|im_end|> and go on  \n"}}}),
    ]


VIDEO_TILE, VIDEO_COLS, VIDEO_FRAMES, VIDEO_DURATION = 128, 4, 16, 9.7


def video_png():
    """A cols x rows mosaic of tile-px frames of distinct colours, as mso/video.py lays it out
    (written once next to the fixture; the test reads that file)."""
    import struct
    import zlib
    rows_n = (VIDEO_FRAMES + VIDEO_COLS - 1) // VIDEO_COLS
    w, h = VIDEO_COLS * VIDEO_TILE, rows_n * VIDEO_TILE
    rows = []
    for y in range(h):
        r = bytearray(b"\x00")
        for c in range(VIDEO_COLS):
            k = (y // VIDEO_TILE) * VIDEO_COLS + c
            r += bytes(((k * 16) % 256, (255 - k * 12) % 256, y * 255 // h)) * VIDEO_TILE
        rows.append(bytes(r))

    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b""))


def video_meta():
    n, d = VIDEO_FRAMES, VIDEO_DURATION
    return {"n_frames": n, "cols": VIDEO_COLS, "tile": VIDEO_TILE, "duration": d,
            "timestamps": [int(round((i + 0.5) / n * d)) for i in range(n)]}


def video_requests(url):
    """The video form (spec §2.3): images[0] the mosaic, video its layout and timestamps."""
    st = {"images": [url], "video": video_meta()}
    return [
        ("video_three", {"state": st, "questions": {
            "moving": {"type": "noul", "instructions": "Something moves."},
            "what": {"type": "choice", "instructions": "What happens?",
                     "options": [{"text": "a page loads"}, {"text": "nothing"}]},
            "pace": {"type": "score", "instructions": "How fast is it?", "levels": ["slow", "fast"]}}}),
        ("video_region", {"state": st, "questions": {
            "where": {"type": "noul", "instructions": "The change happens here.",
                      "region": {"box": [0, 0, 500, 500]}},
            "next": {"type": "choice", "instructions": "Which frame changes first?",
                     "options": [{"text": "the first"}, {"text": "the last"}, {"abstain": True},
                                 {"key": "mid", "region": {"box": [250, 250, 750, 750]}}]}}}),
    ]


# ---- checkpoint -------------------------------------------------------------------------------

def make_checkpoint(mkmodel, tok35, work, pkg):
    base, ckpt = os.path.join(work, "base"), os.path.join(work, "ckpt")
    subprocess.run([mkmodel, *MKMODEL_ARGS[:6], "--tokenizer", tok35, "--out", base,
                    "--adapter-out", ckpt, *MKMODEL_ARGS[6:]], check=True, stdout=subprocess.DEVNULL)
    hidden = json.load(open(os.path.join(base, "config.json")))["text_config"]["hidden_size"]
    subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "recipe", "omnijev",
                                                 "make_demo_checkpoint.py"), "--hidden", str(hidden),
                    *HEAD_ARGS, ckpt], check=True)
    os.makedirs(pkg, exist_ok=True)
    for name in ("head", "ord"):
        sd = torch.load(os.path.join(ckpt, name + ".pt"), weights_only=True)
        torch.save(collections.OrderedDict((k, v.clone().float()) for k, v in sd.items()),
                   os.path.join(pkg, name + ".pt"))
    emb = torch.load(os.path.join(ckpt, "new_tok_emb.pt"), weights_only=True)
    emb = (emb["weight"] if isinstance(emb, dict) else emb).clone().float()
    torch.save(emb, os.path.join(pkg, "new_tok_emb.pt"))  # the release's bare [2, hidden] tensor
    shutil.copy(os.path.join(ckpt, "head_meta.json"), pkg)
    for f in ("head.pt", "ord.pt", "new_tok_emb.pt", "head_meta.json"):
        shutil.copy(os.path.join(pkg, f), ckpt)
    shas = {"base/" + f: sha256(os.path.join(base, f)) for f in sorted(os.listdir(base))
            if f.endswith(".safetensors") or f == "config.json"}
    shas.update({"ckpt/" + f: sha256(os.path.join(ckpt, f)) for f in sorted(os.listdir(ckpt))
                 if f.startswith("adapter")})
    return base, ckpt, shas


def load_model(base, ckpt, vocab, opt_ids):
    from peft import PeftModel
    from safetensors.numpy import load_file
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    model = mq.Qwen3_5ForConditionalGeneration.from_pretrained(base, dtype=torch.float32,
                                                               attn_implementation="eager")
    model.eval()
    model.resize_token_embeddings(vocab)  # records.add_option_tokens: 248,320 -> 248,079 rows
    emb = torch.load(os.path.join(ckpt, "new_tok_emb.pt"), weights_only=True)
    assert tuple(emb.shape) == (2, model.config.text_config.hidden_size), emb.shape
    win = model.get_input_embeddings().weight
    wout = model.get_output_embeddings().weight
    with torch.no_grad():  # cast to the embedding dtype: float32 here, nothing rounded
        win[opt_ids[0]:opt_ids[1] + 1] = emb.to(win.dtype)
    assert not torch.equal(emb.to(torch.bfloat16).float(), emb), "new_tok_emb is bf16-exact"
    tied = win.data_ptr() == wout.data_ptr()
    log(f"embedding {tuple(win.shape)}, output {tuple(wout.shape)}, tied {tied}")
    if not tied:
        model.get_output_embeddings().weight = win
    pm = PeftModel.from_pretrained(model, ckpt).eval()
    factors = load_file(os.path.join(ckpt, "adapter_model.safetensors"))
    live = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    matched = sum(1 for k, v in factors.items()
                  if k.replace(".weight", ".default.weight") in live and
                  np.array_equal(live[k.replace(".weight", ".default.weight")].detach().numpy(), v))
    try:
        scal = sorted({m.scaling["default"] for m in pm.modules()
                       if isinstance(getattr(m, "scaling", None), dict) and "default" in m.scaling})
    except Exception as e:  # noqa: BLE001
        scal = repr(e)
    log(f"PEFT: {matched}/{len(factors)} adapter tensors live; scaling {scal}")
    return pm, {"adapter_tensors": len(factors), "adapter_live": matched, "scaling": str(scal),
                "tied": tied}


# ---- heads (spec §8), features (§7), finishing (§9) -------------------------------------------

class Heads:
    def __init__(self, ckpt):
        self.h = torch.load(os.path.join(ckpt, "head.pt"), weights_only=True)
        self.o = torch.load(os.path.join(ckpt, "ord.pt"), weights_only=True)

    @staticmethod
    def lin(t, name, x):
        return torch.nn.functional.linear(x, t[name + ".weight"], t[name + ".bias"])

    def mlp(self, t, name, x):
        return self.lin(t, name + ".2", torch.nn.functional.gelu(self.lin(t, name + ".0", x)))

    def option_scorer(self, u, zq, f, typ):
        h = self.h
        g = torch.tanh(self.mlp(h, "que", zq[None]))[0]
        H = self.mlp(h, "opt", u) * g[None] + self.lin(h, "feat", f)
        s = self.lin(h, "score", H)[:, 0] + self.lin(h, "feat_lin", f)[:, 0]
        t = torch.exp(h["log_tau"][typ])
        s = s / t
        if typ == 0:
            return torch.softmax(torch.stack([s[0], torch.zeros((), dtype=s.dtype)]), 0)[:1]
        a = self.lin(h, "abstain", g[None])[0] / t
        return torch.softmax(torch.cat([s, a]), 0)[:-1]

    def ordinal(self, u, zq):
        o = self.o
        z = self.mlp(o, "z", zq[None])[0, 0]
        r = self.mlp(o, "cut", u)[:, 0]
        n = r.shape[0]
        if n == 1:
            return torch.ones(1)
        theta = torch.cat([r[:1], r[:1] + torch.cumsum(torch.nn.functional.softplus(r[1:]), 0)])
        c = torch.sigmoid(theta - z)
        c = torch.cat([c[:-1], torch.ones(1)])
        p = torch.cat([c[:1], c[1:] - c[:-1]])
        return torch.clamp(p, min=1e-8)


def logprobs(w, hidden, targets):
    """log_softmax(W h)[target] over every row of W, all float32 (the reference run in float32)."""
    lp = torch.log_softmax(hidden.float() @ w.float().T, dim=-1)
    return lp[torch.arange(len(targets)), torch.tensor(targets)]


def features(sums, ns, firsts):
    m = torch.tensor([s if n else -1e4 for s, n in zip(sums, ns)], dtype=torch.float32)
    dist = torch.log_softmax(m, 0)
    rows = []
    for s, n, f, d in zip(sums, ns, firsts, dist.tolist()):
        s = np.float32(s)
        rows.append([s / np.float32(10) if n else 0.0, s / np.float32(n) if n else 0.0,
                     np.float32(n) / np.float32(10), d, f if n else 0.0, 1.0 if n else 0.0])
    return torch.tensor(np.array(rows, dtype=np.float32))


def seq_sum(xs):
    """Left-to-right double sum (Python < 3.12 sum(), spec §9.7)."""
    t = 0.0
    for x in xs:
        t += x
    return t


def scale(v, temp):
    if abs(temp - 1.0) < 1e-6:
        return list(v)
    w = [max(1e-9, x) ** (1.0 / temp) for x in v]
    s = seq_sum(w)
    return [x / s for x in w]


def jev(p32, k):
    if k < 2:
        return 1.0
    k32 = np.float32(k)
    c = (k32 * np.max(np.asarray(p32, np.float32)) - np.float32(1)) / (k32 - np.float32(1))
    return float(min(max(c, np.float32(0)), np.float32(1)))


def finish(q, mu, calib):
    temps, bias = calib["temperatures"], calib["biases"].get("noul", 0.0)
    typ, keys = q["type"], q["keys"]
    if typ == "noul":
        p0 = float(np.float32(mu[0]))
        if bias != 0:
            p0 = min(max(p0, 1e-9), 1 - 1e-9)
            z = min(max(math.log(p0 / (1 - p0)) + bias, -40.0), 40.0)
            p0 = 1.0 / (1.0 + math.exp(-z))
        return {"noul": round(scale([p0, 1 - p0], temps["noul"])[0], 4)}
    if typ == "choice":
        if not keys:
            return {"choice": None, "score": None, "probabilities": {}, "abstain": 1.0,
                    "valid": False, "confidence": 0.0}
        m = np.asarray(mu, np.float32)
        s = np.float32(0)
        for x in m:
            s = np.float32(s + x)
        valid = bool(s <= 1 + 1e-5)
        probs = m if valid else (m / s).astype(np.float32)
        ab = np.float32(max(np.float32(1) - s, np.float32(0))) if valid else np.float32(0)
        full = scale([float(x) for x in probs] + [float(ab)], temps["choice"])
        p32 = np.asarray(full[:-1], np.float32)
        ab32 = np.float32(full[-1])
        best = int(np.argmax(p32))
        conf = jev(list(p32) + [ab32], len(keys) + 1)
        return {"choice": keys[best],
                "probabilities": {k: round(float(p), 4) for k, p in zip(keys, p32)},
                "abstain": round(float(ab32), 4), "valid": valid, "confidence": round(conf, 4)}
    m = np.asarray(mu, np.float32)
    s = np.float32(0)
    for x in m:
        s = np.float32(s + x)
    probs = (m / np.float32(max(s, np.float32(1e-6)))).astype(np.float32)
    full = scale([float(x) for x in probs] + [0.0], temps["score"])
    p32 = [float(x) for x in np.asarray(full[:-1], np.float32)]
    tot = seq_sum(p32)
    p = [x / tot for x in p32]
    best = int(np.argmax(np.asarray(p)))
    return {"score": keys[best], "probabilities": {k: round(x, 4) for k, x in zip(keys, p)},
            "confidence": round(jev(p, len(keys)), 4)}


# ---- the backbone passes ----------------------------------------------------------------------

def image_inputs(path, video=None):
    """Pixel values and grids of the request's images: one still, or a video's frames cropped
    from the mosaic (records.video_content, spec §2.3: frame k at (col·tile, row·tile))."""
    from PIL import Image
    from transformers import Qwen2VLImageProcessor
    img = Image.open(path).convert("RGB")
    if video:
        t, cols = video["tile"], video["cols"]
        frames = [img.crop(((k % cols) * t, (k // cols) * t, (k % cols + 1) * t, (k // cols + 1) * t))
                  for k in range(video["n_frames"])]
    else:
        frames = [img]
    try:
        proc = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                     image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                     size={"shortest_edge": oc.MIN_PIXELS,
                                           "longest_edge": oc.MAX_PIXELS})
    except Exception:  # noqa: BLE001  the config-file route of tests/oracle/image_fixtures.py
        from transformers import AutoImageProcessor
        log("Qwen2VLImageProcessor(...) failed, using AutoImageProcessor: " + traceback.format_exc())
        d = "/tmp/omnijev-pp"
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump({"size": {"shortest_edge": oc.MIN_PIXELS, "longest_edge": oc.MAX_PIXELS},
                       "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
                       "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 3,
                       "rescale_factor": 1 / 255, "do_convert_rgb": True, "do_resize": True,
                       "do_rescale": True, "do_normalize": True,
                       "image_processor_type": "Qwen2VLImageProcessorFast"}, f)
        proc = AutoImageProcessor.from_pretrained(d)
    out = proc(images=frames, return_tensors="pt")
    pv, grid = out["pixel_values"].float(), out["image_grid_thw"]
    log(f"image {img.size} ({len(frames)} frames): processor {type(proc).__name__} "
        f"backend {getattr(proc, 'backend', None)}, grid {grid.tolist()}, pixel_values "
        f"{tuple(pv.shape)} sha256 {hashlib.sha256(pv.numpy().astype('<f4').tobytes()).hexdigest()}")
    return img.size, pv, grid


def forward(pm, ids, **kw):
    out = pm(input_ids=torch.tensor([ids]), output_hidden_states=True, **kw)
    return out, out.hidden_states[-1][0]


def run_request(pm, tok, w_lm, heads, calib, img, name, body):
    size, pv, grid = img
    c = oc.compile_request(tok, body, size)
    pad = tok.token_to_id("<|image_pad|>")
    assert all(c["grid"] == [int(x) for x in g] for g in grid.tolist()), (c["grid"], grid)
    L, p0 = c["L"], c["p0"]
    pre = c["prefix_ids"]
    mm = torch.tensor([[1 if t == pad else 0 for t in pre]])
    img_kw = dict(pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=mm)
    copies = {"deepcopy": 0, "rerun": 0}

    def prefix_cache():
        pout, _ = forward(pm, pre, use_cache=True, **img_kw)
        return pout.past_key_values

    def row_cache():  # each row continues its own copy of the prefix cache (spec §4.5)
        try:
            c2 = copy.deepcopy(cache)
            copies["deepcopy"] += 1
        except Exception:  # noqa: BLE001  the same state, recomputed
            c2 = prefix_cache()
            copies["rerun"] += 1
        return c2

    with torch.inference_mode():
        cache = prefix_cache()
        try:
            got = pm.base_model.model.model.get_rope_index(torch.tensor([pre]), mm_token_type_ids=mm,
                                                           image_grid_thw=grid)[0][:, 0, :].tolist()
            pos_ok = got == c["prefix_pos"]
        except Exception as e:  # noqa: BLE001
            pos_ok = repr(e)
        hid = []
        for ri, row in enumerate(c["rows"]):
            n = len(row)
            pos = torch.arange(p0, p0 + n).view(1, 1, n).expand(3, 1, n).clone()
            try:
                _, h = forward(pm, row, past_key_values=row_cache(), use_cache=True,
                               position_ids=pos)
            except Exception:  # noqa: BLE001  the model's own positions (rope deltas) instead
                log(f"{name}: row {ri} with explicit positions failed: {traceback.format_exc()}")
                _, h = forward(pm, row, past_key_values=row_cache(), use_cache=True)
            hid.append(h)
        full_diff = 0.0
        for q in c["questions"]:  # full forward of prefix + row, first row of each question
            if not q["n_rows"]:
                continue
            row = c["rows"][q["first_row"]]
            ids = pre + row
            mmf = torch.tensor([[1 if t == pad else 0 for t in ids]])
            _, hf = forward(pm, ids, use_cache=False, pixel_values=pv, image_grid_thw=grid,
                            mm_token_type_ids=mmf)
            full_diff = max(full_diff, (hf[L:] - hid[q["first_row"]]).abs().max().item())
    answers, qout = {}, []
    opt_id = tok.token_to_id(oc.OPT)
    for q in c["questions"]:
        entry = {"id": q["id"], "type": q["type"], "keys": q["keys"], "first_row": q["first_row"],
                 "n_rows": q["n_rows"], "open_offset": q["open_offset"]}
        if not q["keys"]:
            answers[q["id"]] = finish(q, [], calib)
            qout.append(entry)
            continue
        us, sums, ns, firsts, zq = [], [], [], [], None
        for r in range(q["first_row"], q["first_row"] + q["n_rows"]):
            row, h = c["rows"][r], hid[r]
            o = q["open_offset"]
            assert row[o] == opt_id
            cpos = len(row) - 1
            us.append(h[cpos])
            zrow = h[max(0, o - 1)]
            if zq is None:
                zq = zrow
            inner = list(range(o + 1, cpos))
            ns.append(len(inner))
            if inner:
                lp = logprobs(w_lm, torch.stack([zrow] + [h[t - 1] for t in inner]),
                              [row[o + 1]] + [row[t] for t in inner])
                firsts.append(float(lp[0]))
                s = np.float32(0)
                for x in lp[1:].numpy():
                    s = np.float32(s + x)
                sums.append(float(s))
            else:
                firsts.append(0.0)
                sums.append(0.0)
        u = torch.stack(us)
        feats = features(sums, ns, firsts)
        with torch.inference_mode():
            if q["type"] == "score":
                mu = heads.ordinal(u, zq)
            else:
                mu = heads.option_scorer(u, zq, feats, 0 if q["type"] == "noul" else 1)
        entry.update(mu=[float(x) for x in mu.float()], feats=feats.tolist(),
                     u_absmax=float(u.abs().max()), zq_absmax=float(zq.abs().max()))
        answers[q["id"]] = finish(q, entry["mu"], calib)
        qout.append(entry)
    log(f"{name}: L {L}, p0 {p0}, {len(c['rows'])} rows, input_tokens {c['input_tokens']}, "
        f"prefix positions equal the model's: {pos_ok}, rows vs full forward max |dh| {full_diff:.3e}, "
        f"cache copies {copies}")
    return {"name": name, "body": json.dumps(body, ensure_ascii=False), "L": L, "p0": p0,
            "grid": c["grid"], "rows": c["rows"], "input_tokens": c["input_tokens"],
            "prefix_positions_equal": pos_ok, "full_forward_max_diff": full_diff,
            "questions": qout, "answers": answers,
            "usage": {"input_tokens": c["input_tokens"], "output_tokens": 0}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkmodel", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--video", required=True, help="the mosaic PNG (written when absent)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/omnijev-e2e")
    a = ap.parse_args()
    t0 = time.time()
    url = vurl = None
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    if not os.path.exists(a.video):
        with open(a.video, "wb") as f:
            f.write(video_png())
    fix = {"seed": SEED, "mkmodel_args": MKMODEL_ARGS, "head_args": HEAD_ARGS,
           "image": os.path.basename(a.image), "image_sha256": sha256(a.image),
           "video": os.path.basename(a.video), "video_sha256": sha256(a.video)}
    try:
        import peft
        import PIL
        import transformers
        fix["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "peft": peft.__version__, "pillow": PIL.__version__,
                           "numpy": np.__version__, "python": sys.version}
        from tokenizers import Tokenizer
        omni_tok = os.path.join(a.work, "omnijev_tokenizer.json")
        oc.build_tokenizer(a.tokenizer, omni_tok)
        tok = Tokenizer.from_file(omni_tok)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        opt_ids = [tok.token_to_id(oc.OPT), tok.token_to_id(oc.OPT_END)]
        base, ckpt, fix["sha256"] = make_checkpoint(a.mkmodel, a.tokenizer, a.work,
                                                    os.path.join(a.out, "package"))
        log(f"checkpoint {fix['sha256']}")
        pm, fix["model_checks"] = load_model(base, ckpt, vocab, opt_ids)
        w_lm = pm.base_model.model.get_output_embeddings().weight.detach().float()
        calib = json.load(open(os.path.join(ckpt, "head_meta.json")))
        fix["calibration"] = calib
        heads = Heads(ckpt)
        img = image_inputs(a.image)
        with open(a.image, "rb") as f:
            url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        fix["requests"] = []
        with open(a.video, "rb") as f:
            vurl = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        vimg = image_inputs(a.video, video_meta())
        todo = [(n, b, img) for n, b in requests(url)] + [(n, b, vimg) for n, b in video_requests(vurl)]
        for name, body, im in todo:
            try:
                fix["requests"].append(run_request(pm, tok, w_lm, heads, calib, im, name, body))
            except Exception:
                log(f"{name}: " + traceback.format_exc())
                fix.setdefault("errors", []).append(name)
    except Exception:
        log(traceback.format_exc())
        fix["error"] = traceback.format_exc()
    fix["seconds"] = round(time.time() - t0, 1)
    fix["log"] = LOG
    for r in fix.get("requests", []):  # the data URLs are rebuilt from the committed images
        r["body"] = r["body"].replace(url, "@IMAGE@")
        if vurl:
            r["body"] = r["body"].replace(vurl, "@VIDEO@")
    with open(os.path.join(a.out, "e2e.json"), "w") as f:
        json.dump(fix, f, indent=1, ensure_ascii=False)
    print("done", "error" in fix or "errors" in fix, fix["seconds"], "s")


if __name__ == "__main__":
    main()
