#!/usr/bin/env bash
# systemd-analyze verify of every unit in recipe/systemd/ (templates instantiated as @0), with
# ExecStart pointing at the binaries of this build. Any line systemd prints (an unknown key, a key
# in the wrong section, a bad specifier, a missing binary) fails the test.
# usage: verify_units.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed (scripts/install-deps)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/units"
ln -s "$build/frontend/s1-frontend" "$tmp/bin/"
ln -s "$build/preprocessor/s1-preprocessor" "$tmp/bin/"
ln -s "$build/executor/server/s1-executor" "$tmp/bin/"
units=()
for f in "$src"/recipe/systemd/*.service; do
  name=$(basename "$f")
  case "$name" in *@.service) name=${name%@.service}@0.service ;; esac
  sed "s#/usr/local/bin/#$tmp/bin/#g" "$f" >"$tmp/units/$name"
  units+=("$tmp/units/$name")
done
[ ${#units[@]} -ge 3 ] || { echo "expected at least 3 units, found ${#units[@]}"; exit 1; }
out=$(systemd-analyze verify --man=no "${units[@]}" 2>&1) || { echo "$out"; echo "verify failed"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze printed warnings"; exit 1; fi
echo "verified ${#units[@]} units: $(cd "$tmp/units" && echo *)"
