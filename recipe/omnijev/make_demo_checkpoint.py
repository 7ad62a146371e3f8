#!/usr/bin/env python3
"""Completes a random OmniJev checkpoint directory next to a PEFT adapter from s1-mkmodel: head.pt
and ord.pt (the 17 OptionScorer and 8 OrdinalScoreHead tensors of spec/omnijev.md §8.3 / §8.5, at
the given widths), new_tok_emb.pt (a bare float32 [2, hidden] tensor, the release form of §11.3)
and head_meta.json with the 4B release's published calibration. Standard library only (torch.save format via
recipe/open_jev/write_head_pt.py).

usage: make_demo_checkpoint.py --hidden H [--width 1024] [--ord-width 512] [--seed N] CKPT_DIR
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "open_jev"))
from write_head_pt import write_pt, write_tensor_pt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--ord-width", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("ckpt")
    a = ap.parse_args()
    rng = random.Random(a.seed)

    def lin(out, name, n_out, n_in, gain=2.0):
        sd = gain / n_in ** 0.5
        out.append((name + ".weight", [n_out, n_in], [rng.gauss(0, sd) for _ in range(n_out * n_in)]))
        out.append((name + ".bias", [n_out], [rng.gauss(0, 0.3) for _ in range(n_out)]))
    h, d, o = a.hidden, a.width, a.ord_width
    head, ord_ = [], []
    lin(head, "opt.0", d, h), lin(head, "opt.2", d, d), lin(head, "que.0", d, h), lin(head, "que.2", d, d)
    lin(head, "score", 1, d, 0.5), lin(head, "abstain", 1, d, 0.5), lin(head, "feat", d, 6, 0.02)
    lin(head, "feat_lin", 1, 6, 0.02)
    head.append(("log_tau", [3], [0.0, 0.0, 0.0]))
    lin(ord_, "z.0", o, h), lin(ord_, "z.2", 1, o, 3.0), lin(ord_, "cut.0", o, h), lin(ord_, "cut.2", 1, o, 3.0)
    write_pt(os.path.join(a.ckpt, "head.pt"), head, "head")
    write_pt(os.path.join(a.ckpt, "ord.pt"), ord_, "ord")
    write_tensor_pt(os.path.join(a.ckpt, "new_tok_emb.pt"), [2, h],
                    [rng.gauss(0, 0.05) for _ in range(2 * h)], "new_tok_emb")
    meta = {"norm": "softmax", "lm_feats": True, "ordinal": True, "branch": True,
            "temperatures": {"noul": 1.1991, "choice": 1.1199, "score": 1.1909},
            "biases": {"noul": 0.05310856608843584}}
    with open(os.path.join(a.ckpt, "head_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
