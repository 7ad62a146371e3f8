"""Smoke test of `scripts/bench serve` on the CPU demo models (Open-Jev and JEMM, made by their
recipe/FAMILY/make-demo-model from this build folder) at concurrency 1 and 8, two runs of 1 s
each, quick workloads: it must exit 0 and write its raw file (ready, first, feasibility and
request lines of both families at both concurrencies and both runs, no failure), its summary
table (a row per concurrency per family) and its PNG chart. No speed is asserted."""
import json
import os
import subprocess
import sys

import trio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def test(t):
    models = {"open_jev": t.make_demo_model("open_jev"), "jemm": t.make_demo_model("jemm")}
    out = os.path.join(t.tmp, "bench")
    argv = [os.path.join(ROOT, "scripts", "bench"), "serve", "--bin", t.build, "--out", out,
            "--concurrency", "1,8", "--runs", "2", "--duration", "1", "--workloads", "quick"]
    for f, d in models.items():
        argv += ["--model", "%s=%s" % (f, d)]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    log = r.stdout.decode(errors="replace")
    assert r.returncode == 0, log
    lines = [json.loads(x) for x in open(os.path.join(out, "raw.jsonl"))]
    for f in models:
        mine = [x for x in lines if x["family"] == f]
        kinds = {x.get("kind") for x in mine}
        assert {"ready", "first", "feasibility", "request", "run", "memory"} <= kinds, (f, kinds)
        req = [x for x in mine if x.get("kind") == "request"]
        assert {(x["concurrency"], x["run"]) for x in req} == {(1, 1), (1, 2), (8, 1), (8, 2)}, f
        assert all(x["status"] == 200 and x["ok"] for x in req), [x for x in req if not x["ok"]][:2]
        assert all(x["latency_s"] > 0 and x["decisions"] >= 1 for x in req)
        ready = [x for x in mine if x.get("kind") == "ready"][0]
        assert ready["process_to_ready_s"] > 0
    summary = open(os.path.join(out, "summary.md")).read()
    for f in models:
        assert "### %s (cpu;" % f in summary, summary
    rows = [x for x in summary.splitlines() if x.startswith("| 1 |") or x.startswith("| 8 |")]
    assert len(rows) >= 4, summary
    with open(os.path.join(out, "chart.png"), "rb") as fh:
        png = fh.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, len(png)
    print(summary)
    print("bench serve smoke: %d request lines, summary and chart (%d bytes) written" % (
        sum(1 for x in lines if x.get("kind") == "request"), len(png)))


if __name__ == "__main__":
    trio.main(test)
