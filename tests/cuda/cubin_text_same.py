#!/usr/bin/env python3
"""Compares the machine code of two sm_90 cubins (nvcc -cubin) kernel by kernel: every `.text.*`
section (one per kernel, named by its mangled symbol) of the first is looked up in the others and
compared byte for byte. Used to show that moving code between files left the kernels unchanged
(notes/2026-12-02-gdn-split.md). Prints one line per kernel (SAME / DIFF / MISSING) and exits 1
unless every kernel of OLD is found, SAME, in one of NEW...

Usage: cubin_text_same.py OLD.cubin NEW.cubin [NEW2.cubin ...]
"""
import struct
import sys


def text_sections(path):
    b = open(path, "rb").read()
    if b[:4] != b"\x7fELF" or b[4] != 2:
        sys.exit(f"{path}: not an ELF64 file")
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    sh = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = sh[shstrndx][4]

    def name(off):
        end = b.index(b"\0", names + off)
        return b[names + off:end].decode()

    return {name(s[0]): b[s[4]:s[4] + s[5]] for s in sh if name(s[0]).startswith(".text.")}


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    old = text_sections(argv[1])
    new = [(p, text_sections(p)) for p in argv[2:]]
    bad = 0
    for k in sorted(old):
        where = [(p, d[k]) for p, d in new if k in d]
        if not where:
            print(f"MISSING {k}")
            bad += 1
            continue
        for p, code in where:
            same = code == old[k]
            bad += not same
            print(f"{'SAME' if same else 'DIFF'} {len(code):6d} B {p}: {k}")
    print(f"{len(old)} kernels, {bad} not the same")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
