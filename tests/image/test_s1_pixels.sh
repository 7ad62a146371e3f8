#!/usr/bin/env bash
# Integration test of s1-pixels: a PNG file, a WebP as a data-URL file and a truncated JPEG in one
# call; the outputs must match the oracle's SHA-256 (tests/fixtures/image/expected.json), and the
# bad input must give its error line and a non-zero exit.
# Usage: test_s1_pixels.sh S1_PIXELS FIXTURE_DIR WORK_DIR
set -euo pipefail
bin=$1 fix=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
src=$fix/sources
{ printf 'data:image/webp;base64,'; base64 -w 76 "$src/lossy_300x200.webp"; } > "$work/webp.url"
head -c 6000 "$src/baseline_333x217.jpg" > "$work/cut.jpg"
set +e
"$bin" --max-pixels 602112 "$src/rgb_333x217.png" "$work/webp.url" "$work/cut.jpg" \
  --out "$work/out" --rgb > "$work/stdout.txt"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "exit status $rc, want 1"; exit 1; }
grep -qx "image 2 could not be decoded ($work/cut.jpg)" "$work/stdout.txt" ||
  { echo "missing error line:"; cat "$work/stdout.txt"; exit 1; }
python3 - "$fix/expected.json" "$work/out" <<'PY'
import hashlib, json, sys
exp = {(c.get("source"), c["max_pixels"]): c for c in json.load(open(sys.argv[1]))["cases"]}
out = sys.argv[2]
bad = 0
for i, name in ((0, "rgb_333x217.png"), (1, "lossy_300x200.webp")):
    c = exp[(name, 602112)]
    j = json.load(open(f"{out}/{i}.json"))
    f32 = hashlib.sha256(open(f"{out}/{i}.f32", "rb").read()).hexdigest()
    rgb = hashlib.sha256(open(f"{out}/{i}.rgb", "rb").read()).hexdigest()
    checks = [j["grid_thw"] == c["grid_thw"], j["n_image_tokens"] == c["n_image_tokens"],
              [j["width"], j["height"]] == c["wh"], f32 == c["pixel_values_sha256"],
              rgb == c["resized_rgb_sha256"], j["n_patches"] == c["n_patches"]]
    if not all(checks):
        print(name, checks)
        bad += 1
sys.exit(1 if bad else 0)
PY
echo ok
