#!/usr/bin/env bash
# Before/after on a GPU host: the correctness suite + random shapes on every GPU backend of this tree, then kernel
# times of BEFORE (an unpacked older build: bin/, src/target, src/cli/target, tornado-kernels/target) and of this tree, interleaved
# shape by shape in one run, with PyTorch SDPA (FLASH) on the same shapes for scale; then a decode token through the
# Java API (B=8, Hq=32, Hkv=8, D=128, DECODE_LAYERS layers) at each of DECODE_CONTEXTS, before and after, with
# PyTorch (index write + SDPA) doing the same. Needs the packed runtime (.gpu/gpu-bundle.tar.xz) and this tree's
# jars; prints the tables last. From the repository root:
#
#   BEFORE=/path/to/old/tree bench/ab-compare.sh     # BACKENDS=..., SHAPES="B,Hq,S,D[,c];...", RANDOM_SHAPES=50 (skip: none)
#                                                    # DECODE_CONTEXTS="32768" (empty: none), DECODE_BACKENDS=...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/ab}; mkdir -p "$OUT"
BACKENDS=${BACKENDS:-ptx-cuda,ptx-tornado,tornado-mma,tornado-simt}
SHAPES=${SHAPES:-16,8,512,64;16,8,512,64,c;4,16,2048,128;4,16,2048,128,c}
RANDOM_SHAPES=${RANDOM_SHAPES:-50}
SEED=${SEED:-$(date +%s)}
DECODE_CONTEXTS=${DECODE_CONTEXTS-32768}
DECODE_BACKENDS=${DECODE_BACKENDS:-ptx-cuda ptx-tornado}
DECODE_LAYERS=${DECODE_LAYERS:-8}
: "${BEFORE:?set BEFORE to the tree of the older build}"
if [ -z "${TORNADOVM_HOME:-}" ]; then
  [ -d /opt/gpu-bundle ] || tar -xJf "${BUNDLE:-.gpu/gpu-bundle.tar.xz}" -C /opt || exit 2
  source /opt/gpu-bundle/env.sh
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

if [ "$RANDOM_SHAPES" != skip ]; then
  echo "== selftest of $BACKENDS, $RANDOM_SHAPES random shapes, seed $SEED"
  for b in ${BACKENDS//,/ }; do
    bin/tornado-attention selftest --backend "$b" --random "$RANDOM_SHAPES" --seed "$SEED" --json > "$OUT/selftest-$b.log" 2>&1 &
  done
  wait
  for b in ${BACKENDS//,/ }; do echo "$b: $(grep -E '^[0-9]+ passed' "$OUT/selftest-$b.log" | tail -n 1)"; grep -E '^FAIL' "$OUT/selftest-$b.log" | head -n 5; done
fi

echo "== kernel times, before and after"
: > "$OUT/times.jsonl"
for spec in ${SHAPES//;/ }; do
  IFS=, read -r B H S D C <<< "$spec"
  args="--batch $B --heads $H --seq $S --dim $D ${C:+--causal} --warmup 5 --iters 20 --seed $SEED --json"
  for b in ${BACKENDS//,/ }; do
    [ "$b" = tornado-simt ] && [ "$S" -gt 512 ] && continue   # minutes per call at 2048 tokens
    (cd "$BEFORE" && bin/tornado-attention run $args --backend "$b" --profile 2>&1) \
      | tail -n 1 | sed "s/^{/{\"build\":\"before\",\"spec\":\"$spec\",/" >> "$OUT/times.jsonl"
    bin/tornado-attention run $args --backend "$b" --profile 2>&1 \
      | tail -n 1 | sed "s/^{/{\"build\":\"after\",\"spec\":\"$spec\",/" >> "$OUT/times.jsonl"
  done
done
python3 - "$OUT/times.jsonl" "$SHAPES" <<'PY'
import json, sys
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def sdpa(spec):
    b, h, s, d, *c = spec.split(",")
    b, h, s, d = int(b), int(h), int(s), int(d)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(5): F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(50): F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
        en.record(); en.synchronize()
    return st.elapsed_time(en) / 50
flash = {spec: sdpa(spec) for spec in sys.argv[2].split(";")}
by = {}
for r in rows:
    by[(r["spec"], r.get("backend"), r["build"])] = r.get("kernel_median_ms")
print("\n| shape | backend | kernel ms before | after | after/before | SDPA-FLASH ms |")
print("|---|---|---|---|---|---|")
for (spec, backend, build), ms in sorted(by.items()):
    if build != "after": continue
    before = by.get((spec, backend, "before"))
    ratio = "%.3f" % (ms / before) if ms and before else "-"
    print("| %s | %s | %s | %s | %s | %.4f |" % (spec, backend, before, ms, ratio, flash[spec]))
PY

[ -n "$DECODE_CONTEXTS" ] || exit 0
echo "== decode token, before and after (contexts: $DECODE_CONTEXTS)"
: > "$OUT/decode.jsonl"
shape="--batch 8 --heads 32 --kv-heads 8 --dim 128 --layers $DECODE_LAYERS --steps 100 --warmup 300 --seed $SEED --json"
for n in $DECODE_CONTEXTS; do
  for b in $DECODE_BACKENDS; do
    # ptx-cuda runs without TornadoVM (as its users do); the TornadoVM hosts with CUDA graphs and 4 lanes.
    if [ "$b" = ptx-cuda ]; then env=(TORNADOVM_HOME=); mode=""; else env=(); mode="--cuda-graph --lanes 4"; fi
    for round in 1 2; do   # interleaved twice: before, after, before, after
      for build in before after; do
        dir=$PWD; [ "$build" = before ] && dir=$BEFORE
        (cd "$dir" && env "${env[@]}" timeout 300 bin/tornado-attention decode $shape --context "$n" --backend "$b" $mode 2>&1) \
          | tail -n 1 | sed "s/^{/{\"build\":\"$build\",\"round\":$round,/" >> "$OUT/decode.jsonl"
      done
    done
  done
  python3 bench/decode_baseline.py --batch 8 --heads 32 --kv-heads 8 --dim 128 --context "$n" --layers "$DECODE_LAYERS" \
    --steps 100 --warmup 300 --backends FLASH >> "$OUT/decode.jsonl" 2> "$OUT/torch-decode-$n.err"
done
python3 - "$OUT/decode.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
step = lambda r: r.get("median_ms", r.get("step_median_ms"))   # the older build's key: step_median_ms
print("\n| context | backend | step ms before (2 runs) | after (2 runs) | after/before | PyTorch step ms | after/PyTorch |")
print("|---|---|---|---|---|---|---|")
torch = {r["context"]: step(r) for r in rows if str(r.get("backend", "")).startswith("torch")}
for n in sorted({r["context"] for r in rows if "build" in r}):
    for b in dict.fromkeys(r["backend"] for r in rows if "build" in r and r["context"] == n):
        t = {k: [step(r) for r in rows if r.get("build") == k and r["backend"] == b and r["context"] == n and step(r)]
             for k in ("before", "after")}
        if not t["before"] or not t["after"]:
            print("| %d | %s | %s | %s | - | - | - |" % (n, b, t["before"], t["after"])); continue
        mb, ma = statistics.median(t["before"]), statistics.median(t["after"])
        tt = torch.get(n)
        print("| %d | %s | %s | %s | %.3f | %s | %s |" % (n, b, t["before"], t["after"], ma / mb, tt, "%.3f" % (ma / tt) if tt else "-"))
PY
