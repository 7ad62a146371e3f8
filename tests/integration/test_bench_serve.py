"""Smoke test of `scripts/bench serve` on the CPU demo models (Open-Jev and JEMM, made by their
recipe/FAMILY/make-demo-model from this build folder) at concurrency 1 and 8, two runs of 1 s
each, quick workloads: it must exit 0 and write its raw file (ready, first, feasibility and
request lines of both families at both concurrencies and both runs, no failure), its summary
table (a row per concurrency per family, a row per workload and concurrency) and its PNG chart.
A --between command (a stand-in for the peer: it copies the workload file it is given) runs once
per family between the two runs at concurrency 1, and finds each workload's token count and body
there. No speed is asserted."""
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
            "--concurrency", "1,8", "--runs", "2", "--duration", "1", "--workloads", "quick",
            "--between", 'cp "$S1_BENCH_WORKLOADS" "%s/copied_$S1_BENCH_FAMILY.json"' % t.tmp]
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
        # the executor's step log, one line per run: it answered every request of the run, ran
        # at most its steps' tokens, and its step time fits in the run's wall time
        for run in [x for x in mine if x.get("kind") == "run"]:
            st = [x for x in mine if x.get("kind") == "steps" and
                  (x["concurrency"], x["run"]) == (run["concurrency"], run["run"])]
            assert len(st) == 1 and st[0]["executor"] == "executor0", (run, st)
            st = st[0]
            assert st["finished"] == run["requests"] and st["steps"] >= 1, (run, st)
            assert st["max_programs"] <= run["concurrency"] and st["tokens"] >= st["max_tokens"] > 0
            assert 0 < st["forward_us"] <= st["total_us"] <= run["wall_s"] * 1e6, st
        assert all(x["status"] == 200 and x["ok"] for x in req), [x for x in req if not x["ok"]][:2]
        assert all(x["latency_s"] > 0 and x["decisions"] >= 1 for x in req)
        ready = [x for x in mine if x.get("kind") == "ready"][0]
        assert ready["process_to_ready_s"] > 0
        btw = [x for x in mine if x.get("kind") == "between"]
        assert len(btw) == 1 and btw[0]["rc"] == 0 and btw[0]["concurrency"] == 1, btw
        # the peer's command ran after run 1 and before run 2 at concurrency 1
        t_b = mine.index(btw[0])
        assert all(x["run"] == 1 for x in mine[:t_b] if x.get("kind") == "request")
        assert all(x["run"] == 2 or x["concurrency"] == 8 for x in mine[t_b:]
                   if x.get("kind") == "request")
        with open(os.path.join(t.tmp, "copied_%s.json" % f)) as fh:
            wl = json.load(fh)
        feas = {x["workload"]: x["tokens"] for x in mine if x.get("kind") == "feasibility"}
        assert {k: v["tokens"] for k, v in wl.items()} == feas and all(feas.values()), (wl, feas)
        assert all(v["questions"] >= 1 and "questions" in v["body"] for v in wl.values()), wl
    summary = open(os.path.join(out, "summary.md")).read()
    for f in models:
        assert "### %s (cpu;" % f in summary, summary
    assert summary.count("executor steps per measured run") == 2, summary
    rows = [x for x in summary.splitlines() if x.startswith("| 1 |") or x.startswith("| 8 |")]
    assert len(rows) >= 4, summary
    for f, names in (("open_jev", ("noul_60w", "mixed_4q")), ("jemm", ("img0_cand2", "img1_cand4"))):
        for c in (1, 8):
            row = [x for x in rows if x.startswith("| %d | %s |" % (c, names[0]))]
            assert len(row) == 1 and "| 0 |" in row[0], (f, c, summary)
            cells = [x.strip() for x in row[0].split("|")[1:-1]]
            assert float(cells[5]) > 0 and float(cells[6]) >= float(cells[5]), row
            assert (cells[7] != "-") == (c == 1), row  # the serial rate only at concurrency 1
    with open(os.path.join(out, "chart.png"), "rb") as fh:
        png = fh.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, len(png)
    print(summary)
    print("bench serve smoke: %d request lines, summary and chart (%d bytes) written" % (
        sum(1 for x in lines if x.get("kind") == "request"), len(png)))


if __name__ == "__main__":
    trio.main(test)
