#!/usr/bin/env bash
# tornado-simt and tornado-mma on a GPU host that has an NVIDIA driver but no Java or Maven (the team's
# device machine): unpacks the GPU bundle (jlink'ed JDK 25 + TornadoVM PTX SDK), then
#   1. the PTX TornadoVM generates for tornado-mma (-Dtornado.printKernel=True), with ptxas's
#      resource report when ptxas is there,
#   2. correctness: `selftest --random 50` for both backends against the CPU reference, then with window, softcap
#      and sinks (both), bf16 (tornado-simt), and EngineTasksCheck on the Java cache kernels (with the features too),
#   3. timing: `run --json` for (16,8,512,64) and (4,16,2048,128), causal and not, both backends.
# Build first, here: bin/build (with TORNADOVM_HOME set), then run from the repository root with
#   .gpu/gpu-bundle.tar.xz, src/target, src/cli/target and tornado-kernels/target present (carried to the device).
#   tornado-kernels/gpu-check.sh [all|ptx|diag|correct|time] ...
# Output goes to $OUT (default ./out/gpu-check); the last lines printed are a summary.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/gpu-check}
mkdir -p "$OUT"
phases=${*:-all}
want() { [[ " $phases " == *" all "* || " $phases " == *" $1 "* ]]; }

if [ -z "${NO_BUNDLE:-}" ]; then   # NO_BUNDLE=1: use this machine's JDK and $TORNADOVM_HOME (both set)
  if [ ! -d /opt/gpu-bundle ]; then
    tar -xJf .gpu/gpu-bundle.tar.xz -C /opt || { echo "cannot unpack .gpu/gpu-bundle.tar.xz"; exit 2; }
  fi
  source /opt/gpu-bundle/env.sh
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1; bin/tornado-attention backends 2>&1; } \
  > "$OUT/info.txt"
grep -E "NVIDIA|^tornado|^cpu" "$OUT/info.txt"
: > "$OUT/errors.log"

if want ptx; then
  # The PTX of tornado-mma's kernel (D = 128, causal) as TornadoVM generates and loads it.
  JAVA_OPTS="-Dtornado.printKernel=True" timeout 120 bin/tornado-attention run --batch 1 --heads 2 --seq 256 \
    --dim 128 --causal --backend tornado-mma --warmup 0 --iters 1 > "$OUT/mma-d128-printKernel.txt" 2>&1
  JAVA_OPTS="-Dtornado.printKernel=True" timeout 120 bin/tornado-attention run --batch 1 --heads 2 --seq 256 \
    --dim 64 --backend tornado-mma --warmup 0 --iters 1 > "$OUT/mma-d64-printKernel.txt" 2>&1
  for f in "$OUT"/mma-d*-printKernel.txt; do
    # Keep the attention kernel's PTX (the module with mma.sync) as its own file for ptxas.
    # Each module runs from its .version line to the closing brace of its last function.
    awk '/^\.version/{n++; on=1} on{print > (FILENAME ".part" n)} /^}/{on=0}' "$f"
    for part in "$f".part*; do
      if grep -q "mma.sync" "$part"; then mv "$part" "${f%-printKernel.txt}.ptx"; else rm -f "$part"; fi
    done
    grep -iE "error|exception" "$f" | head -5 >> "$OUT/errors.log"
    rm -f "$f"
  done
  if command -v ptxas >/dev/null; then
    for p in "$OUT"/mma-d*.ptx; do
      echo "ptxas $(basename "$p"): $(ptxas -arch=sm_90 --verbose "$p" -o /dev/null 2>&1 | grep -E 'registers|spill' | tr '\n' ' ')"
    done
  fi
fi

if want diag; then
  # Step-by-step checks of a plan's life, then several plans in one JVM (tools/DeviceDiagnostics.java,
  # compiled into tornado-kernels/target/diag by the build machine).
  cp_diag="tornado-kernels/target/diag:src/cli/target/tornado-attention-cli.jar:src/cli/target/lib/*:tornado-kernels/target/tornado-kernels.jar"
  best=0; best_opts=""
  for variant in "tornado-mma" "tornado-simt" "tornado-mma noreuse"; do
    read -r backend extra <<< "$variant"
    opts=""
    [ "$extra" = noreuse ] && opts="-Dtornado.reuse.device.buffers=False"
    timeout 55 "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" --enable-native-access=ALL-UNNAMED \
      -Dtornado.recover.bailout=False $opts -cp "$cp_diag" DeviceDiagnostics "$backend" \
      > "$OUT/diag-$backend${extra:+-$extra}.txt" 2>&1
    echo "diag $backend $extra: $(grep -c '^PASS' "$OUT/diag-$backend${extra:+-$extra}.txt") PASS, $(grep -c '^FAIL' "$OUT/diag-$backend${extra:+-$extra}.txt") FAIL"
    grep -E "^(PASS|FAIL|==)" "$OUT/diag-$backend${extra:+-$extra}.txt" | cut -c1-150 | head -20
    passes=$(grep -c '^PASS' "$OUT/diag-$backend${extra:+-$extra}.txt")
    if [ "$backend" = tornado-mma ] && [ "$passes" -gt "$best" ]; then best=$passes; best_opts=$opts; fi
  done
  # The selftests below run with the options of the best tornado-mma variant.
  export JAVA_OPTS="${JAVA_OPTS:-} $best_opts"
  echo "selftests with JAVA_OPTS=$JAVA_OPTS"
fi

if want correct; then
  # One after the other: a kernel fault in one process can take down the other's context too.
  for backend in tornado-mma tornado-simt; do
    timeout 90 bin/tornado-attention selftest --backend "$backend" --random 50 --seed 20261121 \
      > "$OUT/selftest-$backend.log" 2>&1
  done
  for backend in tornado-mma tornado-simt; do
    echo "selftest $backend: $(grep -E 'passed, ' "$OUT/selftest-$backend.log" || echo 'no summary (see log)')"
    grep -E "^\[.*FAIL" "$OUT/selftest-$backend.log" | head -5
    grep -vE "^\[|^selftest|passed, " "$OUT/selftest-$backend.log" | head -5
  done
  # Window, softcap and sinks on both Java kernels; bf16 on tornado-simt; the device-only JUnit-style checks of the
  # engine tasks (EngineTasksCheck: with and without the features on the cache paths) when the test jar is there.
  for run in "tornado-mma features --window 64,0 --softcap 30 --sinks" "tornado-simt features --window 64,0 --softcap 30 --sinks" \
             "tornado-mma window-right --window 17,9" "tornado-simt bf16 --dtype bf16 --window 40,-1 --sinks"; do
    read -r backend tag extra <<< "$run"
    timeout 120 bin/tornado-attention selftest --backend "$backend" --random 25 --seed 20261126 $extra \
      > "$OUT/selftest-$backend-$tag.log" 2>&1
    echo "selftest $backend $tag: $(grep -E 'passed, ' "$OUT/selftest-$backend-$tag.log" || echo 'no summary (see log)')"
    grep -E "^\[.*FAIL" "$OUT/selftest-$backend-$tag.log" | head -5
  done
  tests_jar=$(ls tornado-kernels/target/tornado-kernels*-tests.jar 2>/dev/null | head -1)
  if [ -n "$tests_jar" ]; then
    timeout 300 "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" --enable-native-access=ALL-UNNAMED \
      -Dtornado.recover.bailout=False \
      -cp "$tests_jar:tornado-kernels/target/tornado-kernels.jar:src/cli/target/tornado-attention-cli.jar:src/cli/target/lib/*" \
      io.github.tornadoattention.tornado.engine.EngineTasksCheck tornado-simt,tornado-mma 14 > "$OUT/engine-tasks.log" 2>&1
    echo "engine tasks: $(tail -n 1 "$OUT/engine-tasks.log")"
    grep -E "^FAIL" "$OUT/engine-tasks.log" | head -5
  fi
fi

if want time; then
  : > "$OUT/timing.jsonl"
  for backend in tornado-mma tornado-simt; do
    for shape in "16 8 512 64" "4 16 2048 128"; do
      read -r b h s d <<< "$shape"
      for causal in "" "--causal"; do
        line=$(timeout 90 bin/tornado-attention run --batch "$b" --heads "$h" --seq "$s" --dim "$d" $causal \
          --backend "$backend" --warmup 5 --iters 30 --json 2> "$OUT/run.err" | tail -n 1)
        if [[ "$line" == \{* ]]; then
          echo "$line" >> "$OUT/timing.jsonl"
        else
          echo "run $backend $shape $causal failed: $(tail -n 3 "$OUT/run.err")" | tee -a "$OUT/errors.log"
        fi
      done
    done
  done
  # CUDA-graph replay of the execution plan (TornadoExecutionPlan.withCUDAGraph), one shape.
  line=$(timeout 90 bin/tornado-attention run --cuda-graph --batch 16 --heads 8 \
    --seq 512 --dim 64 --backend tornado-mma --warmup 5 --iters 30 --check --json 2> "$OUT/run.err" | tail -n 1)
  if [[ "$line" == \{* ]]; then
    echo "${line%\}},\"cuda_graph\":true}" >> "$OUT/timing.jsonl"
  else
    echo "run with CUDA graphs failed: $(tail -n 3 "$OUT/run.err")" | tee -a "$OUT/errors.log"
  fi
  rm -f "$OUT/run.err"
  python3 - "$OUT/timing.jsonl" <<'PY' || cat "$OUT/timing.jsonl"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'backend':13} {'shape (B,H,S,D)':18} {'causal':6} {'device ms':>10} {'TFLOP/s':>8} {'call ms':>9}  notes")
for r in rows:
    shape = f"({r['batch']},{r['heads']},{r['seq']},{r['dim']})"
    notes = ("cuda graph " if r.get("cuda_graph") else "") + (f"check {'PASS' if r['check_passed'] else 'FAIL'} max {r['max_abs_error']:.1e}" if 'check_passed' in r else "")
    print(f"{r['backend']:13} {shape:18} {str(r['causal']):6} {r['device_median_ms']:10.4f} {r['device_tflops']:8.2f} {r['median_ms']:9.3f}  {notes}")
PY
fi
