#!/usr/bin/env bash
# The PTX that TornadoVM generates for tornado-mma / tornado-simt, on a machine WITHOUT an NVIDIA GPU:
# a fake libcuda.so.1 (fakecuda/fakecuda.c) reports an H100, lets TornadoVM's PTX backend start and
# JIT-compile the Java kernels, writes every module handed to cuModuleLoadData to a file, and turns
# launches into no-ops (results are meaningless). Then ptxas (if found) reports registers, spills and
# shared memory per kernel for sm_90. Needs gcc, CUDA headers (cuda.h), TORNADOVM_HOME and a build
# (bin/build with TORNADOVM_HOME set).
#   tornado-kernels/tools/ptx-dump.sh [BACKEND] [bin/tornado-attention run options...]
#   e.g. tornado-kernels/tools/ptx-dump.sh tornado-mma --batch 1 --heads 2 --seq 256 --dim 128 --causal
# Output: $OUT (default out/ptx-dump): module-NNN.ptx, ptxas.txt. FAKECUDA_VERBOSE=1 also logs every
# allocation and copy and flags uses of freed device memory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backend=${1:-tornado-mma}
shift || true
[ $# -gt 0 ] || set -- --batch 1 --heads 2 --seq 256 --dim 128 --causal
OUT=${OUT:-$root/out/ptx-dump}
lib=$(mktemp -d)
trap 'rm -rf "$lib"' EXIT
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
gcc -shared -fPIC -O1 -I"$cuda_include" -Wl,-soname,libcuda.so.1 -o "$lib/libcuda.so.1" "$here/fakecuda/fakecuda.c"
gcc -shared -fPIC -O1 -Wl,-soname,libnvidia-ml.so.1 -o "$lib/libnvidia-ml.so.1" "$here/fakecuda/fakenvml.c"
rm -rf "$OUT" && mkdir -p "$OUT"
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_PTX_DIR="$OUT" \
  "$root/bin/tornado-attention" run --backend "$backend" --warmup 0 --iters 1 "$@" > "$OUT/run.log" 2>&1 || true
ls "$OUT"/module-*.ptx >/dev/null 2>&1 || { echo "no PTX was generated; see $OUT/run.log" >&2; exit 1; }
if command -v ptxas >/dev/null; then
  for p in "$OUT"/module-*.ptx; do
    echo "== $(basename "$p")"
    ptxas -arch=sm_90 --verbose "$p" -o /dev/null 2>&1 | grep -E "Compiling|registers|spill|error" || true
  done > "$OUT/ptxas.txt"
  cat "$OUT/ptxas.txt"
fi
echo "PTX in $OUT"
