"""The preprocess stage as the service reports it: starts the trio (tests/cuda/serve_latency.py's
Trio; CPU executor unless --device) on a model directory, sends the u1 and u12 bodies of the serving
benchmark (one seeded 1600x900 PNG) one at a time, and writes per workload the Server-Timing
`preprocess` durations (ms) and the answers with their latency fields removed, so two builds can be
compared for speed and for identical answers. Not a test. Stdlib only.
usage: serve_preprocess.py BIN_DIR MODEL_DIR OUT.json [--reps N] [--device D]"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda"))
import serve_latency as sl  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("model")
ap.add_argument("out")
ap.add_argument("--reps", type=int, default=10)
ap.add_argument("--device", default="cpu")
a = ap.parse_args()
W = sl.workloads("omnijev", sl.data_url(sl.png_1600x900()))
bodies = {k: json.dumps(W[k][0]) for k in ("u1", "u12")}
t = sl.Trio(a.bin, a.model, a.device, max(len(b) for b in bodies.values()) + (1 << 20))
res = {"bin": os.path.realpath(os.path.join(a.bin, "s1-preprocessor")), "reps": a.reps,
       "workloads": {}}


def strip(ans):
    for q in ans.get("answers", {}).values():
        for k in [k for k in q if k.startswith("latency")]:
            del q[k]
    ans.pop("latency_s", None)
    return ans


try:
    t.up(300)
    for name, body in bodies.items():
        pre, answers = [], []
        for i in range(a.reps + 1):  # the first one warms up and is not counted
            s, h, b = t.http("POST", "/v1/systemone", body)
            if s != 200:
                raise RuntimeError("%s: HTTP %d %s" % (name, s, b[:300]))
            m = re.search(r"preprocess;dur=([0-9.]+)", h.get("server-timing", ""))
            if i:
                pre.append(float(m.group(1)))
            answers.append(strip(json.loads(b)))
        same = all(json.dumps(x, sort_keys=True) == json.dumps(answers[0], sort_keys=True)
                   for x in answers)
        res["workloads"][name] = {"preprocess_ms": pre, "median_ms": statistics.median(pre),
                                  "min_ms": min(pre), "max_ms": max(pre),
                                  "answers_repeat_identically": same, "answer": answers[0]}
        print("%s: preprocess median %.2f ms (min %.2f, max %.2f) over %d" %
              (name, statistics.median(pre), min(pre), max(pre), len(pre)), flush=True)
finally:
    t.stop()
with open(a.out, "w") as f:
    json.dump(res, f, indent=1, sort_keys=True)
