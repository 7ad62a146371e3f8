#!/usr/bin/env python3
"""Writes a random Open-Jev head state dict {weight: float32 [1, H], bias: float32 [1]} in the
torch.save zip format without torch (standard library only), for demo packages on machines
without PyTorch. The layout is the one torch.save writes: <name>/data.pkl (pickle protocol 2:
an OrderedDict of torch._utils._rebuild_tensor_v2 calls whose storages are persistent ids
('storage', torch.FloatStorage, key, 'cpu', numel)), <name>/data/<key> raw little-endian
storages, <name>/byteorder and <name>/version, all stored uncompressed.

usage: write_head_pt.py --hidden H --seed N [--std S] [--bias B] OUT.pt
"""
import argparse
import random
import struct
import zipfile


def _str(s):
    b = s.encode("utf-8")
    return b"X" + struct.pack("<I", len(b)) + b


def _int(i):
    return b"J" + struct.pack("<i", i)


def _tuple(items):
    return b"(" + b"".join(items) + b"t"


def state_dict_pickle(tensors):
    """tensors: [(name, shape, storage key, numel)] -> data.pkl bytes."""
    out = bytearray(b"\x80\x02" + b"ccollections\nOrderedDict\n" + b")R" + b"(")
    for name, shape, key, numel in tensors:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
        pid = _tuple([_str("storage"), b"ctorch\nFloatStorage\n", _str(key), _str("cpu"),
                      _int(numel)]) + b"Q"
        args = _tuple([pid, _int(0), _tuple([_int(d) for d in shape]),
                       _tuple([_int(s) for s in stride]), b"\x89",
                       b"ccollections\nOrderedDict\n)R"])
        out += _str(name) + b"ctorch._utils\n_rebuild_tensor_v2\n" + args + b"R"
    out += b"u."
    return bytes(out)


def tensor_pickle(shape, numel):
    """data.pkl bytes of torch.save(tensor): one float32 tensor at the top, storage key "0"."""
    stride, acc = [], 1
    for d in reversed(shape):
        stride.insert(0, acc)
        acc *= d
    pid = _tuple([_str("storage"), b"ctorch\nFloatStorage\n", _str("0"), _str("cpu"),
                  _int(numel)]) + b"Q"
    args = _tuple([pid, _int(0), _tuple([_int(d) for d in shape]),
                   _tuple([_int(s) for s in stride]), b"\x89", b"ccollections\nOrderedDict\n)R"])
    return b"\x80\x02" + b"ctorch._utils\n_rebuild_tensor_v2\n" + args + b"R."


def write_tensor_pt(path, shape, values, archive="tensor"):
    """A bare tensor as torch.save(tensor) writes it (OmniJev's new_tok_emb.pt form)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{archive}/data.pkl", tensor_pickle(shape, len(values)))
        z.writestr(f"{archive}/byteorder", b"little")
        z.writestr(f"{archive}/data/0", struct.pack(f"<{len(values)}f", *values))
        z.writestr(f"{archive}/version", b"3\n")


def write_pt(path, tensors, archive="head"):
    """tensors: [(name, shape, [float values])]."""
    meta, data = [], []
    for i, (name, shape, values) in enumerate(tensors):
        meta.append((name, shape, str(i), len(values)))
        data.append(struct.pack(f"<{len(values)}f", *values))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{archive}/data.pkl", state_dict_pickle(meta))
        z.writestr(f"{archive}/byteorder", b"little")
        for i, blob in enumerate(data):
            z.writestr(f"{archive}/data/{i}", blob)
        z.writestr(f"{archive}/version", b"3\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--std", type=float, default=0.5)
    ap.add_argument("--bias", type=float, default=0.1)
    ap.add_argument("out")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    weight = [struct.unpack("<f", struct.pack("<f", rng.gauss(0.0, a.std)))[0]
              for _ in range(a.hidden)]
    write_pt(a.out, [("weight", [1, a.hidden], weight), ("bias", [1], [a.bias])])


if __name__ == "__main__":
    main()
