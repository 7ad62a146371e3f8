"""OmniJev heads and LM features: a numpy (float64) re-implementation of spec/omnijev.md §7-§8,
written from the spec, against the executor's fp32 C code (tests/omnijev/test_omnijev_heads.c).

  omnijev_heads.py gen DIR     random heads (head.*, ord.*) and inputs -> DIR/heads.safetensors,
                               DIR/cases.safetensors (seeded, small widths)
  omnijev_heads.py check DIR   recompute everything and compare with DIR/out.safetensors
"""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

H, DH, DO, V = 48, 40, 24, 20000  # d_model, OptionScorer width, ordinal width, vocabulary
CASES = [("noul", 0, 1), ("noul_b", 0, 1), ("choice", 1, 3), ("choice_one", 1, 1),
         ("choice_many", 1, 17), ("score", 2, 4), ("score_one", 2, 1), ("score_two", 2, 2)]
FEAT_GROUPS = [("texted", [5, 1, 3]), ("with_empty", [4, 0, 2, 0]), ("single", [3]),
               ("single_empty", [0]), ("all_empty", [0, 0])]


def gen(d):
    rng = np.random.default_rng(20261129)

    def lin(name, n_out, n_in, scale):
        t[name + ".weight"] = (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)
        t[name + ".bias"] = (rng.standard_normal(n_out) * 0.3).astype(np.float32)
    t = {}
    lin("head.opt.0", DH, H, 2.0)
    lin("head.opt.2", DH, DH, 2.0)
    lin("head.que.0", DH, H, 2.0)
    lin("head.que.2", DH, DH, 2.0)
    lin("head.score", 1, DH, 3.0)
    lin("head.abstain", 1, DH, 3.0)
    lin("head.feat", DH, 6, 1.0)
    lin("head.feat_lin", 1, 6, 1.0)
    t["head.log_tau"] = np.array([0.2, -0.3, 0.1], np.float32)
    lin("ord.z.0", DO, H, 2.0)
    lin("ord.z.2", 1, DO, 3.0)
    lin("ord.cut.0", DO, H, 2.0)
    lin("ord.cut.2", 1, DO, 3.0)
    save_file(t, d + "/heads.safetensors")
    c = {}
    for name, typ, k in CASES:
        c[name + ".u"] = rng.standard_normal((k, H)).astype(np.float32)
        c[name + ".zq"] = rng.standard_normal(H).astype(np.float32)
        f = np.zeros((k, 6), np.float32) if name == "noul" else rng.standard_normal((k, 6)).astype(np.float32)
        c[name + ".feats"] = f
        c[name + ".meta"] = np.array([typ, k], np.float32)  # integers as exact F32
    # LM head and hidden rows for the chunked log-probs (V spans two full chunks and a partial one)
    c["lm.head"] = (rng.standard_normal((V, H)) * 0.5).astype(np.float32)
    c["lm.hidden"] = rng.standard_normal((70, H)).astype(np.float32)
    c["lm.targets"] = rng.integers(0, V, 70).astype(np.float32)
    c["lm.targets"][:3] = [0, V - 1, 8192]
    for name, ns in FEAT_GROUPS:
        c["feat." + name + ".n"] = np.array(ns, np.float32)
        c["feat." + name + ".sum"] = np.where(np.array(ns) > 0, rng.uniform(-30, -1, len(ns)), 0).astype(np.float32)
        c["feat." + name + ".first"] = np.where(np.array(ns) > 0, rng.uniform(-12, -0.1, len(ns)), 0).astype(np.float32)
    save_file(c, d + "/cases.safetensors")


def gelu(x):
    from math import erf, sqrt
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / sqrt(2.0)))


def linear(t, name, x):
    return x @ t[name + ".weight"].astype(np.float64).T + t[name + ".bias"].astype(np.float64)


def mlp(t, name, x):
    return linear(t, name + ".2", gelu(linear(t, name + ".0", x)))


def option_scorer(t, u, zq, f, typ):
    u, zq, f = u.astype(np.float64), zq.astype(np.float64), f.astype(np.float64)
    g = np.tanh(mlp(t, "head.que", zq))
    h = mlp(t, "head.opt", u) * g[None, :] + linear(t, "head.feat", f)
    s = linear(t, "head.score", h)[:, 0] + linear(t, "head.feat_lin", f)[:, 0]
    tau = np.exp(float(t["head.log_tau"][typ]))
    s = s / tau
    if typ == 0:
        return 1.0 / (1.0 + np.exp(-s))
    a = linear(t, "head.abstain", g)[0] / tau
    z = np.concatenate([s, [a]])
    e = np.exp(z - z.max())
    return (e / e.sum())[:-1]


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def ordinal(t, u, zq):
    u, zq = u.astype(np.float64), zq.astype(np.float64)
    z = mlp(t, "ord.z", zq)[0]
    r = mlp(t, "ord.cut", u)[:, 0]
    k = len(r)
    theta = np.concatenate([[r[0]], r[0] + np.cumsum(softplus(r[1:]))])
    c = np.array([1.0 / (1.0 + np.exp(-(theta[l] - z))) if l < k - 1 else 1.0 for l in range(k)])
    p = np.concatenate([[c[0]], c[1:] - c[:-1]])
    return np.maximum(p, 1e-8)


def bf16(x):
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)


def target_logprobs(w, hidden, targets, round_bf16=False):
    """fp32: the float32 logits as they are; bf16: each rounded to bf16 first (spec §7)."""
    logits = (hidden.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)
    logits = (bf16(logits) if round_bf16 else logits).astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    return logits[np.arange(len(targets)), targets] - lse


def option_feats(s, n, first):
    s, n, first = s.astype(np.float64), n.astype(np.float64), first.astype(np.float64)
    valid = n > 0
    m = np.where(valid, s, -1e4)
    dist = m - (m.max() + np.log(np.exp(m - m.max()).sum()))
    return np.stack([np.where(valid, s, 0) / 10, np.where(valid, s / np.maximum(n, 1), 0), n / 10,
                     dist, np.where(valid, first, 0), valid.astype(np.float64)], axis=1)


def close(name, got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        print("FAIL %s: shape %s, want %s" % (name, got.shape, want.shape))
        return False
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    if not np.all(err <= tol):
        i = int(np.argmax(err))
        print("FAIL %s: max error %.3g at %d (got %.9g, want %.9g)" % (name, err.max(), i, got.flat[i], want.flat[i]))
        return False
    return True


def check(d):
    t, c, o = load_file(d + "/heads.safetensors"), load_file(d + "/cases.safetensors"), load_file(d + "/out.safetensors")
    ok, n = True, 0
    for name, typ, k in CASES:
        u, zq, f = c[name + ".u"], c[name + ".zq"], c[name + ".feats"]
        want = ordinal(t, u, zq) if typ == 2 else option_scorer(t, u, zq, f, typ)
        ok &= close(name, o[name + ".mu"], want, 1e-5)
        n += 1
    tg = c["lm.targets"].astype(np.int64)
    ok &= close("lm.logprobs", o["lm.lp"], target_logprobs(c["lm.head"], c["lm.hidden"], tg), 1e-5)
    ok &= close("lm.logprobs_bf16", o["lm.lp_bf16"], target_logprobs(c["lm.head"], c["lm.hidden"], tg, True), 1e-5)
    # the two modes must differ here (the test could not tell them apart otherwise)
    d = np.abs(o["lm.lp"].astype(np.float64) - o["lm.lp_bf16"]).max()
    if not d > 1e-4:
        print("FAIL lm.logprobs: fp32 and bf16 differ by only %.3g" % d)
        ok = False
    for name, _ in FEAT_GROUPS:
        p = "feat." + name
        ok &= close(p, o[p + ".out"], option_feats(c[p + ".sum"], c[p + ".n"], c[p + ".first"]), 1e-6)
    # spec §15 C.8: a single-option group has dist 0; an empty text among texted options about -1e4
    ok &= bool(o["feat.single.out"][0, 3] == 0.0)
    ok &= bool(-10100 < o["feat.with_empty.out"][1, 3] < -9990)
    print("%s: %d head cases, log-probs over %d positions, %d feature groups" % (
        "ok" if ok else "FAIL", n, len(c["lm.targets"]), len(FEAT_GROUPS)))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
        sys.exit(0)
    sys.exit(check(sys.argv[2]))
