#!/usr/bin/env bash
# The GPU report, in one command on a GPU host that has PyTorch, given the packed runtime
# (.gpu/gpu-bundle.tar.xz: JDK 25 + TornadoVM PTX SDK) and the jars built on a build machine
# (src/target, src/cli/target, tornado-kernels/target, bench/target). From the repository root:
#
#   bench/gpu-report.sh                # every GPU backend, every shape, 50 random correctness shapes
#   BACKENDS=ptx-cuda SHAPES=prefill RANDOM_SHAPES=10 bench/gpu-report.sh
# JMH_BACKENDS (default: BACKENDS) picks the backends JMH times; JMH_TIMEOUT (seconds) bounds it.
#
# A run can be split over several sessions (each under a time limit): PHASES picks the steps
# (default "correctness sdpa jmh report") and RAW_IN names a folder of raw results from an earlier
# part (an unpacked raw.tar.gz) to continue from; JMH results of several parts are merged.
#
# Steps: 1. correctness of each backend against the CPU reference (selftest), 2. the PyTorch SDPA
# baseline (FLASH and CUDNN) on the same shapes, 3. the JMH benchmarks, 4. the report:
# $OUT/report/<gpu>-<date>.{md,json,png}, plus $OUT/raw.tar.gz with every raw result and log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BACKENDS=${BACKENDS:-ptx-cuda,ptx-tornado,tornado-mma,tornado-simt}
SHAPES=${SHAPES:-all}
RANDOM_SHAPES=${RANDOM_SHAPES:-50}
JMH_ARGS=${JMH_ARGS:---forks 1 --warmup-iterations 2 --iterations 5 --iteration-ms 300}
PHASES=${PHASES:-correctness sdpa jmh report}
SEED=${SEED:-$(date +%s)}
JMH_BACKENDS=${JMH_BACKENDS:-$BACKENDS}
JMH_TIMEOUT=${JMH_TIMEOUT:-0}
raw=$OUT/raw; mkdir -p "$raw" "$OUT/report"
if [ -n "${RAW_IN:-}" ]; then cp -r "$RAW_IN"/. "$raw"/; fi
want() { [[ " $PHASES " == *" $1 "* ]]; }

if [ -z "${TORNADOVM_HOME:-}" ]; then
  bundle=${BUNDLE:-.gpu/gpu-bundle.tar.xz}
  [ -d /opt/gpu-bundle ] || tar -xJf "$bundle" -C /opt || { echo "cannot unpack $bundle" >&2; exit 2; }
  source /opt/gpu-bundle/env.sh
fi
step() { echo "== $(date +%T) $*" | tee -a "$raw/progress.log"; }

step "environment"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
jdk=$("$JAVA_HOME/bin/java" -version 2>&1 | head -n 1)
tornadovm=$(ls "$TORNADOVM_HOME"/share/java/tornado/tornado-api-*.jar 2>/dev/null | sed 's/.*tornado-api-\(.*\)\.jar/\1/' | head -n 1)
torch=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)
date=$(date +%Y-%m-%d)
name=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/-$//')-$date
cat > "$raw/env.json" <<JSON
{"gpu": "$gpu", "driver": "$driver", "cuda": "$cuda", "jdk": "${jdk//\"/}", "tornadovm": "$tornadovm", "torch": "$torch", "date": "$date"}
JSON
cat "$raw/env.json"

if want correctness; then
  step "correctness: selftest of $BACKENDS with $RANDOM_SHAPES random shapes, seed $SEED"
  # One JVM per backend, side by side: a TornadoVM failure cannot take the others down with it.
  for backend in ${BACKENDS//,/ }; do
    # --json: the report reads the JSON object on the log's last line (every case, totals, seed).
    bin/tornado-attention selftest --backend "$backend" --random "$RANDOM_SHAPES" --seed "$SEED" --json \
      > "$raw/selftest-$backend.log" 2>&1 &
  done
  wait
  for backend in ${BACKENDS//,/ }; do
    echo "$backend: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$raw/selftest-$backend.log" || echo 'did not finish')"
    grep -E "FAIL|^error|fatal" "$raw/selftest-$backend.log" | head -n 5 | cut -c1-200
  done
fi

bench_jar=bench/target/benchmarks.jar
cp="$bench_jar:tornado-kernels/target/tornado-kernels.jar"
if want sdpa; then
  step "PyTorch SDPA baseline"
  "$JAVA_HOME/bin/java" -cp "$bench_jar" io.github.tornadoattention.bench.BenchmarkRunner shapes --shapes "$SHAPES" > "$raw/shapes.json"
  PYTHONUNBUFFERED=1 python3 bench/sdpa_baseline.py "$raw/shapes.json" "$raw/sdpa.json" 2>&1 | tee "$raw/sdpa.log"
fi

if want jmh; then
  step "JMH: $JMH_BACKENDS on $SHAPES"
  part=$(date +%H%M%S)
  # The benchmarks make their plans with PlanOptions.profile (TornadoVM's profiler times the kernels of the
  # TornadoVM-hosted backends) because BenchmarkRunner collects kernel times.
  # tornado.panama.objectHeader=128: as bin/tornado-attention (128-byte aligned array data).
  timeout "$JMH_TIMEOUT" "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" --enable-native-access=ALL-UNNAMED \
    -Dtornado.recover.bailout=False -Dtornado.panama.objectHeader=128 ${JAVA_OPTS:-} \
    -cp "$cp" io.github.tornadoattention.bench.BenchmarkRunner jmh \
    --backends "$JMH_BACKENDS" --shapes "$SHAPES" $JMH_ARGS --out "$raw" --name "jmh-$part" > "$raw/jmh-$part.log" 2>&1
  grep -E "^AttentionBenchmark\.[a-zA-Z]+ " "$raw/jmh-$part.log" | tail -n 80
fi

want report || { step "done (no report)"; tar -C "$OUT" -czf "$OUT/raw.tar.gz" raw && rm -rf "$raw"; exit 0; }
step "report"
# GPU images often have no system fonts: draw the chart's text with matplotlib's DejaVu Sans if it is there.
font=$(python3 -c 'import matplotlib, os; print(os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", "DejaVuSans.ttf"))' 2>/dev/null)
[ -f "$font" ] || font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
"$JAVA_HOME/bin/java" -Djava.awt.headless=true -Dreport.font="$font" -cp "$bench_jar" io.github.tornadoattention.bench.BenchmarkRunner report \
  --results "$raw" --name "$name" --to "$OUT/report" \
  --command "BACKENDS=$BACKENDS JMH_BACKENDS=$JMH_BACKENDS SHAPES=$SHAPES RANDOM_SHAPES=$RANDOM_SHAPES SEED=$SEED JMH_ARGS='$JMH_ARGS' bench/gpu-report.sh"
if [ ! -f "$OUT/report/$name.png" ]; then
  python3 bench/chart.py "$OUT/report/$name.json" "$OUT/report/$name.png" && echo "chart drawn with matplotlib"
fi
step "done"
tar -C "$OUT" -czf "$OUT/raw.tar.gz" raw && rm -rf "$raw"
sed -n '/## Correctness/,/## Performance/p' "$OUT/report/$name.md" | head -n 12
grep -E "device-timed|cuda events" "$OUT/report/$name.md" | cut -c1-150 | head -n 60
