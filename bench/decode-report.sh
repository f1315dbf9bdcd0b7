#!/usr/bin/env bash
# The inference report, in one command on a GPU host with PyTorch, given a JDK 25 (the packed runtime
# .gpu/gpu-bundle.tar.xz, or JAVA_HOME) and the jars built here (src/target, src/cli/target). From the repository root:
#
#   bench/decode-report.sh                 # CONTEXTS="4096 32768" LAYERS=32 STEPS=64
#
# 1. correctness on the GPU against the CPU reference: the cache scenarios (selftest --inference) and
#    sampled decode steps (decode --check), contiguous, paged and ragged;
# 2. per-token decode through the Java API (B=8, Hq=32, Hkv=8, D=128, LAYERS layers, each with its own
#    cache) at each context: contiguous, paged (16), ragged; beside PyTorch doing the same per layer
#    (index write + SDPA FLASH / CUDNN) in the same run;
# 3. a table: step time, kernels' device time, step/kernels, ratio to PyTorch, K/V TB/s.
# Logs and JSON lines go to $OUT (default out/decode).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/decode}; mkdir -p "$OUT"
CONTEXTS=${CONTEXTS:-4096 32768}
LAYERS=${LAYERS:-32}
STEPS=${STEPS:-64}
SEED=${SEED:-$(date +%s)}
SHAPE="--batch 8 --heads 32 --kv-heads 8 --dim 128"
PHASES=${PHASES:-correctness prefill varlen decode}
want() { [[ " $PHASES " == *" $1 "* ]]; }
PROMPTS=${PROMPTS:-2816,256,4096,1536,3456,896,2176,3840}   # 8 prompts, 256..4096
if [ -z "${JAVA_HOME:-}" ] || [ ! -x "$JAVA_HOME/bin/java" ]; then
  if [ -f "${JDK_TAR:-.gpu/jdk25.tar.xz}" ]; then   # a jlink'ed JDK 25 is all ptx-cuda needs
    mkdir -p /opt/jdk25 && tar -xJf "${JDK_TAR:-.gpu/jdk25.tar.xz}" -C /opt/jdk25 && export JAVA_HOME=/opt/jdk25/jdk
  else
    bundle=${BUNDLE:-.gpu/gpu-bundle.tar.xz}
    [ -d /opt/gpu-bundle ] || tar -xJf "$bundle" -C /opt || { echo "cannot unpack $bundle" >&2; exit 2; }
    export JAVA_HOME=/opt/gpu-bundle/jdk
  fi
fi
export TORNADOVM_HOME= # ptx-cuda needs no TornadoVM
ta() { JAVA_HOME=$JAVA_HOME bin/tornado-attention "$@"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
fail=0

if want correctness; then
echo "== correctness (seed $SEED)"
ta selftest --backend ptx-cuda --inference --seed "$SEED" > "$OUT/selftest-inference.log" 2>&1 || fail=1
tail -n 3 "$OUT/selftest-inference.log"
for args in "--context 3000 --ragged" "--context 3000 --ragged --page-size 16" "--context 700 --dim 64 --page-size 4" \
            "--context 20000 --page-size 16"; do
  dims=$SHAPE; [[ "$args" == *"--dim 64"* ]] && dims="--batch 8 --heads 32 --kv-heads 8"
  ta decode $dims $args --steps 8 --layers 2 --backend ptx-cuda --check --seed "$SEED" --json \
    > "$OUT/check-$(echo "$args" | tr -d ' -').log" 2>&1 || fail=1
  grep -h "^check" "$OUT/check-$(echo "$args" | tr -d ' -').log" | sed "s/^/[$args] /"
done

fi

if want prefill; then
echo "== prefill on device-resident tensors (whole Java call vs kernel)"
: > "$OUT/prefill.jsonl"
for shape in "--batch 4 --heads 16 --seq 2048 --dim 128" "--batch 4 --heads 16 --seq 2048 --dim 128 --causal" \
             "--batch 8 --heads 8 --seq 128 --dim 64"; do
  ta run $shape --backend ptx-cuda --check --warmup 10 --iters 50 --seed "$SEED" --json > "$OUT/prefill.log" 2>&1 || fail=1
  grep -h "device call\|^ .*x the kernel\|^check" "$OUT/prefill.log" | sed "s/^/[$shape] /"
  tail -n 1 "$OUT/prefill.log" >> "$OUT/prefill.jsonl"
done

fi

if want varlen; then
echo "== varlen prefill: prompts $PROMPTS packed (Hq=32, Hkv=8, D=128, causal per prompt)"
for page in 0 16; do
  ta prefill --heads 32 --kv-heads 8 --dim 128 --lengths "$PROMPTS" --page-size $page --backend ptx-cuda --check \
    --seed "$SEED" --json > "$OUT/varlen-$page.log" 2>&1 || fail=1
  grep -h "^call\|^device\|^check" "$OUT/varlen-$page.log" | sed "s/^/[page size $page] /"
done
python3 bench/varlen_baseline.py --heads 32 --kv-heads 8 --dim 128 --lengths "$PROMPTS" 2>&1 | tee "$OUT/varlen-torch.jsonl"
fi

if want decode; then
echo "== per-token decode, $LAYERS layers"
: > "$OUT/decode.jsonl"
for n in $CONTEXTS; do
  for variant in "" "--page-size 16" "--ragged" "--ragged --page-size 16"; do
    ta decode $SHAPE --context "$n" --layers "$LAYERS" --steps "$STEPS" $variant --backend ptx-cuda --seed "$SEED" --json \
      > "$OUT/decode-$n$(echo "$variant" | tr -d ' -').log" 2>&1 || fail=1
    tail -n 1 "$OUT/decode-$n$(echo "$variant" | tr -d ' -').log" | sed "s/^{/{\"variant\":\"${variant:-contiguous}\",/" >> "$OUT/decode.jsonl"
  done
  python3 bench/decode_baseline.py --batch 8 --heads 32 --kv-heads 8 --dim 128 --context "$n" --layers "$LAYERS" \
    --steps "$STEPS" >> "$OUT/decode.jsonl" 2> "$OUT/torch-$n.err" || fail=1
done

fi

[ -s "$OUT/decode.jsonl" ] && python3 - "$OUT/decode.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {(r["context"], r["backend"]): r for r in rows if r.get("backend", "").startswith("torch")}
print("\n| context | variant | step ms | kernels ms | step/kernels | vs SDPA-FLASH step | vs SDPA-CUDNN step | K/V TB/s (kernels) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if r.get("backend") != "ptx-cuda":
        continue
    f, c = torch.get((r["context"], "torch-sdpa-FLASH"), {}), torch.get((r["context"], "torch-sdpa-CUDNN"), {})
    ratio = lambda t: "%.3f" % (r["median_ms"] / t["median_ms"]) if t.get("median_ms") else "-"
    print("| %d | %s | %.4g | %.4g | %.3f | %s | %s | %.3g |" % (r["context"], r["variant"], r["median_ms"],
          r["kernel_median_ms"], r["median_ms"] / r["kernel_median_ms"], ratio(f), ratio(c), r["kernel_kv_tb_per_s"]))
for k, t in sorted(torch.items()):
    print("| %d | %s | %s ms per token (device %s ms) |" % (k[0], k[1], t.get("median_ms"), t.get("kernel_median_ms")))
PY
exit $fail
