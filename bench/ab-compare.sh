#!/usr/bin/env bash
# Before/after on a GPU host: the correctness suite + random shapes on every GPU backend of this tree, then kernel
# times of BEFORE (an unpacked older build: bin/, src/target, tornado-kernels/target) and of this tree, interleaved
# shape by shape in one run, with PyTorch SDPA (FLASH) on the same shapes for scale. Needs the packed runtime
# (.gpu/gpu-bundle.tar.xz) and this tree's jars; prints a table last. From the repository root:
#
#   BEFORE=/path/to/old/tree bench/ab-compare.sh     # BACKENDS=..., SHAPES="B,Hq,S,D[,c];...", RANDOM_SHAPES=50
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/ab}; mkdir -p "$OUT"
BACKENDS=${BACKENDS:-ptx-cuda,ptx-tornado,tornado-mma,tornado-simt}
SHAPES=${SHAPES:-16,8,512,64;16,8,512,64,c;4,16,2048,128;4,16,2048,128,c}
RANDOM_SHAPES=${RANDOM_SHAPES:-50}
SEED=${SEED:-$(date +%s)}
: "${BEFORE:?set BEFORE to the tree of the older build}"
if [ -z "${TORNADOVM_HOME:-}" ]; then
  [ -d /opt/gpu-bundle ] || tar -xJf "${BUNDLE:-.gpu/gpu-bundle.tar.xz}" -C /opt || exit 2
  source /opt/gpu-bundle/env.sh
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== selftest of $BACKENDS, $RANDOM_SHAPES random shapes, seed $SEED"
for b in ${BACKENDS//,/ }; do
  bin/tornado-attention selftest --backend "$b" --random "$RANDOM_SHAPES" --seed "$SEED" --json > "$OUT/selftest-$b.log" 2>&1 &
done
wait
for b in ${BACKENDS//,/ }; do echo "$b: $(grep -E '^[0-9]+ passed' "$OUT/selftest-$b.log" | tail -n 1)"; grep -E '^FAIL' "$OUT/selftest-$b.log" | head -n 5; done

echo "== kernel times, before and after"
: > "$OUT/times.jsonl"
for spec in ${SHAPES//;/ }; do
  IFS=, read -r B H S D C <<< "$spec"
  args="--batch $B --heads $H --seq $S --dim $D ${C:+--causal} --warmup 5 --iters 20 --seed $SEED --json"
  for b in ${BACKENDS//,/ }; do
    [ "$b" = tornado-simt ] && [ "$S" -gt 512 ] && continue   # minutes per call at 2048 tokens
    (cd "$BEFORE" && JAVA_OPTS=-Dtornado.attention.profile=true bin/tornado-attention run $args --backend "$b" 2>&1) \
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
