"""s1-export --family omnijev on a tiny random OmniJev checkpoint, then one request through the
family, the CPU executor and finish (tests/omnijev/test_omnijev_run.c), checked with numpy:

- export: embedding resized to the tokenizer's 248,079 rows with rows 248077/248078 = bf16 of
  new_tok_emb (values that are not bf16-exact), every other kept row unchanged, and new_tok_emb
  kept in float32 in embed_f32_rows.safetensors (manifest embed_f32_rows); a directory whose
  float32 rows are not the table's rounded rows is refused; heads.safetensors = head.pt / ord.pt exactly;
  calibration at full precision; option tokens special with the last two ids; refusals of wrong
  flags, a bias other than noul, a missing head key, a wrong new_tok_emb shape;
- run: the "omnijev" group outputs (μ and the six LM features, fp32 numerics) against numpy
  recomputed from the rows' hidden states (u at <|/opt|>, zq of the first row at <|opt|> − 1) and
  the exported embedding as the LM head (bf16 table, the option rows in float32), over the full
  vocabulary;
- both numerics (s1-forward on a prompt holding both option tokens): the directory exported from
  new_tok_emb and one exported from bf16(new_tok_emb) give different hidden rows in fp32 (the
  float32 rows are used) and bit-identical ones in bf16 (the rows are rounded when loaded).

usage: omnijev_export_e2e.py MKMODEL EXPORT RUNNER QWEN35_TOKENIZER WORKDIR S1_FORWARD
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import struct
import zlib

import numpy as np
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recipe", "open_jev"))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from write_head_pt import write_pt  # noqa: E402  (torch.save format without torch)
import omnijev_heads as oh  # noqa: E402  (numpy heads and features)

H, DH, DO = 64, 32, 16
META = {"norm": "softmax", "lm_feats": True, "ordinal": True, "branch": True,
        "temperatures": {"noul": 1.1991000000000000547, "choice": 1.11990000000000012, "score": 1.1909},
        "temperature": 1.0, "biases": {"noul": 0.05310856608843584}}


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16)).astype(np.uint16)


def raw_bf16(path, name):
    """A BF16 tensor of a safetensors file as uint16 (numpy has no bfloat16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        a, b = hdr[name]["data_offsets"]
        f.seek(8 + n + a)
        return np.frombuffer(f.read(b - a), np.uint16).reshape(hdr[name]["shape"]), hdr[name]["dtype"]


def heads_tensors(rng):
    def lin(d, name, n_out, n_in, s=2.0):
        d[name + ".weight"] = (rng.standard_normal((n_out, n_in)) * s / np.sqrt(n_in)).astype(np.float32)
        d[name + ".bias"] = (rng.standard_normal(n_out) * 0.3).astype(np.float32)
    h, o = {}, {}
    lin(h, "opt.0", DH, H), lin(h, "opt.2", DH, DH), lin(h, "que.0", DH, H), lin(h, "que.2", DH, DH)
    lin(h, "score", 1, DH, 3.0), lin(h, "abstain", 1, DH, 3.0), lin(h, "feat", DH, 6, 0.5)
    lin(h, "feat_lin", 1, 6, 0.5)
    h["log_tau"] = np.array([0.1, -0.2, 0.05], np.float32)
    lin(o, "z.0", DO, H), lin(o, "z.2", 1, DO, 3.0), lin(o, "cut.0", DO, H), lin(o, "cut.2", 1, DO, 3.0)
    return h, o


def write_state(path, d, archive):
    write_pt(path, [(k, list(v.shape), [float(x) for x in v.ravel()]) for k, v in d.items()], archive)


def png(w, h):
    """An RGB gradient PNG (zlib only)."""
    raw = bytearray()
    for y in range(h):
        raw += b"\x00" + b"".join(bytes(((x * 7 + y * 3) % 256, (x * y) % 256, (x + 2 * y) % 256))
                                  for x in range(w))

    def chunk(k, data):
        return struct.pack(">I", len(data)) + k + data + struct.pack(">I", zlib.crc32(k + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


def run(cmd, want_ok=True, want_msg=None):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if want_ok and p.returncode != 0:
        raise SystemExit("FAIL: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    if not want_ok and (p.returncode == 0 or (want_msg and want_msg not in p.stderr)):
        raise SystemExit("FAIL: expected a refusal with %r from %s\n%s" % (want_msg, " ".join(cmd), p.stderr))
    return p


def main():
    mkmodel, export, runner, tok35, work, forward = sys.argv[1:7]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base, ckpt, out = work + "/base", work + "/ckpt", work + "/model"
    run([mkmodel, "--shape", "tiny", "--vision", "--tied", "--seed", "7", "--tokenizer", tok35,
         "--out", base, "--adapter-out", ckpt, "--adapter-rank", "4", "--adapter-alpha", "8",
         "--adapter-targets", "q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj,"
         "gate_proj,up_proj,down_proj"])
    rng = np.random.default_rng(11)
    h, o = heads_tensors(rng)
    emb = (rng.standard_normal((2, H)) * 0.05).astype(np.float32)
    write_state(ckpt + "/head.pt", h, "head")
    write_state(ckpt + "/ord.pt", o, "ord")
    write_state(ckpt + "/new_tok_emb.pt", {"weight": emb}, "new_tok_emb")
    json.dump(META, open(ckpt + "/head_meta.json", "w"))
    # refusals, each on a copy of the checkpoint with one defect
    for name, edit, msg in [
            ("norm", lambda m: m.update(norm="sigmoid"), "norm must be \"softmax\""),
            ("lm_feats", lambda m: m.update(lm_feats=False), "lm_feats must be true"),
            ("bias", lambda m: m.update(biases={"noul": 0.1, "choice": 0.2}), "only noul is allowed")]:
        bad = work + "/bad_" + name
        shutil.copytree(ckpt, bad)
        m = dict(META)
        edit(m)
        json.dump(m, open(bad + "/head_meta.json", "w"))
        run([export, "--family", "omnijev", "--base", base, "--checkpoint", bad, "--out", bad + "_out"], False, msg)
    bad = work + "/bad_key"
    shutil.copytree(ckpt, bad)
    write_state(bad + "/head.pt", {k: v for k, v in h.items() if k != "feat_lin.bias"}, "head")
    run([export, "--family", "omnijev", "--base", base, "--checkpoint", bad, "--out", bad + "_out"], False, "feat_lin.bias")
    bad = work + "/bad_emb"
    shutil.copytree(ckpt, bad)
    write_state(bad + "/new_tok_emb.pt", {"weight": np.zeros((3, H), np.float32)}, "new_tok_emb")
    run([export, "--family", "omnijev", "--base", base, "--checkpoint", bad, "--out", bad + "_out"], False, "[2, hidden]")

    run([export, "--family", "omnijev", "--base", base, "--checkpoint", ckpt, "--out", out])
    man = json.load(open(out + "/s1-model.json"))
    ok = True

    def expect(cond, what):
        nonlocal ok
        if not cond:
            print("FAIL", what)
            ok = False
    oj = man["omnijev"]
    expect(man["family"] == "omnijev" and man["head_kinds"] == ["omnijev"], "family / head kinds")
    expect(man["config"]["text_config"]["vocab_size"] == 248079 and oj["vocab_size"] == 248079, "vocab 248079")
    expect(oj["option_token_ids"] == [248077, 248078], "option ids %s" % oj["option_token_ids"])
    expect(oj["temperatures"] == META["temperatures"] and oj["biases"] == META["biases"], "calibration precision")
    expect(oj["lora"] == {"rank": 4, "alpha": 8.0, "mode": "keep"}, "lora %s" % oj["lora"])
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(out + "/tokenizer.json")
    expect(tk.token_to_id("<|opt|>") == 248077 and tk.token_to_id("<|/opt|>") == 248078 and
           tk.get_vocab_size(with_added_tokens=True) == 248079, "tokenizer option tokens")
    expect(tk.encode("a<|opt|>b<|/opt|>", add_special_tokens=False).ids[1] == 248077, "option token splits")
    new, dt = raw_bf16(out + "/weights.safetensors", "model.language_model.embed_tokens.weight")
    old, _ = raw_bf16(base + "/model.safetensors", "model.language_model.embed_tokens.weight")
    expect(dt == "BF16" and new.shape == (248079, H), "embedding shape %s" % (new.shape,))
    expect(np.array_equal(new[:248077], old[:248077]), "kept embedding rows")
    expect(np.array_equal(new[248077:], f32_to_bf16(emb)), "option rows = bf16(new_tok_emb)")
    expect(not np.array_equal(bf16_to_f32(f32_to_bf16(emb)), emb), "new_tok_emb is not bf16-exact")
    expect(man.get("numerics") == "fp32", "default numerics %r" % man.get("numerics"))
    expect(man.get("embed_f32_rows") == {"file": "embed_f32_rows.safetensors",
                                         "tensor": "embed_tokens.f32_rows", "ids": [248077, 248078]},
           "manifest embed_f32_rows %s" % man.get("embed_f32_rows"))
    rows = load_file(out + "/embed_f32_rows.safetensors")
    expect(list(rows) == ["embed_tokens.f32_rows"] and rows["embed_tokens.f32_rows"].dtype == np.float32 and
           np.array_equal(rows["embed_tokens.f32_rows"], emb), "embed_f32_rows = new_tok_emb in float32")
    hs = load_file(out + "/heads.safetensors")
    expect(len(hs) == 25 and all(np.array_equal(hs["head." + k], v) for k, v in h.items()) and
           all(np.array_equal(hs["ord." + k], v) for k, v in o.items()), "heads.safetensors")
    # one request through family, executor and finish
    url = "data:image/png;base64," + base64.b64encode(png(96, 64)).decode()
    req = {"model": "omnijev", "state": {"images": [url]}, "questions": {
        "v": {"type": "noul", "instructions": "A person is visible."},
        "r": {"type": "noul", "instructions": "This part is a button.", "region": {"box": [10, 20, 300, 400.5]}},
        "c": {"type": "choice", "instructions": "Which operation comes next?",
              "options": [{"text": "click"}, {"text": ""}, {"text": "type some text"}, {"abstain": True}]},
        "s": {"type": "score", "instructions": "How risky is it?", "levels": ["low", "mid", "high"]},
        "e": {"type": "choice", "instructions": "Nothing.", "options": [{"abstain": True}]}}}
    json.dump(req, open(work + "/request.json", "w"))
    p = run([runner, out, work + "/request.json", work])
    print(p.stdout.strip())
    res = json.load(open(work + "/response.json"))
    expect(list(res["answers"]) == ["v", "r", "c", "s", "e"], "answer order")
    expect(res["answers"]["e"]["choice"] is None and res["answers"]["e"]["abstain"] == 1.0, "empty choice")
    expect(set(res["answers"]["c"]["probabilities"]) == {"click", "option_1", "type some text"}, "choice keys")
    run_out = load_file(work + "/run.safetensors")
    w_lm = bf16_to_f32(new).astype(np.float32)
    w_lm[248077:] = emb  # fp32 numerics: the tied LM head's option rows are the float32 ones
    t = {("head." + k): v for k, v in h.items()} | {("ord." + k): v for k, v in o.items()}
    n_q = sum(1 for k in run_out if k.endswith(".out"))
    for q in range(n_q):
        typ, k, row0 = [int(x) for x in run_out["q%d.meta" % q]]
        mu = run_out["q%d.out" % q][:k]
        us, sums, ns, firsts = [], [], [], []
        zq = None
        for r in range(row0, row0 + k):
            hid, ids = run_out["row%d.hidden" % r], run_out["row%d.ids" % r].astype(np.int64)
            o_pos = int(np.where(ids == 248077)[0][0])
            us.append(hid[-1])
            if r == row0:
                zq = hid[0]
            n_in = len(ids) - o_pos - 2
            ns.append(n_in)
            if n_in:
                targets = np.concatenate([[ids[o_pos + 1]], ids[o_pos + 1:len(ids) - 1]])
                lp = oh.target_logprobs(w_lm, hid[:n_in + 1], targets)
                firsts.append(lp[0])
                sums.append(np.float32(lp[1:].astype(np.float32).sum(dtype=np.float32)))
            else:
                firsts.append(0.0)
                sums.append(0.0)
        u = np.stack(us)
        if typ == 2:
            want = oh.ordinal(t, u, zq)
        else:
            feats = oh.option_feats(np.array(sums), np.array(ns), np.array(firsts))
            got_f = run_out["q%d.out" % q][k:].reshape(k, 6)
            expect(oh.close("q%d features" % q, got_f, feats, 1e-5), "q%d features" % q)
            want = oh.option_scorer(t, u, zq, feats.astype(np.float32), typ)
        expect(oh.close("q%d mu" % q, mu, want, 1e-5), "q%d mu" % q)
    ok = both_numerics(export, forward, base, ckpt, out, emb, work, expect) and ok
    print("%s: export checks, %d questions through the executor against numpy, both numerics"
          % ("ok" if ok else "FAIL", n_q))
    return 0 if ok else 1


def both_numerics(export, forward, base, ckpt, out, emb, work, expect):
    """fp32 uses the float32 option rows, bf16 rounds them at load; a directory whose float32 rows
    are not the table's rounded rows is refused."""
    ckb, outb = work + "/ckpt_bf16rows", work + "/model_bf16rows"
    shutil.copytree(ckpt, ckb)
    write_state(ckb + "/new_tok_emb.pt", {"weight": bf16_to_f32(f32_to_bf16(emb))}, "new_tok_emb")
    run([export, "--family", "omnijev", "--base", base, "--checkpoint", ckb, "--out", outb])
    with open(work + "/fwd_in.json", "w") as f:
        json.dump({"tokens": [248045, 872, 248077, 1131, 248078, 198], "readout": [2, 3, 4, 5]}, f)
    hid = {}
    for d in (out, outb):
        for nm in ("fp32", "bf16"):
            o = work + "/fwd_%s_%s.json" % (os.path.basename(d), nm)
            run([forward, "--model", d, "--input", work + "/fwd_in.json", "--output", o, "--numerics", nm])
            hid[d, nm] = np.array(json.load(open(o))["hidden"], np.float64)
    d32 = np.abs(hid[out, "fp32"] - hid[outb, "fp32"]).max()
    d16 = np.abs(hid[out, "bf16"] - hid[outb, "bf16"]).max()
    expect(d32 > 1e-5, "fp32: float32 and bf16-rounded option rows give the same hidden rows (%.3g)" % d32)
    expect(d16 == 0.0, "bf16: the option rows are not rounded at load (hidden rows differ by %.3g)" % d16)
    print("option rows: fp32 hidden rows move by %.3g between float32 and rounded rows; bf16 identical" % d32)
    # tampered: float32 rows that are not the table's rounding -> refused at open
    bad = work + "/model_badrows"
    shutil.copytree(out, bad)
    from safetensors.numpy import save_file
    save_file({"embed_tokens.f32_rows": emb * 2}, bad + "/embed_f32_rows.safetensors")
    import hashlib
    man = json.load(open(bad + "/s1-model.json"))
    data = open(bad + "/embed_f32_rows.safetensors", "rb").read()
    man["files"]["embed_f32_rows.safetensors"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    json.dump(man, open(bad + "/s1-model.json", "w"))
    run([forward, "--model", bad, "--input", work + "/fwd_in.json", "--output", work + "/x.json"], False,
        "is not the bf16 rounding of embed_f32_rows")
    # F32 linear_attn.A_log / dt_bias (spec §2.2): kept in fp32, rounded at load in bf16
    src = base + "/model.safetensors"
    with open(src, "rb") as f:
        keys = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    rng = np.random.default_rng(5)
    noisy = {}
    for k in keys:
        if k.endswith(".A_log") or k.endswith(".dt_bias"):
            v = bf16_to_f32(raw_bf16(src, k)[0]).astype(np.float32)
            noisy[k] = (v * (1 + rng.uniform(1e-3, 4e-3, v.shape))).astype(np.float32)
    expect(len(noisy) >= 2, "no A_log / dt_bias in the base")
    for tag, vals in (("wide", noisy), ("wide_rounded", {k: bf16_to_f32(f32_to_bf16(v)).astype(np.float32)
                                                        for k, v in noisy.items()})):
        b2 = work + "/base_" + tag
        shutil.copytree(base, b2)
        write_mixed(b2 + "/model.safetensors", src, vals)
        run([export, "--family", "omnijev", "--base", b2, "--checkpoint", ckpt, "--out", work + "/model_" + tag])
    for nm in ("fp32", "bf16"):
        for tag in ("wide", "wide_rounded"):
            o = work + "/fwd_%s_%s.json" % (tag, nm)
            run([forward, "--model", work + "/model_" + tag, "--input", work + "/fwd_in.json", "--output", o, "--numerics", nm])
            hid[tag, nm] = np.array(json.load(open(o))["hidden"], np.float64)
    w32 = np.abs(hid["wide", "fp32"] - hid["wide_rounded", "fp32"]).max()
    w16 = np.abs(hid["wide", "bf16"] - hid["wide_rounded", "bf16"]).max()
    expect(w32 > 1e-6, "fp32: F32 A_log/dt_bias and their bf16 roundings give the same hidden rows (%.3g)" % w32)
    expect(w16 == 0.0, "bf16: F32 A_log/dt_bias not rounded at load (hidden rows differ by %.3g)" % w16)
    print("F32 A_log/dt_bias: fp32 hidden rows move by %.3g between them and their rounding; bf16 identical" % w32)
    return True


def write_mixed(path, src, tensors):
    """safetensors at path: src's tensors as stored, those in `tensors` replaced by F32 values."""
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out_hdr, blobs, off = {}, [], 0
    for k in sorted(k for k in hdr if k != "__metadata__"):
        if k not in tensors:
            a, b = hdr[k]["data_offsets"]
            blob, dt, shape = data[a:b], hdr[k]["dtype"], hdr[k]["shape"]
        else:
            blob, dt, shape = tensors[k].astype("<f4").tobytes(), "F32", list(tensors[k].shape)
        out_hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(out_hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    sys.exit(main())
