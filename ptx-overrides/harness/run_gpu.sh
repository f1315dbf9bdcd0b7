#!/usr/bin/env bash
# One device call: GPU facts, SASS of the shipped PTX (background), then check_and_time.py.
# Run from the repository root:  bash ptx-overrides/harness/run_gpu.sh [harness args]
# (--tuning: the candidates of ptx/flash_fwd_tuning.ptx only, --head-dims to narrow them, see check_and_time.py)
set -uo pipefail
OUT="${OUT:-./out}"; mkdir -p "$OUT"; export OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv | tee "$OUT/gpu.txt"
(
  for f in flash_fwd flash_decode flash_fwd_tuning; do
    gzip -dc "ptx-overrides/ptx/$f.ptx.gz" > "/tmp/$f.ptx" &&
      ptxas -arch=sm_90 -o "/tmp/$f.cubin" "/tmp/$f.ptx" && cuobjdump -sass "/tmp/$f.cubin" > "/tmp/$f.sass"
  done
  {
    for f in /tmp/flash_fwd.sass /tmp/flash_decode.sass /tmp/flash_fwd_tuning.sass; do
      awk '/Function :/ {if (fn) printf "%s HMMA=%d LDSM=%d LDGSTS=%d STG128=%d LDL=%d STL=%d BAR=%d MUFU.EX2=%d\n", fn, h, l, c, s, ll, sl, b, e; fn=$3; h=l=c=s=ll=sl=b=e=0}
           /HMMA/ {h++} /LDSM/ {l++} /LDGSTS/ {c++} /STG.E.128/ {s++} /LDL/ {ll++} /STL/ {sl++} /BAR.SYNC/ {b++} /MUFU.EX2/ {e++}
           END {printf "%s HMMA=%d LDSM=%d LDGSTS=%d STG128=%d LDL=%d STL=%d BAR=%d MUFU.EX2=%d\n", fn, h, l, c, s, ll, sl, b, e}' "$f"
    done
  } > "$OUT/sass_summary.txt"
  grep -A400 "Function : flash_fwd_d128_m64n64w4s1$" /tmp/flash_fwd.sass | head -2500 > "$OUT/sass_d128_excerpt.txt" || true
) > "$OUT/sass.log" 2>&1 &
sass_pid=$!
PYTHONUNBUFFERED=1 python3 ptx-overrides/harness/check_and_time.py "$@" 2>&1 | tee "$OUT/harness_stdout.txt"
rc=${PIPESTATUS[0]}
wait $sass_pid
cat "$OUT/sass_summary.txt" 2>/dev/null
# the tuning table last again (the SASS summary above is long)
[[ " $* " == *" --tuning "* && -f "$OUT/tuning.md" ]] && { echo; cat "$OUT/tuning.md"; }
exit $rc
