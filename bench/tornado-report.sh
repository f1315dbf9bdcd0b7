#!/usr/bin/env bash
# The TornadoVM inference report, in one command on a GPU host with PyTorch, given the packed runtime
# (.gpu/gpu-bundle.tar.xz: JDK 25 + TornadoVM SDK, or JAVA_HOME and TORNADOVM_HOME) and the jars built with
# TORNADOVM_HOME (src/target, src/cli/target, tornado-kernels/target, examples/target). From the repository root:
#
#   bench/tornado-report.sh            # PHASES="correctness decode demo" CONTEXTS="4096 32768" LAYERS=8 STEPS=100 WARMUP=300
#
# 1. correctness on the GPU against the CPU reference: the PTX twins' own check (cache_check.py --tornado-twins),
#    the inference API's cache scenarios on ptx-cuda (the comparison's baseline),
#    our tasks in an engine's own task graphs (EngineTasksCheck), the inference API's cache scenarios (selftest --inference,
#    also from 8 engine threads at once: --threads 8) and sampled decode steps (decode --check) on
#    ptx-tornado, tornado-mma and tornado-simt; the dense plans (selftest --random, unchanged inputs kept on the
#    device);
# 2. per-token decode through the Java API at (8,32,8,128), LAYERS layers, each context: ptx-cuda, ptx-tornado,
#    tornado-mma (step wall time without the profiler, with CUDA graphs, with 4 lanes too; kernel time with the
#    profiler) beside PyTorch (index write + SDPA);
# 3. the Llama-shaped layer demo (examples/): our attention task against a GPULlama3-style scalar kernel.
# Logs and JSON lines go to $OUT (default out/tornado); a table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/tornado}; mkdir -p "$OUT"
CONTEXTS=${CONTEXTS:-4096 32768}
LAYERS=${LAYERS:-8}
STEPS=${STEPS:-100}
# Untimed steps first: TornadoVM's execute path is Java, and its host cost per execution falls by about a quarter once
# the JIT has compiled it (a few hundred executions; an engine runs thousands). Every backend gets the same warm-up.
WARMUP=${WARMUP:-300}
SEED=${SEED:-$(date +%s)}
PHASES=${PHASES:-correctness decode demo}
BACKENDS=${BACKENDS:-ptx-tornado tornado-mma tornado-simt}
SHAPE="--batch 8 --heads 32 --kv-heads 8 --dim 128"
source bench/gpu-runtime.sh
fail=0

if want correctness; then
  echo "== correctness (seed $SEED)"
  python3 ptx-overrides/harness/cache_check.py --tornado-twins --seed "$SEED" > "$OUT/cache-check-twins.log" 2>&1 || fail=1
  tail -n 1 "$OUT/cache-check-twins.log"
  "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False \
    -Dtornado.panama.objectHeader=128 -Dtornado.max.events=1024 \
    -cp "src/cli/target/tornado-attention-cli.jar:src/cli/target/lib/*:tornado-kernels/target/tornado-kernels.jar:tornado-kernels/target/tornado-kernels-tests.jar" \
    io.github.tornadoattention.tornado.engine.EngineTasksCheck "$(echo $BACKENDS | tr ' ' ,)" "$SEED" \
    > "$OUT/engine-tasks.log" 2>&1 || fail=1
  echo "engine task graphs: $(tail -n 1 "$OUT/engine-tasks.log")"
  # ptx-cuda too: its KV-cache module (flash_cache.ptx) and the TornadoVM twins' (flash_cache_tornado.ptx) are built
  # from one header, and the comparison below needs ptx-cuda right.
  cuda selftest --inference --backend ptx-cuda --seed "$SEED" > "$OUT/selftest-inference-ptx-cuda.log" 2>&1 || fail=1
  echo "[ptx-cuda] selftest --inference: $(tail -n 1 "$OUT/selftest-inference-ptx-cuda.log")"
  for b in $BACKENDS; do
    ta selftest --inference --backend "$b" --seed "$SEED" > "$OUT/selftest-inference-$b.log" 2>&1 || fail=1
    echo "[$b] selftest --inference: $(tail -n 1 "$OUT/selftest-inference-$b.log")"
    ta selftest --inference --cuda-graph --backend "$b" --seed "$SEED" > "$OUT/selftest-inference-$b-graph.log" 2>&1 || fail=1
    echo "[$b] selftest --inference --cuda-graph: $(tail -n 1 "$OUT/selftest-inference-$b-graph.log")"
    ta selftest --inference --cuda-graph --lanes 4 --backend "$b" --seed "$SEED" > "$OUT/selftest-inference-$b-lanes.log" 2>&1 || fail=1
    echo "[$b] selftest --inference --cuda-graph --lanes 4: $(tail -n 1 "$OUT/selftest-inference-$b-lanes.log")"
    # Engine threads (issue 23): 8 threads at once, each with its own caches and plans, with CUDA graphs and lanes.
    ta selftest --inference --threads 8 --cuda-graph --lanes 4 --backend "$b" --seed "$SEED" > "$OUT/selftest-inference-$b-threads.log" 2>&1 || fail=1
    echo "[$b] selftest --inference --threads 8 --cuda-graph --lanes 4: $(tail -n 1 "$OUT/selftest-inference-$b-threads.log")"
    for args in "--context 3000 --ragged" "--context 3000 --ragged --page-size 16" "--context 700 --dim 64 --page-size 4"; do
      dims=$SHAPE; [[ "$args" == *"--dim 64"* ]] && dims="--batch 8 --heads 32 --kv-heads 8"
      log="$OUT/check-$b-$(echo "$args" | tr -d ' -').log"
      ta decode $dims $args --steps 8 --layers 2 --backend "$b" --check --seed "$SEED" --json > "$log" 2>&1 || fail=1
      echo "[$b $args] $(grep -h '^check' "$log")"
    done
  done
  ta selftest --backend "$(echo $BACKENDS | tr ' ' ,)" --random 20 --seed "$SEED" > "$OUT/selftest-dense.log" 2>&1 || fail=1
  echo "dense plans: $(tail -n 1 "$OUT/selftest-dense.log")"
fi

if want decode; then
  echo "== per-token decode, $LAYERS layers"
  : > "$OUT/decode.jsonl"
  for n in $CONTEXTS; do
    cuda decode $SHAPE --context "$n" --layers "$LAYERS" --steps "$STEPS" --warmup "$WARMUP" --backend ptx-cuda --seed "$SEED" --json \
      > "$OUT/decode-$n-ptx-cuda.log" 2>&1 || fail=1
    tail -n 1 "$OUT/decode-$n-ptx-cuda.log" >> "$OUT/decode.jsonl"
    for b in ptx-tornado tornado-mma; do
      for mode in "" "--profile" "--cuda-graph" "--cuda-graph --lanes 4"; do
        log="$OUT/decode-$n-$b$(echo "$mode" | tr -d ' ' | sed 's/--/-/g').log"
        ta decode $SHAPE --context "$n" --layers "$LAYERS" --steps "$STEPS" --warmup "$WARMUP" --backend "$b" $mode --seed "$SEED" --json \
          > "$log" 2>&1 || fail=1
        tail -n 1 "$log" | sed "s/^{/{\"mode\":\"${mode:-plain}\",/" >> "$OUT/decode.jsonl"
      done
    done
    python3 bench/decode_baseline.py --batch 8 --heads 32 --kv-heads 8 --dim 128 --context "$n" --layers "$LAYERS" \
      --steps "$STEPS" --warmup "$WARMUP" --backends FLASH >> "$OUT/decode.jsonl" 2> "$OUT/torch-$n.err" || fail=1
  done
fi

if want demo; then
  echo "== layer demo (examples/)"
  cp="src/cli/target/tornado-attention-cli.jar:src/cli/target/lib/*:tornado-kernels/target/tornado-kernels.jar:examples/target/tornado-attention-examples.jar"
  demo() { timeout "${DEMO_TIMEOUT:-560}" "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" --enable-native-access=ALL-UNNAMED \
    -Dtornado.recover.bailout=False -Dtornado.panama.objectHeader=128 -Dtornado.max.events=1024 -cp "$cp" \
    io.github.tornadoattention.examples.llama.LlamaDecoderDemo "$@"; }
  # The scalar variant takes ~80 ms per token at 1K context and grows with it: feeding a 4K prompt through it one
  # token per step takes over ten minutes, so the 4K run starts both variants from the same random 3800-position
  # cache prefix (--prefix) and feeds 16 prompt tokens, then generates 280 (context 4096 at the end).
  demo ${DEMO_ARGS:---attention ours,scalar --backend ptx-tornado --prefix 3800 --prompt 16 --generate 280 --profile-steps 16} \
    --json "$OUT/llama.json" > "$OUT/llama.log" 2>&1 || fail=1
  tail -n 30 "$OUT/llama.log"
fi

[ -s "$OUT/decode.jsonl" ] && python3 - "$OUT/decode.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cuda = {r["context"]: r for r in rows if r.get("backend") == "ptx-cuda"}
torch = {r["context"]: r for r in rows if r.get("backend") == "torch-sdpa-FLASH"}
print("\n| context | backend | step ms | kernels ms (profiler) | step / ptx-cuda step | step / PyTorch step | compilations after warm-up |")
print("|---|---|---|---|---|---|---|")
for n in sorted(cuda):
    c, t = cuda[n], torch.get(n, {})
    def line(name, step, kernel, comp):
        rt = "%.3f" % (step / t["median_ms"]) if t.get("median_ms") else "-"
        print("| %d | %s | %.4g | %s | %.3f | %s | %s |" % (n, name, step, kernel, step / c["median_ms"], rt, comp))
    line("ptx-cuda", c["median_ms"], "%.4g" % c["kernel_median_ms"], c["compilations_after_warmup"])
    for b in ("ptx-tornado", "tornado-mma"):
        pick = lambda mode: [r for r in rows if r.get("backend") == b and r["context"] == n and r.get("mode") == mode]
        prof = pick("--profile")
        k = prof[0]["kernel_median_ms"] if prof and prof[0].get("kernel_median_ms") else None
        for mode, label in (("plain", b), ("--cuda-graph", b + " (CUDA graph)"),
                            ("--cuda-graph --lanes 4", b + " (CUDA graph, 4 lanes)")):
            r = pick(mode)
            if r and "median_ms" in r[0]:
                line(label, r[0]["median_ms"], "%.4g" % k if k else "-", r[0]["compilations_after_warmup"])
    if t:
        print("| %d | PyTorch SDPA-FLASH | %.4g | %s | %.3f | 1 | - |" % (n, t["median_ms"], t.get("kernel_median_ms"),
              t["median_ms"] / c["median_ms"]))
PY
exit $fail
