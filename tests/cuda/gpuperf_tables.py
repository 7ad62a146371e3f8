#!/usr/bin/env python3
"""Prints the tables of notes/2026-12-02-omnijev-gpu.md from the committed run folders, so every
number in the note is read from raw files: the OmniJev-4B latency before (2026-12-01, part1) and
after this branch: run1 (2026-12-02, split-K-free LoRA) and run2 (the pinned split-K LoRA of
16795bd/18fd177), and Open-Jev-9B (run1; run2 with its peer). Stdlib only; the table layout is
issue18_tables.py's.

usage: gpuperf_tables.py BEFORE_RUN_DIR AFTER_RUN_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from issue18_tables import latency, load_jsonl  # noqa: E402


def omni_peer(path):
    pj = load_jsonl(path)

    def variant(v):
        def get(name):
            x = [r["ms_median"] for r in pj if r.get("kind") == "timing" and
                 r.get("variant") == v and r.get("workload") == name]
            return x or None
        return get
    return variant


def main():
    before, after = sys.argv[1:3]
    b = omni_peer(os.path.join(before, "part1", "omnijev-peer-timing.jsonl"))
    latency(before, "part1", "omnijev4b", [("peer base (ms)", b("base")),
                                           ("peer + LoRA r32 unmerged", b("lora_unmerged"))],
            "Before (2026-12-01 part1): OmniJev-4B at concurrency 1")
    a = omni_peer(os.path.join(after, "run1", "omnijev-peer-timing.jsonl"))
    latency(after, "run1", "omnijev4b", [("peer base (ms, same run)", a("base"))],
            "After (2026-12-02 run1): OmniJev-4B at concurrency 1, kept LoRA through cuBLASLt "
            "without split-K, readouts batched")
    a2 = omni_peer(os.path.join(after, "run2", "omnijev-peer-timing.jsonl"))
    latency(after, "run2", "omnijev4b", [("peer base (ms, same run)", a2("base")),
                                         ("peer + LoRA r32 unmerged", a2("lora_unmerged"))],
            "After (2026-12-02 run2): OmniJev-4B at concurrency 1, kept LoRA through cuBLASLt "
            "with the pinned split-K configuration, readouts batched")

    def ojp(run):
        oj = load_jsonl(os.path.join(after, run, "open_jev_peer.jsonl"))

        def get(name):
            v = [r["median_ms"] for r in oj if r.get("kind") == "timing" and r["workload"] == name]
            return v or None
        return get
    latency(after, "run1", "open_jev9b", [("peer (ms)", ojp("run1"))],
            "Open-Jev-9B at concurrency 1 (run1; its peer failed to start)")
    latency(after, "run2", "open_jev9b", [("peer (ms, rounds)", ojp("run2"))],
            "Open-Jev-9B at concurrency 1 (run2, with its peer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
