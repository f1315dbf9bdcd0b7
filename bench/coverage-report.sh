#!/usr/bin/env bash
# Model coverage on a GPU, in one command: head dims 32-256, bf16, window, softcap and sinks, checked against the CPU
# reference and timed beside PyTorch in the same run. Needs the packed runtime (.gpu/gpu-bundle.tar.xz: JDK 25 +
# TornadoVM SDK, or JAVA_HOME and TORNADOVM_HOME) and the jars built here. From the repository root:
#
#   bench/coverage-report.sh        # PHASES="correctness prefill prefill-api features models" LAYERS=8 STEPS=64
#
# 1. correctness: the kernel harness (every entry, new head dims, bf16, features) and the Java suite (selftest: every
#    head dim, both types, the features, 50 random shapes) on each backend, and the inference scenarios (also from 8
#    engine threads at once on the TornadoVM backends);
# 2. prefill: the harness times ptx-cuda's entries beside SDPA FLASH at (4,16,2048,D) and (16,8,512,D), causal and not,
#    fp16 and bf16; prefill-api: the Java API times ptx-tornado beside ptx-cuda and bf16 beside fp16 at (4,16,2048,D);
# 3. features: window 4095 at a 32K context against a 4K context without a window (decode token, prefill of a
#    4096-query chunk), softcap 50 + sinks against the same run without them;
# 4. models: Gemma-2-shaped (D=256, GQA 8:4, window 4096 on alternating layers, softcap 50) and Phi-3-shaped (D=96)
#    decode tokens through `decode --layers`, beside PyTorch doing the same per layer.
# Logs and JSON lines go to $OUT (default out/coverage); bench/coverage_table.py prints the table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/coverage}; mkdir -p "$OUT"
LAYERS=${LAYERS:-8}
STEPS=${STEPS:-64}
SEED=${SEED:-$(date +%s)}
PHASES=${PHASES:-correctness prefill prefill-api features models}
TORNADO_BACKENDS=${TORNADO_BACKENDS:-ptx-tornado tornado-mma tornado-simt}
HEAD_DIMS=${HEAD_DIMS:-32 64 96 128 192 256}
source bench/gpu-runtime.sh
fail=0
: > "$OUT/results.jsonl"
# One JSON line of a run, tagged: record TAG LOGFILE
record() { tail -n 1 "$2" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["tag"]=sys.argv[1]; print(json.dumps(d))' "$1" \
  >> "$OUT/results.jsonl" 2>/dev/null || { echo "no JSON from $1 (see $2)"; fail=1; }; }

if want correctness; then
  echo "== correctness (seed $SEED)"
  # Nothing here is timed: every check runs at once (one GPU, a JVM or Python process each), logs apart.
  # check NAME LOG COMMAND...: runs COMMAND in the background into LOG, remembered as NAME.
  names=(); pids=(); logs=()
  check() { local name=$1 log=$2; shift 2; "$@" > "$log" 2>&1 & names+=("$name"); pids+=($!); logs+=("$log"); }
  harness_checks() {
    local rc=0
    (cd ptx-overrides/harness && OUT="$OUT/harness-check" python3 check_and_time.py --no-time --seed "$SEED") || rc=1
    for dt in fp16 bf16; do
      for twins in "" "--tornado-twins"; do
        echo "cache entries $dt ${twins:-(CUDA driver)}: $(OUT="$OUT/harness-cache" python3 ptx-overrides/harness/cache_check.py \
          $twins --dtype $dt --no-time --seed "$SEED" 2>&1 | tee "$OUT/harness-cache-$dt${twins:+-twins}.log" | tail -n 1)"
      done
    done
    grep -q "cache_check: PASS" "$OUT"/harness-cache-fp16.log && return $rc || return 1
  }
  check "harness (every entry; cache entries)" "$OUT/harness-check.log" harness_checks
  check "[ptx-cuda] selftest --random 50" "$OUT/selftest-ptx-cuda.log" cuda selftest --backend ptx-cuda --random 50 --seed "$SEED"
  for b in $TORNADO_BACKENDS; do
    check "[$b] selftest --random 50" "$OUT/selftest-$b.log" ta selftest --backend "$b" --random 50 --seed "$SEED"
  done
  check "[ptx-cuda] selftest --inference" "$OUT/inference-ptx-cuda.log" cuda selftest --inference --backend ptx-cuda --seed "$SEED"
  for b in $TORNADO_BACKENDS; do
    check "[$b] selftest --inference" "$OUT/inference-$b.log" ta selftest --inference --backend "$b" --seed "$SEED"
  done
  check "[ptx-tornado] selftest --inference --cuda-graph --lanes 4" "$OUT/inference-ptx-tornado-graph.log" \
    ta selftest --inference --cuda-graph --lanes 4 --backend ptx-tornado --seed "$SEED"
  for b in $TORNADO_BACKENDS; do
    check "[$b] selftest --inference --threads 8" "$OUT/inference-threads-$b.log" \
      ta selftest --inference --threads 8 --backend "$b" --seed "$SEED"
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || fail=1
    echo "${names[$i]}: $(tail -n 1 "${logs[$i]}")"
  done
  grep -h "^cache entries" "$OUT/harness-check.log"
fi

if want prefill; then
  echo "== prefill kernel time per head dim (ptx-cuda vs SDPA: the harness; ptx-tornado vs ptx-cuda: the Java API)"
  (cd ptx-overrides/harness && OUT="$OUT/harness-time" python3 check_and_time.py --no-check --seed "$SEED") \
    > "$OUT/harness-time.log" 2>&1 || fail=1
fi
if want prefill-api; then
  echo "== prefill through the Java API (one JVM per run): ptx-tornado beside ptx-cuda, bf16 beside fp16, at (4,16,2048,D)"
  for d in $HEAD_DIMS; do
    for causal in "" "--causal"; do
      for run in "ptx-cuda fp16" "ptx-cuda bf16" "ptx-tornado fp16"; do
        set -- $run; b=$1; dt=$2
        # ptx-tornado: TornadoVM's profiler times its kernels (kernel_median_ms, as ptx-cuda's CUDA events do).
        launch=cuda; profile=""; [ "$b" = ptx-tornado ] && launch=ta && profile=--profile
        log="$OUT/prefill-$b-$d-$dt$causal.log"
        $launch run --batch 4 --heads 16 --seq 2048 --dim "$d" $causal --dtype "$dt" --backend "$b" $profile --warmup 10 --iters 30 \
          --seed "$SEED" --json > "$log" 2>&1 && record "prefill $b D=$d $dt$causal" "$log" \
          || echo "[$b D=$d $dt$causal] $(grep -m1 -i "error\|refus\|not served" "$log")"
      done
    done
  done
fi

if want features; then
  echo "== features: cost follows the window; softcap and sinks"
  dec="--batch 8 --heads 32 --kv-heads 8 --dim 128 --layers $LAYERS --steps $STEPS --backend ptx-cuda --seed $SEED --json"
  cuda decode $dec --context 4096 > "$OUT/decode-4k.log" 2>&1 && record "decode 4K" "$OUT/decode-4k.log"
  cuda decode $dec --context 32768 --window 4095 --check > "$OUT/decode-32k-window.log" 2>&1 && record "decode 32K window 4095" "$OUT/decode-32k-window.log" || fail=1
  cuda decode $dec --context 32768 > "$OUT/decode-32k.log" 2>&1 && record "decode 32K" "$OUT/decode-32k.log"
  cuda decode $dec --context 32768 --softcap 50 --sinks --check > "$OUT/decode-32k-softcap-sinks.log" 2>&1 \
    && record "decode 32K softcap 50 sinks" "$OUT/decode-32k-softcap-sinks.log" || fail=1
  pre="--batch 1 --heads 32 --kv-heads 8 --dim 128 --seq 4096 --backend ptx-cuda --warmup 5 --iters 20 --seed $SEED --json"
  cuda run $pre --kv-seq 4096 > "$OUT/prefill-4k.log" 2>&1 && record "prefill 4096x4096" "$OUT/prefill-4k.log"
  cuda run $pre --kv-seq 32768 --causal --window 4095 > "$OUT/prefill-32k-window.log" 2>&1 \
    && record "prefill 4096x32768 causal window 4095" "$OUT/prefill-32k-window.log"
  # Window 1023 runs the causal tile, 2047 the non-causal one (LaunchTable.tileCausal): check both.
  for w in 1023 2047; do
    cuda run --batch 1 --heads 4 --kv-heads 1 --dim 128 --seq 1024 --kv-seq 8192 --causal --window $w --backend ptx-cuda \
      --iters 1 --check --seed "$SEED" > "$OUT/prefill-window-$w-check.log" 2>&1 || fail=1
    echo "windowed prefill check, window $w: $(grep -m1 '^check' "$OUT/prefill-window-$w-check.log")"
  done
  # Sinks alone run the plain entry (a prefill tile starts its softmax from the sink): they should cost nothing.
  for D in 128 256; do
    for extra in "" "--sinks" "--softcap 50" "--softcap 50 --sinks"; do
      log="$OUT/prefill-d$D-softcap-$(echo "x$extra" | tr -d ' -').log"
      cuda run --batch 4 --heads 16 --seq 2048 --dim $D --causal $extra --backend ptx-cuda --warmup 10 --iters 30 --check \
        --seed "$SEED" --json > "$log" 2>&1 && record "prefill (4,16,2048,$D) causal $extra" "$log" || fail=1
    done
    # PyTorch's own softcap: FlexAttention with and without the score_mod (SDPA has none).
    python3 bench/softcap_baseline.py --dim $D --softcap 50 2> "$OUT/softcap-torch-d$D.err" \
      | sed "s/^{/{\"tag\": \"torch softcap d$D\", /" >> "$OUT/results.jsonl"
  done
  python3 bench/decode_baseline.py --batch 8 --heads 32 --kv-heads 8 --dim 128 --context 32768 --layers "$LAYERS" \
    --steps "$STEPS" --window 4095 --backends FLASH | sed 's/^{/{"tag": "torch decode 32K window 4095", /' >> "$OUT/results.jsonl"
fi

if want models; then
  echo "== model-shaped decode tokens, $LAYERS layers"
  gemma="--batch 8 --heads 8 --kv-heads 4 --dim 256 --context 8192 --layers $LAYERS --steps $STEPS"
  phi="--batch 8 --heads 32 --kv-heads 32 --dim 96 --context 4096 --layers $LAYERS --steps $STEPS"
  for dt in fp16 bf16; do
    cuda decode $gemma --window 4096 --window-layers LG --softcap 50 --dtype $dt --backend ptx-cuda --check --seed "$SEED" \
      --json > "$OUT/gemma2-$dt.log" 2>&1 && record "gemma2 $dt ptx-cuda" "$OUT/gemma2-$dt.log" || fail=1
    python3 bench/decode_baseline.py $gemma --window 4096 --window-layers LG --softcap 50 --dtype $dt --backends FLASH \
      | sed "s/^{/{\"tag\": \"gemma2 $dt torch\", /" >> "$OUT/results.jsonl"
    cuda decode $phi --dtype $dt --backend ptx-cuda --check --seed "$SEED" --json > "$OUT/phi3-$dt.log" 2>&1 \
      && record "phi3 $dt ptx-cuda" "$OUT/phi3-$dt.log" || fail=1
    python3 bench/decode_baseline.py $phi --dtype $dt --backends FLASH,CUDNN | sed "s/^{/{\"tag\": \"phi3 $dt torch\", /" \
      >> "$OUT/results.jsonl"
  done
  ta decode $gemma --window 4096 --window-layers LG --softcap 50 --backend ptx-tornado --cuda-graph --warmup 100 --check \
    --seed "$SEED" --json > "$OUT/gemma2-ptx-tornado.log" 2>&1 && record "gemma2 fp16 ptx-tornado" "$OUT/gemma2-ptx-tornado.log" || fail=1
fi

python3 bench/coverage_table.py "$OUT/results.jsonl" | tee "$OUT/table.md"
exit $fail
