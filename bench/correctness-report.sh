#!/usr/bin/env bash
# Every GPU backend against the CPU reference, in one command on a GPU host with PyTorch, given the packed runtime
# (.gpu/gpu-bundle.tar.xz: JDK 25 + TornadoVM SDK) and the jars built with TORNADOVM_HOME (src/target, src/cli/target,
# tornado-kernels/target). From the repository root:
#
#   bench/correctness-report.sh         # BACKENDS="ptx-cuda ptx-tornado tornado-mma tornado-simt" SEED=...
#
# Per backend, the backends side by side: the inference scenarios (selftest --inference; the TornadoVM hosts also with
# CUDA graphs and with 4 lanes), sampled decode steps (decode --check: ragged, paged 16, D=64 paged 4). Beside them:
# the hand-tuned kernels through the PTX harness (the dense kernels, both KV-cache modules: each kernel selected by its
# variant from the manifest) and our tasks in an engine's own task graphs (EngineTasksCheck). The dense suite and
# random shapes are bench/ab-compare.sh's first step. Logs under $OUT (default out/correctness); a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/correctness}; mkdir -p "$OUT"
BACKENDS=${BACKENDS:-ptx-cuda ptx-tornado tornado-mma tornado-simt}
SEED=${SEED:-$(date +%s)}
if [ -z "${TORNADOVM_HOME:-}" ]; then
  [ -d /opt/gpu-bundle ] || tar -xJf "${BUNDLE:-.gpu/gpu-bundle.tar.xz}" -C /opt || { echo "cannot unpack the bundle" >&2; exit 2; }
  source /opt/gpu-bundle/env.sh
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
ta() {   # one CLI call; ptx-cuda runs without TornadoVM, as its users do
  local b=$1; shift
  if [ "$b" = ptx-cuda ]; then TORNADOVM_HOME= timeout "${CALL_TIMEOUT:-420}" bin/tornado-attention "$@" --backend "$b"
  else timeout "${CALL_TIMEOUT:-420}" bin/tornado-attention "$@" --backend "$b"; fi
}
backend_checks() {
  local b=$1 modes=("")
  [ "$b" = ptx-cuda ] || modes=("" "--cuda-graph" "--cuda-graph --lanes 4")
  for mode in "${modes[@]}"; do
    local tag; tag=$(echo "selftest-inference $mode" | tr -d '-' | tr ' ' '_')
    ta "$b" selftest --inference $mode --seed "$SEED" > "$OUT/$b-$tag.log" 2>&1; echo "$b|selftest --inference $mode|$?|$(tail -n 1 "$OUT/$b-$tag.log")"
  done
  local shape="--batch 8 --heads 32 --kv-heads 8"
  for args in "--dim 128 --context 3000 --ragged" "--dim 128 --context 3000 --ragged --page-size 16" \
              "--dim 64 --context 700 --page-size 4"; do
    local log; log="$OUT/$b-decode$(echo "$args" | tr -d ' -').log"
    ta "$b" decode $shape $args --steps 8 --layers 2 --check --seed "$SEED" --json > "$log" 2>&1
    echo "$b|decode --check $args|$?|$(grep -h '^check' "$log" | head -n 1)"
  done
}
: > "$OUT/results.txt"
(
  PYTHONUNBUFFERED=1 python3 ptx-overrides/harness/check_and_time.py --no-time --seed "$SEED" > "$OUT/harness-dense.log" 2>&1
  echo "harness|dense prefill and decode kernels (check_and_time.py --no-time)|$?|$(tail -n 1 "$OUT/harness-dense.log")"
  python3 ptx-overrides/harness/cache_check.py --no-time --seed "$SEED" > "$OUT/harness-cache.log" 2>&1
  echo "harness|KV-cache kernels (cache_check.py --no-time)|$?|$(tail -n 1 "$OUT/harness-cache.log")"
  python3 ptx-overrides/harness/cache_check.py --tornado-twins --seed "$SEED" > "$OUT/harness-twins.log" 2>&1
  echo "harness|KV-cache TornadoVM twins (cache_check.py --tornado-twins)|$?|$(tail -n 1 "$OUT/harness-twins.log")"
  tornado=$(echo $BACKENDS | tr ' ' '\n' | grep -v ptx-cuda | paste -sd,)
  if [ -n "$tornado" ]; then
    "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False \
      -Dtornado.panama.objectHeader=128 -Dtornado.max.events=1024 \
      -cp "src/cli/target/tornado-attention-cli.jar:src/cli/target/lib/*:tornado-kernels/target/tornado-kernels.jar:tornado-kernels/target/tornado-kernels-tests.jar" \
      io.github.tornadoattention.tornado.engine.EngineTasksCheck "$tornado" "$SEED" > "$OUT/engine-tasks.log" 2>&1
    echo "engine tasks|$tornado (EngineTasksCheck)|$?|$(tail -n 1 "$OUT/engine-tasks.log")"
  fi
) >> "$OUT/results.txt" &
for b in $BACKENDS; do backend_checks "$b" >> "$OUT/results.txt" & done
wait
echo; echo "seed $SEED, $(cat "$OUT/gpu.txt")"
echo "| backend | check | exit | last line |"; echo "|---|---|---|---|"
sort "$OUT/results.txt" | awk -F'|' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}'
! awk -F'|' '$3 != 0 {bad = 1} END {exit !bad}' "$OUT/results.txt"
