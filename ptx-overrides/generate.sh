#!/usr/bin/env bash
# Regenerates the PTX from src/*.cu (one ptx/<name>.ptx per src/<name>.cu) and the launch table
# ptx/manifest.tsv, and checks every entry with ptxas for sm_89 (L4) and sm_90 (H100/H200).
# First generate_kernels.py writes src/generated/ from its kernel table: each module's entry
# instantiations and src/generated/modules.tsv (per module: nvcc -arch, arch family, bench-only).
#
#   ./generate.sh           regenerate ptx/*.ptx and ptx/manifest.tsv in place, then check
#   ./generate.sh --check   regenerate into a temp dir; fail if the committed PTX or manifest is
#                           stale, else check the committed PTX (what CI runs; needs no GPU)
#
# The manifest has one row per entry of every PTX file: its kind, ABI, tile configuration and
# launch selection, printed by each src/*.cu compiled once more for the host with -DFLASH_MANIFEST
# (src/flash_manifest.cuh: the rows come from the kernel traits, not from entry names), plus
# registers and static shared memory from ptxas.  Columns: ptx-overrides/README.md.
#
# Fails (exit 1) on: an nvcc or ptxas error, any spill or stack frame in a shipped PTX file,
# static shared memory over 48 KB, a TornadoVM entry without static shared memory in a module that
# declares dynamic shared memory (TornadoVM launches with 0 dynamic bytes), an entry
# without a manifest row (or a row without an entry), stale or missing PTX or manifest.
# Benchmark-only modules (bench_only in modules.tsv: the ablation variants, which keep the launch bounds of
# the kernel they are compared with, and the D=128 tuning candidates, some of which sit at 255
# registers; either may spill a few bytes) are reported but not failed on spills; STRICT_BENCH=1
# fails on those too.
# Needs only the CUDA toolkit (nvcc, ptxas), python3 and bash/awk/cmp.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src"
PTX="$HERE/ptx"
NVCC="${NVCC:-nvcc}"
PTXAS="${PTXAS:-ptxas}"
# compute_80 PTX: one file JIT-compiles on sm_80, sm_89 (L4) and sm_90 (H100/H200).
# No -G / -lineinfo: those embed absolute source paths; the output is then byte-for-byte
# reproducible for a given nvcc (the header names the compiler build).
NVCC_FLAGS=(-ptx -O3 -std=c++17)  # -arch per module (modules.tsv)
# The manifest printers: only their host side runs, so the device side is compiled unoptimised.
MANIFEST_FLAGS=(-std=c++17 -DFLASH_MANIFEST -Xcicc -O0)  # + -arch/-code per module
ARCHES=(sm_89 sm_90)
STATIC_SMEM_LIMIT=49152
STRICT_BENCH="${STRICT_BENCH:-0}"
MANIFEST_COLUMNS=(module entry kind dtype head_dim causal layout features abi header_bytes arch br bc warps threads
                  stages q_in_smem opt smem_dynamic smem_static regs_sm_89 regs_sm_90)
MANIFEST_HEADER="$(IFS=$'\t'; echo "${MANIFEST_COLUMNS[*]}")"

mode=generate
if [[ "${1:-}" == "--check" ]]; then mode=check; elif [[ -n "${1:-}" ]]; then
  echo "usage: $0 [--check]" >&2; exit 2
fi

command -v "$NVCC" >/dev/null || { echo "error: nvcc not found (set NVCC)" >&2; exit 1; }
command -v "$PTXAS" >/dev/null || { echo "error: ptxas not found (set PTXAS)" >&2; exit 1; }

# ---- 0. the kernel table -> src/generated/
if [[ "$mode" == generate ]]; then
  python3 "$HERE/generate_kernels.py" || { echo "FAIL: generate_kernels.py" >&2; exit 1; }
elif ! python3 "$HERE/generate_kernels.py" --check; then
  echo; echo "generate.sh: FAILED"; exit 1
fi
declare -A NVCC_ARCH BENCH
modules=()
while IFS=$'\t' read -r m arch family bench; do
  [[ "$m" == module ]] && continue
  modules+=("$m"); NVCC_ARCH[$m]="$arch"; BENCH[$m]="$bench"
done < "$SRC/generated/modules.tsv"
for cu in "$SRC"/*.cu; do
  n="$(basename "$cu" .cu)"
  [[ -n "${NVCC_ARCH[$n]:-}" ]] || { echo "FAIL: src/$n.cu is not a module of generate_kernels.py's table" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

# ---- 1. generate (always into the temp dir first; relative paths keep outputs path-free).
# The manifest printers build in the background meanwhile.
mkdir -p "$tmp/ptx" "$tmp/manifest"
sources=()
printers=()
for name in "${modules[@]}"; do
  sources+=("$name")
  printf '#include "flash_manifest.cuh"\n#include "%s.cu"\n#ifndef __CUDA_ARCH__\nint main() { flash::manifest::print(); }\n#endif\n' \
    "$name" > "$tmp/manifest/print_$name.cu"
  (cd "$SRC" && "$NVCC" "${MANIFEST_FLAGS[@]}" -arch="${NVCC_ARCH[$name]}" -code="${NVCC_ARCH[$name]}" -I. -o "$tmp/manifest/print_$name" "$tmp/manifest/print_$name.cu" \
     > "$tmp/manifest/$name.log" 2>&1) &
  printers+=($!)
done
for name in "${sources[@]}"; do
  if ! (cd "$SRC" && "$NVCC" "${NVCC_FLAGS[@]}" -arch="${NVCC_ARCH[$name]}" -o "$tmp/ptx/$name.ptx" "$name.cu"); then
    echo "FAIL: nvcc $name.cu" >&2; exit 1
  fi
done
for i in "${!sources[@]}"; do
  if ! wait "${printers[$i]}"; then
    cat "$tmp/manifest/${sources[$i]}.log" >&2; echo "FAIL: nvcc -DFLASH_MANIFEST ${sources[$i]}.cu" >&2; exit 1
  fi
done

if [[ "$mode" == generate ]]; then
  mkdir -p "$PTX"
  for name in "${sources[@]}"; do cp "$tmp/ptx/$name.ptx" "$PTX/$name.ptx"; done
  for f in "$PTX"/*.ptx; do
    n="$(basename "$f" .ptx)"
    [[ -f "$SRC/$n.cu" ]] || { echo "removing $f (no src/$n.cu)"; rm -f "$f"; }
  done
  echo "generated: ${sources[*]/%/.ptx}"
else
  for name in "${sources[@]}"; do
    if [[ ! -f "$PTX/$name.ptx" ]]; then
      echo "STALE: ptx/$name.ptx missing (run ./generate.sh)"; fail=1
    elif ! cmp -s "$tmp/ptx/$name.ptx" "$PTX/$name.ptx"; then
      echo "STALE: ptx/$name.ptx differs from what src/$name.cu generates (run ./generate.sh)"; fail=1
    fi
  done
  for f in "$PTX"/*.ptx; do
    n="$(basename "$f" .ptx)"
    [[ -f "$SRC/$n.cu" ]] || { echo "STALE: ptx/$n.ptx has no src/$n.cu"; fail=1; }
  done
  [[ $fail == 0 ]] && echo "fresh: committed PTX matches the sources"
fi

# ---- 2. ptxas resource check of the committed (or just generated) PTX; resources.tsv gets
# "module entry arch regs smem" for the manifest.
printf '\n%-48s %-6s %5s %7s %9s %6s\n' "entry" "arch" "regs" "smem" "spill s/l" "stack"
: > "$tmp/resources.tsv"
for name in "${sources[@]}"; do
  f="$PTX/$name.ptx"
  [[ -f "$f" ]] || continue
  for arch in "${ARCHES[@]}"; do
    if ! "$PTXAS" -arch="$arch" -v -o "$tmp/out.cubin" "$f" > "$tmp/ptxas.log" 2>&1; then
      cat "$tmp/ptxas.log"; echo "FAIL: ptxas -arch=$arch $name.ptx"; fail=1; continue
    fi
    bench=0
    [[ "${BENCH[$name]}" == 1 && "$STRICT_BENCH" != 1 ]] && bench=1
    dyn="$(grep -c '^\.extern \.shared' "$f" || true)"
    if ! awk -v arch="$arch" -v limit="$STATIC_SMEM_LIMIT" -v bench="$bench" -v module="$name.ptx" -v dyn="$dyn" \
        -v resources="$tmp/resources.tsv" '
        /Compiling entry function/ { match($0, /'\''[A-Za-z0-9_]+'\''/); name = substr($0, RSTART + 1, RLENGTH - 2); next }
        /bytes stack frame/ { stack = $1; sst = $5; sld = $9; next }
        /Used [0-9]+ registers/ {
          regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
          smem = 0
          if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
          flag = ""
          if (sst + 0 > 0 || sld + 0 > 0 || stack + 0 > 0) {
            if (bench) flag = flag " spill(bench-only, allowed)"; else { flag = flag " SPILL"; bad = 1 }
          }
          if (smem + 0 > limit) { flag = flag " SMEM>48KB"; bad = 1 }
          if (name ~ /_tornado(_h128)?$/ && smem + 0 == 0 && dyn + 0 > 0) { flag = flag " TORNADO-NEEDS-STATIC-SMEM"; bad = 1 }
          printf "%-48s %-6s %5s %7s %4s/%-4s %6s%s\n", name, arch, regs, smem, sst, sld, stack, flag
          printf "%s\t%s\t%s\t%s\t%s\n", module, name, arch, regs, smem >> resources
        }
        END { exit bad }' "$tmp/ptxas.log"; then
      fail=1
    fi
  done
done

# ---- 3. the manifest: each module's rows (in source order) joined with ptxas's numbers.
{
  echo "$MANIFEST_HEADER"
  for name in "${sources[@]}"; do
    "$tmp/manifest/print_$name" | awk -v module="$name.ptx" '{ print module "\t" $0 }'
  done
} > "$tmp/manifest/rows.tsv"
if ! awk -F '\t' -v OFS='\t' -v first="${ARCHES[0]}" -v second="${ARCHES[1]}" '
    FNR == 1 && FILENAME != ARGV[1] { header = $0; next }
    FILENAME == ARGV[1] {
      key = $1 SUBSEP $2; regs[key, $3] = $4; if ($3 == first) smem[key] = $5
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      next
    }
    {
      key = $1 SUBSEP $2
      if (key in rowed) { print "manifest: two rows for " $2 > "/dev/stderr"; bad = 1; next }
      rowed[key] = 1
      if (!(key in seen)) { print "manifest: " $2 " (" $1 ") has a row but no entry in the PTX" > "/dev/stderr"; bad = 1; next }
      rows[++m] = $0 OFS smem[key] OFS regs[key, first] OFS regs[key, second]
    }
    END {
      for (i = 1; i <= n; i++) if (!(order[i] in rowed)) {
        split(order[i], k, SUBSEP)
        print "manifest: entry " k[2] " of ptx/" k[1] " has no row: give its entry macro a FLASH_MANIFEST_ROW (src/flash_manifest.cuh)" > "/dev/stderr"
        bad = 1
      }
      print header
      for (i = 1; i <= m; i++) print rows[i]
      exit bad
    }' "$tmp/resources.tsv" "$tmp/manifest/rows.tsv" > "$tmp/manifest.tsv"; then
  fail=1
fi
if [[ "$mode" == generate ]]; then
  cp "$tmp/manifest.tsv" "$PTX/manifest.tsv"
  echo; echo "generated: ptx/manifest.tsv ($(($(wc -l < "$PTX/manifest.tsv") - 1)) entries)"
elif [[ ! -f "$PTX/manifest.tsv" ]] || ! cmp -s "$tmp/manifest.tsv" "$PTX/manifest.tsv"; then
  echo; echo "STALE: ptx/manifest.tsv differs from what the sources and ptxas give (run ./generate.sh)"
  diff "$PTX/manifest.tsv" "$tmp/manifest.tsv" 2>/dev/null | head -20 || true
  fail=1
else
  echo; echo "fresh: ptx/manifest.tsv matches the sources"
fi

if [[ $fail != 0 ]]; then echo; echo "generate.sh: FAILED"; exit 1; fi
echo; echo "generate.sh: OK"
