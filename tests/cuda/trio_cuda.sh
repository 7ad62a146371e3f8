#!/bin/sh
# The meson test gpu_trio_cuda on a machine with a build tree and a GPU: stages the trio-on-CUDA
# test (trio_cuda_stage.py: CPU answers, model hashes, tokenizers) into WORK/stage, links the trio
# and model tools into WORK/bin, then runs trio_cuda_check.py (--device cuda:0) with logs in
# WORK/log. Without a GPU the executor never becomes healthy and the test fails.
# With DEVICE cpu (and S1_TRIO_EXECUTOR_ARGS, e.g. "--max-seqs 3") it checks the same harness and
# the runner's launch packing on the float32 CPU engine (test trio_packed_cpu).
# usage: trio_cuda.sh BUILD_ROOT SHARED_DIR QWEN35_TOKENIZER_JSON WORK [DEVICE]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1 shared=$2 tok35=$3 work=$4 device=${5:-cuda:0}
if [ ! -s "$tok35" ]; then  # derived under the lock the other tests take
  S1_PYTHON=${S1_PYTHON:-python3} "$here/../oracle/qwen35_tokenizer.sh" "$tok35"
fi
rm -rf "$work"
mkdir -p "$work/bin"
for t in frontend/s1-frontend preprocessor/s1-preprocessor executor/server/s1-executor \
         tools/mkmodel/s1-mkmodel tools/export/s1-export; do
  ln -s "$build/$t" "$work/bin/"
done
python3 "$here/trio_cuda_stage.py" "$build" "$shared" "$tok35" "$work/stage"
exec python3 "$here/trio_cuda_check.py" "$work/stage" "$work/bin" "$work/log" "$device"
