"""Integration tests of s1-mkmodel, s1-export and the model-directory open (issue 3, I/O half).

usage: io_tools.py CASE MKMODEL EXPORT OPEN_DIR TOKENIZER
CASE is one of: mkmodel, baddir, lora, refuse, s1out, cache, s1family. Checkpoints are regenerated in a temporary folder
(the tiny shape with the real 248320-row vocabulary, ~64 MB each) and removed afterwards. The
LoRA merge is recomputed here independently with numpy in float64 and rounded to bfloat16 with
numpy's round-half-even, then compared bit for bit with s1-export's output.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
from safetensors import safe_open

CASE, MKMODEL, EXPORT, OPEN_DIR, TOKENIZER = sys.argv[1:6]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args, ok=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if ok and r.returncode != 0:
        print(r.stdout, r.stderr)
        raise SystemExit(f"command failed: {' '.join(args)}")
    return r


def mkmodel(out, *extra):
    run(MKMODEL, "--shape", "tiny", "--tokenizer", TOKENIZER, "--out", out, *extra)


def export(*extra, ok=True):
    return run(EXPORT, "--family", "qwen3_5", *extra, ok=ok)


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ---- a minimal safetensors codec (independent of the C code) ------------------------------------
def st_read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for k, v in hdr.items():
        b, e = v["data_offsets"]
        dt = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[v["dtype"]]
        out[k] = (v["dtype"], np.frombuffer(data[b:e], dtype=dt).reshape(v["shape"]))
    return out


def st_write(path, tensors):
    hdr, blobs, at = {}, [], 0
    for k in sorted(tensors):
        dtype, arr = tensors[k]
        b = np.ascontiguousarray(arr).tobytes()
        hdr[k] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_to_f64(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f64_to_bf16(x):
    """Round float64 to bfloat16 once, half to even: x = m * 2^e with 0.5 <= |m| < 1; bf16 keeps
    8 significant bits, so round m * 256 to an integer (np.rint is half-even, and m * 256 is exact)."""
    m, e = np.frexp(x)
    r = np.rint(m * 256.0)
    v = np.ldexp(r, e - 8).astype(np.float32)  # exactly representable in bf16, so exact in f32
    return (v.view(np.uint32) >> 16).astype(np.uint16)


# ---- cases -------------------------------------------------------------------------------------
def case_mkmodel(tmp):
    a, b, c = (os.path.join(tmp, x) for x in "abc")
    mkmodel(a, "--seed", "7", "--vision")
    mkmodel(b, "--seed", "7", "--vision", "--threads", "3")
    mkmodel(c, "--seed", "8", "--vision")
    sa, sb, sc = (sha(os.path.join(d, "model.safetensors")) for d in (a, b, c))
    check(sa == sb, "same seed gives the same model.safetensors (any thread count)")
    check(sa != sc, "different seed gives a different model.safetensors")
    check(sha(a + "/config.json") == sha(c + "/config.json"), "config does not depend on the seed")
    cfg = json.load(open(a + "/config.json"))
    tc, vc = cfg["text_config"], cfg["vision_config"]
    want = dict(vocab_size=248320, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=24,
                linear_conv_kernel_dim=4)
    for k, v in want.items():
        check(tc[k] == v, f"tiny-A text_config.{k} == {v} (got {tc[k]})")
    check(tc["layer_types"] == ["linear_attention"] * 3 + ["full_attention"], "layer_types L,L,L,F")
    check(tc["rope_parameters"]["mrope_section"] == [3, 3, 2], "mrope_section [3,3,2]")
    check((vc["depth"], vc["hidden_size"], vc["num_heads"], vc["intermediate_size"],
           vc["num_position_embeddings"], vc["out_hidden_size"]) == (2, 48, 2, 96, 16, 64),
          "tiny-A vision_config")
    # token ids come from the tokenizer's added tokens
    added = {t["content"]: t["id"] for t in json.load(open(TOKENIZER))["added_tokens"]}
    check(cfg["image_token_id"] == added["<|image_pad|>"] == 151655, "image_token_id from tokenizer")
    check(cfg["video_token_id"] == added["<|video_pad|>"], "video_token_id from tokenizer")
    check(cfg["vision_start_token_id"] == added["<|vision_start|>"], "vision_start from tokenizer")
    check(cfg["vision_end_token_id"] == added["<|vision_end|>"], "vision_end from tokenizer")
    pp = json.load(open(a + "/preprocessor_config.json"))
    check(pp["size"] == {"shortest_edge": 65536, "longest_edge": 16777216} and pp["patch_size"] == 16
          and pp["merge_size"] == 2 and pp["image_mean"] == [0.5] * 3, "preprocessor_config §1.4")
    # the official reader accepts the file; counts per spec §2.5
    with safe_open(a + "/model.safetensors", "numpy") as f:
        keys = list(f.keys())
    check(len(keys) == 89, f"56 text + 33 vision tensors (got {len(keys)})")
    check(sum(k.startswith("model.visual.") for k in keys) == 33, "33 vision tensors")
    t = st_read(a + "/model.safetensors")
    check(all(d == "BF16" for d, _ in t.values()), "every tensor BF16")
    L = "model.language_model.layers."
    w = lambda k: bf16_to_f64(t[k][1])
    q = w(L + "3.self_attn.q_proj.weight")
    check(abs(q.std() - 0.05) < 0.005 and abs(q.mean()) < 0.005, f"linear std 0.05 (got {q.std():.4f})")
    n = w(L + "0.input_layernorm.weight")
    check(abs(n.mean()) < 0.05 and 0.05 < n.std() < 0.15, "zero-centred norm ~ N(0, 0.1)")
    g = w(L + "0.linear_attn.norm.weight")
    check(abs(g.mean() - 1) < 0.05 and 0.05 < g.std() < 0.15, "gated norm ~ 1 + N(0, 0.1)")
    al = w(L + "0.linear_attn.A_log")
    check(al.min() >= np.log(0.01) - 1e-2 and al.max() <= 1e-2, "A_log = log U(0.01, 1)")
    # decays at a = 0 over all GDN heads: exp(-exp(A_log) * softplus(dt_bias)) spread over (0, 1)
    dec = np.concatenate([np.exp(-np.exp(w(L + f"{i}.linear_attn.A_log")) *
                                 np.log1p(np.exp(w(L + f"{i}.linear_attn.dt_bias")))) for i in range(3)])
    check(dec.min() < 0.5 and dec.max() > 0.8 and 0.2 < np.median(dec) < 0.95,
          f"decays cover (0, 1): {np.round(np.sort(dec), 3)}")
    cv = w(L + "0.linear_attn.conv1d.weight")
    check(cv.shape == (160, 1, 4) and np.abs(cv).max() <= 0.5, "conv1d [160,1,4] in U(-0.5,0.5)")
    # tied, ratio-3, no vision: 55 tensors, in_proj_b has 6 heads, no lm_head
    d = os.path.join(tmp, "d")
    mkmodel(d, "--seed", "7", "--tied", "--ratio3")
    t2 = st_read(d + "/model.safetensors")
    check(len(t2) == 55 and "lm_head.weight" not in t2, "tied text-only: 55 tensors, no lm_head")
    check(t2[L + "0.linear_attn.in_proj_b.weight"][1].shape == (6, 64), "ratio3: in_proj_b [6, 64]")
    # export both layouts: CausalLM and ConditionalGeneration (no vision) give identical weights
    e, f_, g_ = (os.path.join(tmp, x) for x in ("e", "f", "g"))
    mkmodel(os.path.join(tmp, "cg"), "--seed", "9")
    mkmodel(os.path.join(tmp, "cl"), "--seed", "9", "--causal")
    with safe_open(tmp + "/cl/model.safetensors", "numpy") as f:
        check(all(k.startswith("model.layers.") or k in ("model.embed_tokens.weight",
                  "model.norm.weight", "lm_head.weight") for k in f.keys()), "causal key layout")
    export("--base", tmp + "/cg", "--out", e)
    export("--base", tmp + "/cl", "--out", f_)
    check(sha(e + "/weights.safetensors") == sha(f_ + "/weights.safetensors"),
          "CausalLM and ConditionalGeneration exports are byte-identical")
    export("--base", a, "--out", g_)
    r = run(OPEN_DIR, g_)
    check(r.stdout.strip() == "ok qwen3_5 89 vision", f"exported vision model opens: {r.stdout!r}")
    r = run(OPEN_DIR, f_)
    check(r.stdout.strip() == "ok qwen3_5 56", f"exported text model opens: {r.stdout!r}")
    # export copies BF16 tensors unchanged
    src, dst = st_read(a + "/model.safetensors"), st_read(g_ + "/weights.safetensors")
    check(src.keys() == dst.keys() and all(np.array_equal(src[k][1], dst[k][1]) for k in src),
          "exported weights equal the checkpoint's")
    m = json.load(open(g_ + "/s1-model.json"))
    check(m["format"] == "s1serve-model/1" and m["family"] == "qwen3_5" and m["vision"] is True,
          "manifest format/family/vision")
    check(m["config"] == cfg, "manifest config is config.json unchanged")
    check(m["files"]["weights.safetensors"]["sha256"] == sha(g_ + "/weights.safetensors"),
          "manifest SHA-256 of weights")
    check(m["image_processor"] == pp, "manifest image_processor from preprocessor_config.json")
    # sharded input: split the checkpoint in two with an index; the export is identical
    s = os.path.join(tmp, "s")
    os.mkdir(s)
    for x in ("config.json", "tokenizer.json", "preprocessor_config.json"):
        shutil.copy(os.path.join(a, x), s)
    keys = sorted(src)
    st_write(s + "/model-00001-of-00002.safetensors", {k: src[k] for k in keys[:40]})
    st_write(s + "/model-00002-of-00002.safetensors", {k: src[k] for k in keys[40:]})
    wm = {k: "model-0000%d-of-00002.safetensors" % (1 if i < 40 else 2) for i, k in enumerate(keys)}
    json.dump({"metadata": {}, "weight_map": wm}, open(s + "/model.safetensors.index.json", "w"))
    export("--base", s, "--out", os.path.join(tmp, "h"))
    check(sha(tmp + "/h/weights.safetensors") == sha(g_ + "/weights.safetensors"),
          "sharded checkpoint exports to the same weights")
    # s1-mkmodel's own sharding (index + shards) holds the same bytes
    mkmodel(os.path.join(tmp, "k"), "--seed", "7", "--vision", "--max-shard-bytes", "20000000")
    idx = json.load(open(tmp + "/k/model.safetensors.index.json"))
    shards = sorted(set(idx["weight_map"].values()))
    check(len(shards) == 4 and shards[0] == "model-00001-of-00004.safetensors" and
          not os.path.exists(tmp + "/k/model.safetensors"), f"mkmodel shards: {shards}")
    export("--base", os.path.join(tmp, "k"), "--out", os.path.join(tmp, "kx"))
    check(sha(tmp + "/kx/weights.safetensors") == sha(g_ + "/weights.safetensors"),
          "mkmodel's sharded checkpoint exports to the same weights")
    # mtp.* is skipped; F32 A_log stays F32 bit for bit; other F32 tensors round to BF16 (RNE)
    s2 = os.path.join(tmp, "s2")
    os.mkdir(s2)
    for x in ("config.json", "tokenizer.json"):
        shutil.copy(os.path.join(a, x), s2)
    t3 = dict(src)
    t3["mtp.fc.weight"] = ("BF16", np.ones((4, 4), np.uint16))
    alog = np.linspace(-4.0, 0.1, 4).astype(np.float32) + np.float32(1e-7)
    t3[L + "0.linear_attn.A_log"] = ("F32", alog)
    rng = np.random.default_rng(0)
    qf = (rng.standard_normal((512, 64)) * 0.05).astype(np.float32)
    qf[0, :4] = [1.00390625, 1.01171875, -1.00390625, 1.0 + 2.0 ** -8 + 2.0 ** -20]  # ties and above
    t3[L + "3.self_attn.q_proj.weight"] = ("F32", qf)
    st_write(s2 + "/model.safetensors", t3)
    export("--base", s2, "--out", os.path.join(tmp, "s2x"))
    X = st_read(tmp + "/s2x/weights.safetensors")
    check("mtp.fc.weight" not in X and len(X) == 89, "mtp.* skipped")
    check(X[L + "0.linear_attn.A_log"][0] == "F32" and X[L + "0.linear_attn.A_log"][1].tobytes()
          == alog.tobytes(), "F32 A_log kept exactly")
    qx = X[L + "3.self_attn.q_proj.weight"]
    check(qx[0] == "BF16" and np.array_equal(qx[1], f64_to_bf16(qf.astype(np.float64))),
          "F32 weight rounded to BF16 half-even")
    check(list(qx[1][0, :4]) == [0x3F80, 0x3F82, 0xBF80, 0x3F81], "bf16 ties to even")
    check(run(OPEN_DIR, tmp + "/s2x").stdout.strip() == "ok qwen3_5 89 vision", "F32 A_log opens")
    # a wrong shape in the checkpoint is refused at export, naming file and tensor
    bad = dict(src)
    bad[L + "1.mlp.up_proj.weight"] = ("BF16", np.zeros((95, 64), np.uint16))
    st_write(s + "/model-00001-of-00002.safetensors", {k: bad[k] for k in keys[:40]})
    r = export("--base", s, "--out", os.path.join(tmp, "i"), ok=False)
    want = (f"s1-export: {s}/model-00001-of-00002.safetensors: tensor '{L}1.mlp.up_proj.weight' "
            "has shape [95, 64], config needs [96, 64]")
    check(r.returncode == 1 and r.stderr.strip() == want, f"export shape refusal: {r.stderr!r}")


def case_baddir(tmp):
    base = os.path.join(tmp, "hf")
    mkmodel(base, "--seed", "3", "--tied")  # tied: half the bytes to copy for each variant
    good = os.path.join(tmp, "good")
    export("--base", base, "--out", good)
    check(run(OPEN_DIR, good).stdout.strip() == "ok qwen3_5 55", "good directory opens")
    W = "weights.safetensors"
    L = "model.language_model.layers."

    def variant(name, edit, fix_hash=True):
        d = os.path.join(tmp, name)
        shutil.copytree(good, d)
        edit(d)
        if fix_hash:  # keep the manifest consistent so the intended check is the one that fires
            m = json.load(open(d + "/s1-model.json"))
            for f, e in m["files"].items():
                e["sha256"], e["bytes"] = sha(os.path.join(d, f)), os.path.getsize(os.path.join(d, f))
            json.dump(m, open(d + "/s1-model.json", "w"))
        r = run(OPEN_DIR, d, ok=False)
        lines = r.stdout.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1, f"{name}: one error line ({r.stdout!r})")
        return d, (lines[0] if lines else "")

    def edit_weights(fn):
        def go(d):
            t = st_read(os.path.join(d, W))
            fn(t)
            st_write(os.path.join(d, W), t)
        return go

    def expect(name, edit, msg, fix_hash=True):
        d, line = variant(name, edit, fix_hash)
        want = msg.replace("{d}", d)
        check(line.endswith(want), f"{name}: got {line!r}, want ...{want!r}")

    expect("missing", edit_weights(lambda t: t.pop(L + "1.mlp.up_proj.weight")),
           f"{{d}}/{W}: tensor '{L}1.mlp.up_proj.weight' missing")
    expect("shape", edit_weights(lambda t: t.__setitem__(L + "2.linear_attn.in_proj_z.weight",
                                                         ("BF16", np.zeros((96, 63), np.uint16)))),
           f"{{d}}/{W}: tensor '{L}2.linear_attn.in_proj_z.weight' has shape [96, 63], config needs [96, 64]")
    expect("dtype", edit_weights(lambda t: t.__setitem__(L + "3.self_attn.k_proj.weight",
                                                         ("F16", np.zeros((128, 64), np.float16)))),
           f"{{d}}/{W}: tensor '{L}3.self_attn.k_proj.weight' has dtype F16, expected BF16")
    expect("extra", edit_weights(lambda t: t.__setitem__("mtp.fc.weight", ("BF16", np.zeros(4, np.uint16)))),
           f"{{d}}/{W}: unexpected tensor 'mtp.fc.weight' (55 expected, 56 stored)")

    def truncate(d):
        p = os.path.join(d, W)
        os.truncate(p, os.path.getsize(p) - 1000)
    size = os.path.getsize(os.path.join(good, W))
    expect("truncated", truncate,
           f"{{d}}/{W}: {size - 1000} bytes, {{d}}/s1-model.json lists {size} (truncated or replaced)",
           fix_hash=False)
    # truncated and the manifest rewritten to match: the safetensors reader catches it
    d, line = variant("truncated2", truncate)
    check(f"{d}/{W}: tensor '" in line and "out of bounds" in line, f"truncated2: {line!r}")

    def flip(d):
        p = os.path.join(d, W)
        b = bytearray(open(p, "rb").read())
        b[-5] ^= 1
        open(p, "wb").write(b)
    d, line = variant("hash", flip, fix_hash=False)
    check(line.startswith(f"error -{1000 + 3}: {d}/{W}: SHA-256 ") and
          line.endswith(f"does not match {d}/s1-model.json ({sha(good + '/' + W)})"), f"hash: {line!r}")

    def manifest(fn):
        def go(d):
            m = json.load(open(d + "/s1-model.json"))
            fn(m)
            json.dump(m, open(d + "/s1-model.json", "w"))
        return go
    expect("family", manifest(lambda m: m.__setitem__("family", "llama")),
           "{d}/s1-model.json: key 'family': unknown family \"llama\"")
    expect("format", manifest(lambda m: m.__setitem__("format", "s1serve-model/2")),
           "{d}/s1-model.json: key 'format' is \"s1serve-model/2\", expected \"s1serve-model/1\"")
    expect("nokey", manifest(lambda m: m.pop("config")), "{d}/s1-model.json: key 'config' missing")
    expect("config", manifest(lambda m: m["config"]["text_config"].pop("hidden_size")),
           "{d}/s1-model.json: key 'text_config.hidden_size' missing")
    expect("mrope", manifest(lambda m: m["config"]["text_config"]["rope_parameters"].__setitem__(
        "mrope_section", [3, 3, 3])),
           "{d}/s1-model.json: key 'text_config.rope_parameters.mrope_section' sums to 9, rotary dims / 2 is 8")
    expect("unlisted", manifest(lambda m: m["files"].pop(W)),
           f"{{d}}/s1-model.json: key 'files.{W}' missing")

    def badjson(d):
        p = d + "/s1-model.json"
        open(p, "w").write(open(p).read()[:-20])
    d, line = variant("json", badjson, fix_hash=False)
    n = os.path.getsize(d + "/s1-model.json")
    check(line == f"error -1000: {d}/s1-model.json: not valid JSON (unexpected end of data at byte {n})",
          f"json: {line!r}")
    expect("gone", lambda d: os.remove(d + "/tokenizer.json"),
           "{d}/tokenizer.json: missing (listed in {d}/s1-model.json)", fix_hash=False)

    # as a preprocessor opens it (--compile): the manifest and the tokenizer are checked, the
    # weights are not read (a host may lack them), the same messages for what it does check
    env = dict(os.environ, S1_VERIFY="always")

    def compiled(d, ok=True):
        r = subprocess.run([OPEN_DIR, "--counts", "--compile", d], capture_output=True, text=True,
                           env=env)
        check((r.returncode == 0) == ok, f"--compile {d}: {r.stdout!r}")
        return r.stdout.strip().splitlines()
    check(compiled(good) == ["ok qwen3_5 compile", "hashed 1 cached 0"], "compile opens, hashing "
          "the tokenizer alone")
    for name in ("missing", "shape", "truncated", "hash"):  # weight faults: not its business
        check(compiled(os.path.join(tmp, name))[0] == "ok qwen3_5 compile", f"compile {name}")
    nw = os.path.join(tmp, "noweights")
    shutil.copytree(good, nw)
    os.remove(os.path.join(nw, W))
    check(compiled(nw) == ["ok qwen3_5 compile", "hashed 1 cached 0"], "compile without weights")
    r = run(OPEN_DIR, nw, ok=False)
    check(r.stdout.strip().endswith(f"{nw}/{W}: missing (listed in {nw}/s1-model.json)"),
          f"serving without weights is refused: {r.stdout!r}")
    for name in ("family", "format", "nokey", "config", "mrope", "unlisted", "json", "gone"):
        d = os.path.join(tmp, name)
        full = run(OPEN_DIR, d, ok=False).stdout.strip()
        check(compiled(d, ok=False) == [full], f"compile {name}: the same refusal as serving")
    tk = os.path.join(tmp, "tokflip")
    shutil.copytree(nw, tk)
    b = bytearray(open(tk + "/tokenizer.json", "rb").read())
    b[-3] ^= 1
    open(tk + "/tokenizer.json", "wb").write(b)
    line = compiled(tk, ok=False)[0]
    check(line.startswith(f"error -{1000 + 3}: {tk}/tokenizer.json: SHA-256 "), f"tokflip: {line!r}")


def lora_setup(tmp, name, *extra):
    base, ad = os.path.join(tmp, name), os.path.join(tmp, name + "-lora")
    mkmodel(base, "--seed", "5", "--vision", "--adapter-out", ad, "--adapter-rank", "4",
            "--adapter-alpha", "6", "--adapter-targets",
            "q_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj,down_proj,linear_fc1,lm_head", *extra)
    return base, ad


def case_lora(tmp):
    for variant in ("f32", "bf16"):
        extra = ("--adapter-bf16",) if variant == "bf16" else ()
        base, ad = lora_setup(tmp, "m" + variant, *extra)
        merged, kept, plain = (os.path.join(tmp, x + variant) for x in ("merged", "kept", "plain"))
        export("--base", base, "--out", plain)
        export("--base", base, "--adapter", ad, "--lora", "merge", "--out", merged)
        export("--base", base, "--adapter", ad, "--lora", "keep", "--out", kept)
        acfg = json.load(open(ad + "/adapter_config.json"))
        scale = acfg["lora_alpha"] / acfg["r"]
        check(scale == 1.5, "alpha/r = 6/4")
        W, A = st_read(base + "/model.safetensors"), st_read(ad + "/adapter_model.safetensors")
        M = st_read(merged + "/weights.safetensors")
        pre = "base_model.model."
        adapted = sorted(k[len(pre):-len(".lora_A.weight")] for k in A if k.endswith(".lora_A.weight"))
        # 3 GDN layers x (in_proj_qkv, in_proj_z, out_proj) + full layer (q, v, o) + 4 down_proj
        # + 3 vision linear_fc1 (2 blocks, merger) + lm_head
        check(len(adapted) == 9 + 3 + 4 + 3 + 1, f"20 adapted modules (got {len(adapted)})")
        bad = 0
        for mod in adapted:
            a = A[pre + mod + ".lora_A.weight"]
            b = A[pre + mod + ".lora_B.weight"]
            fa = bf16_to_f64(a[1]) if a[0] == "BF16" else a[1].astype(np.float64)
            fb = bf16_to_f64(b[1]) if b[0] == "BF16" else b[1].astype(np.float64)
            w = bf16_to_f64(W[mod + ".weight"][1])
            want = f64_to_bf16(w + scale * (fb @ fa))
            got = M[mod + ".weight"][1]
            bad += int(np.count_nonzero(want != got))
            check(np.count_nonzero(got != W[mod + ".weight"][1]) > got.size // 2,
                  f"{mod}: the merge changed most elements")
        check(bad == 0, f"{variant}: merged bf16 weights equal the float64 reference bit for bit "
                        f"({bad} differ)")
        untouched = [k for k in M if k[:-len(".weight")] not in adapted]
        check(all(np.array_equal(M[k][1], W[k][1]) for k in untouched), "non-adapted weights unchanged")
        # keep: base identical to the plain export, factors preserved exactly as F32
        check(sha(kept + "/weights.safetensors") == sha(plain + "/weights.safetensors"),
              "keep leaves the base weights unchanged")
        K = st_read(kept + "/adapter.safetensors")
        check(len(K) == 2 * len(adapted), "keep: two factors per adapted module")
        for mod in adapted:
            for ab in "AB":
                src = A[pre + mod + f".lora_{ab}.weight"]
                dt, got = K[mod + f".lora_{ab}"]
                ref = (bf16_to_f64(src[1]).astype(np.float32) if src[0] == "BF16" else src[1])
                check(dt == "F32" and got.tobytes() == ref.tobytes(), f"keep {mod}.lora_{ab} exact")
        m = json.load(open(kept + "/s1-model.json"))
        check(m["adapter"] == {"rank": 4, "alpha": 6.0, "scale": 1.5, "file": "adapter.safetensors"},
              f"manifest adapter block: {m['adapter']}")
        check(run(OPEN_DIR, kept).stdout.strip() == "ok qwen3_5 89 vision adapter", "kept opens")
        check(run(OPEN_DIR, merged).stdout.strip() == "ok qwen3_5 89 vision", "merged opens")
    # CausalLM-layout adapter (base_model.model.model.layers...) maps to the same canonical keys
    cb, ca = os.path.join(tmp, "cl"), os.path.join(tmp, "cl-lora")
    mkmodel(cb, "--seed", "5", "--causal", "--adapter-out", ca, "--adapter-rank", "2",
            "--adapter-alpha", "2", "--adapter-targets", "q_proj,gate_proj")
    export("--base", cb, "--adapter", ca, "--lora", "keep", "--out", tmp + "/clk")
    K = st_read(tmp + "/clk/adapter.safetensors")
    check(f"model.language_model.layers.3.self_attn.q_proj.lora_A" in K and len(K) == 2 * (1 + 4),
          f"causal adapter keys canonical: {sorted(K)[:2]}")


def case_refuse(tmp):
    base, ad = lora_setup(tmp, "m")
    cfg0 = json.load(open(ad + "/adapter_config.json"))
    p = ad + "/adapter_config.json"
    cases = [
        ("use_dora", True, "use_dora is true: DoRA adapters are not supported"),
        ("use_rslora", True, "use_rslora is true: rank-stabilised LoRA (alpha/sqrt(r)) is not supported"),
        ("bias", "lora_only", "bias is \"lora_only\": trained biases are not supported (bias must be \"none\")"),
        ("modules_to_save", ["lm_head"], "modules_to_save is set: fully trained extra modules are not supported"),
        ("rank_pattern", {"q_proj": 8}, "rank_pattern is not empty: per-module ranks are not supported"),
        ("alpha_pattern", {"q_proj": 8}, "alpha_pattern is not empty: per-module alphas are not supported"),
        ("peft_type", "IA3", "peft_type \"IA3\" is not supported (LORA only)"),
    ]
    for key, val, msg in cases:
        c = dict(cfg0)
        c[key] = val
        json.dump(c, open(p, "w"))
        for mode in ("merge", "keep"):
            r = export("--base", base, "--adapter", ad, "--lora", mode, "--out", tmp + "/o", ok=False)
            check(r.returncode == 1 and r.stderr.strip() == f"s1-export: {p}: {msg}",
                  f"refuse {key} ({mode}): {r.stderr!r}")
    json.dump(cfg0, open(p, "w"))
    # a factor for a module the base lacks, and a factor of the wrong rank
    A = st_read(ad + "/adapter_model.safetensors")
    keys = sorted(A)
    k0 = keys[0]
    t = dict(A)
    t["base_model.model.model.language_model.layers.0.mlp.nope.lora_A.weight"] = A[k0]
    t["base_model.model.model.language_model.layers.0.mlp.nope.lora_B.weight"] = A[k0]
    st_write(ad + "/adapter_model.safetensors", t)
    r = export("--base", base, "--adapter", ad, "--out", tmp + "/o", ok=False)
    check(r.stderr.strip() == f"s1-export: {ad}/adapter_model.safetensors: tensor 'base_model.model."
          "model.language_model.layers.0.mlp.nope.lora_A.weight' adapts 'model.language_model."
          "layers.0.mlp.nope.weight', which is not a weight of the base model", f"unknown module: {r.stderr!r}")
    t = dict(A)
    ka = next(k for k in keys if k.endswith("layers.3.self_attn.q_proj.lora_A.weight"))
    t[ka] = ("F32", np.zeros((3, 64), np.float32))
    st_write(ad + "/adapter_model.safetensors", t)
    r = export("--base", base, "--adapter", ad, "--out", tmp + "/o", ok=False)
    check(r.stderr.strip() == f"s1-export: {ad}/adapter_model.safetensors: tensor '{ka}' has shape "
          "[3, 64], expected [r=4, in=64]", f"rank mismatch: {r.stderr!r}")


def without_upstream(text):
    """The manifest's text less its top-level "upstream" block (the one part --s1-out writes
    differently: it names the generator instead of the Hugging Face files read)."""
    lines, out, skip = text.split("\n"), [], False
    for ln in lines:
        if ln == '  "upstream": {':
            skip = True
        elif skip and ln in ("  },", "  }"):
            skip = False
        elif not skip:
            out.append(ln)
    return "\n".join(out)


def case_s1out(tmp):
    """s1-mkmodel --s1-out writes what s1-mkmodel --out + s1-export write: the same
    weights.safetensors and tokenizer.json bytes, the same manifest text outside "upstream"."""
    for name, extra in (("tiny", ()), ("tiny-vision", ("--vision",)), ("tied-causal", ("--tied", "--causal"))):
        hf, ex, s1 = (os.path.join(tmp, f"{x}-{name}") for x in ("hf", "ex", "s1"))
        mkmodel(hf, "--seed", "11", *extra)
        export("--base", hf, "--out", ex)
        run(MKMODEL, "--shape", "tiny", "--tokenizer", TOKENIZER, "--s1-out", s1, "--seed", "11",
            "--threads", "3", *extra)
        check(sorted(os.listdir(s1)) == ["s1-model.json", "tokenizer.json", "weights.safetensors"],
              f"{name}: --s1-out writes three files ({sorted(os.listdir(s1))})")
        for f in ("weights.safetensors", "tokenizer.json"):
            check(sha(os.path.join(ex, f)) == sha(os.path.join(s1, f)),
                  f"{name}: {f} byte-identical to mkmodel + export")
        mt_ex, mt_s1 = open(ex + "/s1-model.json").read(), open(s1 + "/s1-model.json").read()
        m_ex, m_s1 = json.loads(mt_ex), json.loads(mt_s1)
        check(m_ex["files"] == m_s1["files"], f"{name}: manifest files (SHA-256, bytes) equal")
        check(m_s1["files"]["weights.safetensors"]["sha256"] == sha(s1 + "/weights.safetensors"),
              f"{name}: manifest hash is the file's")
        check(without_upstream(mt_ex) == without_upstream(mt_s1) and len(without_upstream(mt_s1)) <
              len(mt_s1) and "upstream" not in without_upstream(mt_s1),
              f"{name}: manifest text equal outside upstream")
        up = m_s1["upstream"]
        check(up["text_prefix"] == m_ex["upstream"]["text_prefix"] and up["generator"]["seed"] == 11
              and up["generator"]["vision"] == ("--vision" in extra)
              and up["sources"][0]["sha256"] == sha(TOKENIZER), f"{name}: upstream names the generator")
        want = "ok qwen3_5 " + {"tiny": "56", "tiny-vision": "89 vision", "tied-causal": "55"}[name]
        r = run(OPEN_DIR, s1)
        check(r.stdout.strip() == want, f"{name}: --s1-out directory opens: {r.stdout!r}")
    r = run(MKMODEL, "--shape", "tiny", "--tokenizer", TOKENIZER, "--s1-out", tmp + "/x", "--out",
            tmp + "/y", ok=False)
    check(r.returncode == 2 and not os.path.exists(tmp + "/x"), "--s1-out with --out is refused")
    r = run(MKMODEL, "--shape", "tiny", "--tokenizer", TOKENIZER, "--s1-out", tmp + "/x",
            "--adapter-out", tmp + "/a", "--adapter-rank", "2", "--adapter-alpha", "2",
            "--adapter-targets", "q_proj", ok=False)
    check(r.returncode == 2 and "--adapter-out needs --out" in r.stderr, f"--s1-out with an adapter "
          f"is refused: {r.stderr!r}")


def case_cache(tmp):
    """The verified-file cache of cm_model_dir_open (common/cm_verify_cache.h): a second open of an
    unchanged directory hashes nothing; a changed file (bytes rewritten, mtime restored: ctime
    still moves), a manifest hash the cache does not hold, a garbage cache, S1_VERIFY=always and
    an unusable cache directory all mean hashing (and a refusal where the bytes are wrong)."""
    d, cdir = os.path.join(tmp, "m"), os.path.join(tmp, "cache")
    cfile = os.path.join(cdir, "verified-files.json")
    run(MKMODEL, "--shape", "tiny", "--tied", "--seed", "5", "--tokenizer", TOKENIZER, "--s1-out", d)
    base_env = {k: v for k, v in os.environ.items()
                if k not in ("S1_VERIFY", "S1_CACHE_DIR", "XDG_CACHE_HOME")}

    def opened(want_ok=True, **env):
        e = dict(base_env, S1_CACHE_DIR=cdir)
        e.update(env)
        e = {k: v for k, v in e.items() if v is not None}
        r = subprocess.run([OPEN_DIR, "--counts", d], capture_output=True, text=True, env=e)
        lines = r.stdout.strip().splitlines()
        if want_ok:
            check(r.returncode == 0 and lines[:1] == ["ok qwen3_5 55"], f"opens: {r.stdout!r}")
            return lines[1] if len(lines) > 1 else ""
        check(r.returncode == 1, f"refused: {r.stdout!r}")
        return lines[0] if lines else ""

    # a file whose mtime is not 2 s in the past is hashed but not recorded (a change within the
    # timestamp tick could hide); the future stands in for "just now" without depending on speed
    files = [d + "/weights.safetensors", d + "/tokenizer.json"]
    st = [os.stat(f) for f in files]
    for f, s0 in zip(files, st):
        os.utime(f, ns=(s0.st_atime_ns, time.time_ns() + 3600 * 10**9))
    check(opened() == "hashed 2 cached 0", "first open hashes both files")
    check(not os.path.exists(cfile), "files with a recent (here: future) mtime are not recorded")
    for f, s0 in zip(files, st):
        os.utime(f, ns=(s0.st_atime_ns, s0.st_mtime_ns))
    time.sleep(2.2)  # the ctime set just now settles
    check(opened() == "hashed 2 cached 0", "open after settling hashes both files")
    c = json.load(open(cfile))
    m = json.load(open(d + "/s1-model.json"))
    real = os.path.realpath(d)
    check(c["format"] == "s1serve-verified/1" and sorted(c["files"]) ==
          [real + "/tokenizer.json", real + "/weights.safetensors"], f"cache entries: {sorted(c['files'])}")
    check(c["files"][real + "/weights.safetensors"]["sha256"] == m["files"]["weights.safetensors"]["sha256"],
          "cache records the manifest's hash")
    check(opened() == "hashed 0 cached 2", "second open hashes nothing")
    check(opened(S1_VERIFY="always") == "hashed 2 cached 0", "S1_VERIFY=always hashes")
    check(opened(S1_VERIFY="yes please") == "hashed 2 cached 0", "an unknown S1_VERIFY hashes")
    check(opened(S1_VERIFY="cache") == "hashed 0 cached 2", "S1_VERIFY=cache uses the cache")
    # the manifest expects another hash while the file and its cache entry are unchanged
    mtext = open(d + "/s1-model.json").read()
    good = m["files"]["weights.safetensors"]["sha256"]
    open(d + "/s1-model.json", "w").write(mtext.replace(good, "0" * 64))
    line = opened(want_ok=False)
    check(f"weights.safetensors: SHA-256 {good} does not match" in line,
          f"a cached file is hashed against a changed manifest hash and refused: {line!r}")
    open(d + "/s1-model.json", "w").write(mtext)
    # same size, other bytes, mtime restored (touch -d): ctime moved, so it is hashed and refused
    w = d + "/weights.safetensors"
    st0 = os.stat(w)
    with open(w, "r+b") as f:
        f.seek(-5, 2)
        b = f.read(1)
        f.seek(-5, 2)
        f.write(bytes([b[0] ^ 1]))
    os.utime(w, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    st1 = os.stat(w)
    check(st1.st_size == st0.st_size and st1.st_mtime_ns == st0.st_mtime_ns and
          st1.st_ctime_ns != st0.st_ctime_ns, "modified in place: size and mtime kept, ctime moved")
    line = opened(want_ok=False)
    check(line.startswith(f"error -{1000 + 3}: {w}: SHA-256 ") and line.endswith(f"({good})"),
          f"modified weights refused despite the cache: {line!r}")
    with open(w, "r+b") as f:  # restore the byte: hashed again, then recorded again
        f.seek(-5, 2)
        f.write(b)
    time.sleep(2.2)
    check(opened() == "hashed 1 cached 1", "restored weights hashed, tokenizer from the cache")
    check(opened() == "hashed 0 cached 2", "then cached")
    # garbage cache files are ignored and replaced
    for junk in (b"\x00garbage{", b'{"format":"s1serve-verified/1","files":[1,2]}',
                 json.dumps({"format": "s1serve-verified/1", "files": {
                     real + "/weights.safetensors": {"stat": 5, "sha256": None},
                     real + "/tokenizer.json": "x"}}).encode(),
                 json.dumps({"format": "s1serve-verified/9", "files": c["files"]}).encode(), b""):
        open(cfile, "wb").write(junk)
        check(opened() == "hashed 2 cached 0", f"garbage cache ignored: {junk[:40]!r}")
        check(json.load(open(cfile))["format"] == "s1serve-verified/1", "garbage cache replaced")
    # an unusable cache directory (a regular file) only means hashing
    notdir = os.path.join(tmp, "plainfile")
    open(notdir, "w").write("x")
    check(opened(S1_CACHE_DIR=notdir) == "hashed 2 cached 0", "unusable cache dir: hashes, opens")
    check(opened(S1_CACHE_DIR=notdir) == "hashed 2 cached 0", "unusable cache dir: never caches")
    # the location: XDG_CACHE_HOME/s1serve, else HOME/.cache/s1serve (parents created)
    xdg, home = os.path.join(tmp, "xdg"), os.path.join(tmp, "home")
    check(opened(S1_CACHE_DIR=None, XDG_CACHE_HOME=xdg) == "hashed 2 cached 0" and
          opened(S1_CACHE_DIR=None, XDG_CACHE_HOME=xdg) == "hashed 0 cached 2" and
          os.path.exists(xdg + "/s1serve/verified-files.json"), "cache under $XDG_CACHE_HOME/s1serve")
    check(opened(S1_CACHE_DIR=None, HOME=home) == "hashed 2 cached 0" and
          os.path.exists(home + "/.cache/s1serve/verified-files.json"), "cache under $HOME/.cache/s1serve")
    # entries of files that are gone are dropped at the next write
    d2 = os.path.join(tmp, "m2")
    shutil.copytree(d, d2)
    shutil.rmtree(d)
    os.rename(d2, d)  # same path, new inodes: hashed (settled copies are recorded)
    time.sleep(2.2)
    check(opened() == "hashed 2 cached 0", "a replaced directory is hashed again")
    c2 = json.load(open(cfile))
    check(len(c2["files"]) == 2 and all(e["stat"].split(":")[1] == str(os.stat(p).st_ino)
                                        for p, e in c2["files"].items()), "stale entries replaced")
    check(not any(f.startswith("verified-files.json.") for f in os.listdir(cdir)),
          "no temporary file left behind")


def case_s1family(tmp):
    """s1-mkmodel --s1-out --family F writes the directory s1-export --family F makes of the same
    checkpoint (recipe/*/make-demo-model's route): the same files, tensor names, shapes and dtypes;
    weights byte-identical where the export copies them (all but OmniJev's two option rows, which
    come from new_tok_emb.pt there); the same tokenizer bytes; the family's manifest blocks equal
    where they do not name the generator's own inputs; both directories open."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    tokdir = os.path.dirname(TOKENIZER)
    tcfg = os.path.join(tokdir, "tokenizer_config.json")
    omni_t = "q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj,gate_proj,up_proj,down_proj"
    jemm_t = ("in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj,q_proj,k_proj,v_proj,o_proj,"
              "gate_proj,up_proj,down_proj")

    def layout(d, f):
        return {k: (v[0], v[1].shape) for k, v in st_read(os.path.join(d, f)).items()}

    # OmniJev: tiny with vision, tied, rank-4 adapter kept, heads 32/16
    hf, ck, ex, s1 = (os.path.join(tmp, "omni-" + x) for x in ("hf", "ck", "ex", "s1"))
    run(MKMODEL, "--shape", "tiny", "--vision", "--tied", "--seed", "3", "--tokenizer", TOKENIZER,
        "--out", hf, "--adapter-out", ck, "--adapter-rank", "4", "--adapter-alpha", "8",
        "--adapter-targets", omni_t)
    run(sys.executable, os.path.join(root, "recipe", "omnijev", "make_demo_checkpoint.py"),
        "--hidden", "64", "--width", "32", "--ord-width", "16", "--seed", "3", ck)
    run(EXPORT, "--family", "omnijev", "--base", hf, "--checkpoint", ck, "--out", ex)
    run(MKMODEL, "--shape", "tiny", "--vision", "--tied", "--seed", "3", "--tokenizer", TOKENIZER,
        "--s1-out", s1, "--family", "omnijev", "--adapter-rank", "4", "--adapter-alpha", "8",
        "--adapter-targets", omni_t, "--head-width", "32", "--ord-width", "16")
    m_ex, m_s1 = (json.load(open(d + "/s1-model.json")) for d in (ex, s1))
    check(sorted(os.listdir(s1)) == sorted(os.listdir(ex)), f"omnijev: the same files "
          f"({sorted(os.listdir(s1))} / {sorted(os.listdir(ex))})")
    for f in ("weights.safetensors", "heads.safetensors", "adapter.safetensors"):
        check(layout(ex, f) == layout(s1, f), f"omnijev: {f} names, dtypes and shapes equal")
    check(sha(ex + "/tokenizer.json") == sha(s1 + "/tokenizer.json"),
          "omnijev: tokenizer.json (with <|opt|> <|/opt|>) byte-identical")
    we, ws = st_read(ex + "/weights.safetensors"), st_read(s1 + "/weights.safetensors")
    emb = "model.language_model.embed_tokens.weight"
    ids = m_s1["omnijev"]["option_token_ids"]
    same = all(np.array_equal(we[k][1], ws[k][1]) for k in we if k != emb)
    rows = np.ones(we[emb][1].shape[0], bool)
    rows[ids] = False
    check(same and np.array_equal(we[emb][1][rows], ws[emb][1][rows]),
          "omnijev: weights byte-identical but the two option rows")
    for k in ("omnijev", "adapter", "head_kinds", "family", "model_id", "config", "vision", "chat",
              "limits", "calibration", "tokenizer", "image_processor"):
        check(m_ex.get(k) == m_s1.get(k), f"omnijev: manifest {k} equal")
    check(list(m_ex) == list(m_s1), f"omnijev: manifest key order {list(m_s1)}")
    # Open-Jev: tiny, merged (no adapter), the e2e package's temperature
    hf, ex, s1 = (os.path.join(tmp, "oj-" + x) for x in ("hf", "ex", "s1"))
    run(MKMODEL, "--shape", "tiny", "--seed", "4242", "--tokenizer", TOKENIZER, "--out", hf)
    shutil.copy(tcfg, hf)
    pkg = os.path.join(tmp, "oj-pkg")
    shutil.copytree(os.path.join(root, "tests", "fixtures", "open_jev", "e2e", "package"), pkg,
                    ignore=shutil.ignore_patterns("adapter"))
    run(EXPORT, "--family", "open_jev", "--package", pkg, "--base", hf, "--out", ex)
    run(MKMODEL, "--shape", "tiny", "--seed", "4242", "--tokenizer", TOKENIZER, "--s1-out", s1,
        "--family", "open_jev", "--tokenizer-config", tcfg)  # the base's, as copied above
    m_ex, m_s1 = (json.load(open(d + "/s1-model.json")) for d in (ex, s1))
    check(sorted(os.listdir(s1)) == sorted(os.listdir(ex)), "open_jev: the same files")
    for f in ("weights.safetensors", "tokenizer.json"):
        check(sha(ex + "/" + f) == sha(s1 + "/" + f), f"open_jev: {f} byte-identical")
    check(layout(ex, "heads.safetensors") == layout(s1, "heads.safetensors"),
          "open_jev: heads.safetensors names, dtypes and shapes equal")
    oj_e, oj_s = dict(m_ex["open_jev"]), dict(m_s1["open_jev"])
    for k in ("model_id", "metadata", "aliases", "max_length"):  # the package's own inputs
        oj_e.pop(k), oj_s.pop(k)
    check(oj_e == oj_s, f"open_jev: manifest open_jev block equal but the package's names")
    check(m_ex["open_jev"]["metadata"].keys() == m_s1["open_jev"]["metadata"].keys(),
          "open_jev: metadata keys equal")
    lim_e, lim_s = dict(m_ex["limits"]), dict(m_s1["limits"])
    lim_e.pop("max_prompt_tokens"), lim_s.pop("max_prompt_tokens")
    for k in ("chat", "config", "vision", "family", "tokenizer"):
        check(m_ex.get(k) == m_s1.get(k), f"open_jev: manifest {k} equal")
    check(lim_e == lim_s and list(m_ex) == list(m_s1), "open_jev: limits and key order equal")
    # JEMM: tiny with vision, rank-16 alpha-32 adapter kept on every language projection
    hf, ad, ex, s1 = (os.path.join(tmp, "jemm-" + x) for x in ("hf", "ad", "ex", "s1"))
    run(MKMODEL, "--shape", "tiny", "--vision", "--seed", "4242", "--tokenizer", TOKENIZER,
        "--out", hf, "--adapter-out", ad, "--adapter-rank", "16", "--adapter-alpha", "32",
        "--adapter-targets", jemm_t)
    shutil.copy(tcfg, hf)
    with open(ad + "/decision_config.json", "w") as f:
        f.write('{"temperature": 1.3480874159655591, "mm_temperature": 1.3954832341582943, '
                '"threshold": 0.9872681877423998}')
    run(EXPORT, "--family", "jemm", "--base", hf, "--adapter", ad, "--lora", "keep", "--out", ex)
    run(MKMODEL, "--shape", "tiny", "--vision", "--seed", "4242", "--tokenizer", TOKENIZER,
        "--s1-out", s1, "--family", "jemm", "--adapter-rank", "16", "--adapter-alpha", "32",
        "--adapter-targets", jemm_t, "--tokenizer-config", tcfg)
    m_ex, m_s1 = (json.load(open(d + "/s1-model.json")) for d in (ex, s1))
    check(sorted(os.listdir(s1)) == sorted(os.listdir(ex) + ["generator"]),
          f"jemm: the same files, plus generator/ ({sorted(os.listdir(s1))})")
    for f in ("weights.safetensors", "tokenizer.json"):
        check(sha(ex + "/" + f) == sha(s1 + "/" + f), f"jemm: {f} byte-identical")
    check(layout(ex, "adapter.safetensors") == layout(s1, "adapter.safetensors"),
          "jemm: adapter.safetensors names, dtypes and shapes equal")
    for k in ("jemm", "chat", "adapter", "config", "vision", "family", "limits", "calibration"):
        check(m_ex.get(k) == m_s1.get(k), f"jemm: manifest {k} equal")
    check(list(m_ex) == list(m_s1), f"jemm: manifest key order {list(m_s1)}")
    for name, d in (("omnijev", "omni-s1"), ("open_jev", "oj-s1"), ("jemm", "jemm-s1")):
        r = run(OPEN_DIR, os.path.join(tmp, d))
        r2 = run(OPEN_DIR, os.path.join(tmp, d.replace("-s1", "-ex")))
        check(r.stdout.startswith("ok " + name) and r.stdout == r2.stdout,
              f"{name}: opens as the export does: {r.stdout.strip()!r} / {r2.stdout.strip()!r}")
    # refusals
    for args, msg in ((("--family", "omnijev"), "needs --vision and a kept adapter"),
                      (("--family", "jemm", "--vision", "--adapter-rank", "16", "--adapter-alpha",
                        "32", "--adapter-targets", "q_proj"), "needs --tokenizer-config"),
                      (("--family", "nope"), "--family must be"),
                      (("--adapter-rank", "4", "--adapter-alpha", "8"), "needs --adapter-rank > 0")):
        r = run(MKMODEL, "--shape", "tiny", "--tokenizer", TOKENIZER, "--s1-out", tmp + "/bad",
                *args, ok=False)
        check(r.returncode == 2 and msg in r.stderr, f"refused {args}: {r.stderr.strip()!r}")


tmp = tempfile.mkdtemp(prefix="s1-io-")
try:
    {"mkmodel": case_mkmodel, "baddir": case_baddir, "lora": case_lora, "refuse": case_refuse,
     "s1out": case_s1out, "cache": case_cache, "s1family": case_s1family}[CASE](tmp)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print(f"{CASE}: {len(failures)} failures")
sys.exit(1 if failures else 0)
