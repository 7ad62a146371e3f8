"""Writes the OmniJev request bodies of the serving benchmark (tests/cuda/serve_latency.py, the
u1/u12 workloads of spec/benchmark.md: one seeded 1600x900 PNG as a base64 data URL) for
tests/omnijev/bench_preprocess. Stdlib only. usage: bench_preprocess_body.py OUT_DIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda"))
import serve_latency as sl  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
png = sl.png_1600x900()
with open(os.path.join(out, "image_1600x900.png"), "wb") as f:
    f.write(png)
W = sl.workloads("omnijev", sl.data_url(png))
for name in ("u1", "u12"):
    with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(W[name][0], f)
