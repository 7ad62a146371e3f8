#!/bin/bash
# Early check on the GPU machine: the bundle starts, model generation cost, the peer at 4B shape.
set -u
cd "$(dirname "$0")"
H=$PWD
exec > >(tee "$OUT/early.log") 2>&1
START=$EPOCHREALTIME
el() { awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}'; }
tm() { local s=$EPOCHREALTIME; "$@"; local rc=$?; awk -v a="$s" -v b="$EPOCHREALTIME" -v rc=$rc -v c="$*" 'BEGIN{printf "[time %.2f s rc=%d] %s\n", b-a, rc, c}'; return $rc; }
echo "== machine"; nproc; free -g | head -2; df -h / /tmp /dev/shm | cat; nvidia-smi -L; ldd --version | head -1
mkdir -p /tmp/b && tm tar xJf bundle.tar.xz -C /tmp/b && xz -dc tokenizer.json.xz > /tmp/tok.json
B=/tmp/b/bundle/bin
echo "== bundle: missing libs"; for b in $B/*; do ldd $b | grep 'not found' | sed "s|^|$(basename $b): |"; done; echo "(end)"
for b in s1-frontend s1-preprocessor s1-executor s1-mkmodel s1-export s1-tokenize; do $B/$b --help >/tmp/h 2>&1; echo "$b --help rc=$? $(head -1 /tmp/h)"; done
$B/s1-forward >/tmp/h 2>&1; echo "s1-forward (no args) rc=$? $(head -1 /tmp/h)"
echo '"Hello, world! This is a test."' | $B/s1-tokenize --tokenizer /tmp/tok.json
echo "== write speed (2 GiB of zeros, fdatasync)"
dd if=/dev/zero of=/dev/shm/z bs=1M count=2048 conv=fdatasync 2>&1 | tail -1; rm -f /dev/shm/z
dd if=/dev/zero of=/tmp/z bs=1M count=2048 conv=fdatasync 2>&1 | tail -1; rm -f /tmp/z
echo "== tiny: mkmodel, export, CPU forward, executor, frontend"
tm $B/s1-mkmodel --shape tiny --vision --seed 1 --tokenizer /tmp/tok.json --out /tmp/mt
tm $B/s1-export --family qwen3_5 --base /tmp/mt --out /tmp/dt
python3 bench_peer.py inputs --out /tmp/in
tm $B/s1-forward --model /tmp/dt --input /tmp/in/single_128.json --output /tmp/ft.json && python3 -c "import json;d=json.load(open('/tmp/ft.json'));print('cpu tiny top5', d['logits_top'][0]['ids'][:5])"
$B/s1-executor --model /tmp/dt --device cpu --listen ipc:///tmp/e.sock >/tmp/e.log 2>&1 & EP=$!
$B/s1-frontend --listen 127.0.0.1:18080 >/tmp/f.log 2>&1 & FP=$!
sleep 2; kill -0 $EP && echo "executor alive"; kill -0 $FP && echo "frontend alive"
curl -s -m 3 -o /dev/null -w "frontend /health http %{http_code}\n" 127.0.0.1:18080/health
kill $EP $FP; wait $EP $FP 2>/dev/null; tail -3 /tmp/e.log /tmp/f.log
echo "== peer on tiny (script check)  t=$(el)"
PYTHONUNBUFFERED=1 tm python3 bench_peer.py time --model /tmp/dt --inputs /tmp/in --repeats 3 --warmup 1 --out $OUT/peer_tiny.json 2>&1 | grep -v Warning | tail -12
echo "== 4b: mkmodel to /dev/shm, export to /dev/shm  t=$(el)"
tm $B/s1-mkmodel --shape 4b --seed 4 --tokenizer /tmp/tok.json --out /dev/shm/m4; du -sb /dev/shm/m4
tm $B/s1-export --family qwen3_5 --base /dev/shm/m4 --out /dev/shm/d4; du -sb /dev/shm/d4; rm -rf /dev/shm/m4
echo "== peer 4b  t=$(el)"
PYTHONUNBUFFERED=1 tm python3 bench_peer.py time --model /dev/shm/d4 --inputs /tmp/in --repeats 10 --warmup 3 --out $OUT/peer_4b.json 2>&1 | grep -v Warning | tail -12
rm -rf /dev/shm/d4
echo "== 27b mkmodel for 20 s to disk (rate)  t=$(el)"
if awk -v e="$(el)" 'BEGIN{exit !(e < 75)}'; then
  timeout 20 $B/s1-mkmodel --shape 27b --seed 27 --tokenizer /tmp/tok.json --out /tmp/m27; echo "rc=$? bytes in 20 s: $(du -sb /tmp/m27 | cut -f1)"; rm -rf /tmp/m27
else echo skipped; fi
echo "== done t=$(el)"
