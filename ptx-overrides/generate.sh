#!/usr/bin/env bash
# Regenerates the PTX from src/*.cu (one ptx/<module>.ptx.gz per src/<module>.cu: the PTX text,
# gzip -n -9, so the file is the same bytes for the same text and gzip), the launch table
# ptx/manifest.tsv and the stamps ptx/stamps.tsv, and checks every entry with ptxas for sm_89
# (L4) and sm_90 (H100/H200).  The manifest's module column names the PTX text (<module>.ptx);
# readers open <module>.ptx.gz (Java: KernelManifest.ptx; Python: harness/manifest.py).  First generate_kernels.py writes src/generated/ from its kernel
# table: each module's entry instantiations and src/generated/modules.tsv (per module: nvcc
# -arch, arch family, bench-only).
#
#   ./generate.sh                   regenerate what is stale, in place, and check it
#   ./generate.sh --check           fail if anything committed is stale (what CI runs; no GPU)
#   ./generate.sh [--check] --full  (or FULL=1) every module, whatever the stamps say
#
# Stamps: ptx/stamps.tsv has, per module, the sha256 of its inputs (the .cu, every header it
# includes, its generated .inc with the table's rows, its modules.tsv row, this script's flags,
# the nvcc and ptxas version lines) and of its outputs (the uncompressed PTX text, its manifest
# rows, the ptxas resource lines).  A module whose input hash matches its stamp is not compiled
# again: --check then only verifies that the committed PTX (decompressed) and manifest rows hash
# to the stamp's values.  Any
# other module is compiled (nvcc, the manifest printer, ptxas per architecture; independent jobs
# run in parallel, nproc at a time) and compared with what is committed; --check then fails if
# the outputs differ or if only the stamp does (run ./generate.sh to refresh it).
#
# The manifest has one row per entry of every PTX file: its kind, element type, head dim, causal
# selection, K/V layout, ABI, architecture and tile, printed by each src/*.cu compiled once more
# for the host with -DFLASH_MANIFEST (src/flash_manifest.cuh: the rows come from the kernel
# traits, not from entry names), plus registers and static shared memory from ptxas.  Columns:
# ptx-overrides/README.md.
#
# Fails (exit 1) on: an nvcc or ptxas error, any spill or stack frame in a shipped PTX file,
# static shared memory over 48 KB, a TornadoVM entry without static shared memory in a module that
# declares dynamic shared memory (TornadoVM launches with 0 dynamic bytes), an entry without a
# manifest row (or a row without an entry), stale or missing generated files, PTX, manifest or
# stamps.  Benchmark-only modules (bench_only in modules.tsv: the ablation variants, which keep the
# launch bounds of the kernel they are compared with, and the tuning candidates, some of
# which sit at 255 registers; either may spill a few bytes) are reported but not failed on spills;
# STRICT_BENCH=1 ptxas-checks them again and fails on those too.  Outputs are byte-for-byte
# reproducible for a given nvcc (the .gz for a given gzip too; --check compares the decompressed
# text, so another gzip's bytes pass).  Needs the CUDA toolkit (nvcc, ptxas), python3, bash, awk,
# gzip, sha256sum.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src"
PTX="$HERE/ptx"
NVCC="${NVCC:-nvcc}"
PTXAS="${PTXAS:-ptxas}"
# No -G / -lineinfo: those embed absolute source paths.  -arch per module (modules.tsv).
NVCC_FLAGS=(-ptx -O3 -std=c++17)
# The manifest printers: only their host side runs, so the device side is compiled unoptimised.
MANIFEST_FLAGS=(-std=c++17 -DFLASH_MANIFEST -Xcicc -O0)
PRINTER_SOURCE='#include "flash_manifest.cuh"\n#include "%s.cu"\n#ifndef __CUDA_ARCH__\nint main() { flash::manifest::print(); }\n#endif\n'
ARCHES=(sm_89 sm_90)
STATIC_SMEM_LIMIT=49152
STRICT_BENCH="${STRICT_BENCH:-0}"
MANIFEST_COLUMNS=(module entry kind dtype head_dim causal layout features abi header_bytes arch br bc warps threads
                  stages q_in_smem opt smem_dynamic smem_static regs_sm_89 regs_sm_90)
MANIFEST_HEADER="$(IFS=$'\t'; echo "${MANIFEST_COLUMNS[*]}")"
STAMPS_HEADER="$(printf 'module\tinputs\tptx\tmanifest\tresources')"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

mode=generate
full="${FULL:-0}"
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --full) full=1 ;;
    *) echo "usage: $0 [--check] [--full]" >&2; exit 2 ;;
  esac
done

command -v "$NVCC" >/dev/null || { echo "error: nvcc not found (set NVCC)" >&2; exit 1; }
command -v "$PTXAS" >/dev/null || { echo "error: ptxas not found (set PTXAS)" >&2; exit 1; }

# ---- 0. the kernel table -> src/generated/
if [[ "$mode" == generate ]]; then
  python3 "$HERE/generate_kernels.py" || { echo "FAIL: generate_kernels.py" >&2; exit 1; }
elif ! python3 "$HERE/generate_kernels.py" --check; then
  echo; echo "generate.sh: FAILED"; exit 1
fi
declare -A NVCC_ARCH BENCH MODROW
modules=()
while IFS=$'\t' read -r m arch family bench; do
  [[ "$m" == module ]] && continue
  modules+=("$m"); NVCC_ARCH[$m]="$arch"; BENCH[$m]="$bench"; MODROW[$m]="$m $arch $family $bench"
done < "$SRC/generated/modules.tsv"
for cu in "$SRC"/*.cu; do
  n="$(basename "$cu" .cu)"
  [[ -n "${NVCC_ARCH[$n]:-}" ]] || { echo "FAIL: src/$n.cu is not a module of generate_kernels.py's table" >&2; exit 1; }
done
for m in "${modules[@]}"; do
  [[ -f "$SRC/$m.cu" ]] || { echo "FAIL: module $m of generate_kernels.py's table has no src/$m.cu" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ptx" "$tmp/manifest" "$tmp/log" "$tmp/rc"
fail=0
sha() { sha256sum | cut -d' ' -f1; }
# The committed PTX text of module $1 (ptx/$1.ptx.gz decompressed); fails if absent or corrupt.
committed_ptx() { gzip -dc "$PTX/$1.ptx.gz" 2>/dev/null; }

# ---- 1. stamps: what each module's outputs are made from.
# Everything in this script that shapes an output or a verdict, and the compilers.
flags_text="$(printf '%s\n' "nvcc ${NVCC_FLAGS[*]}" "manifest ${MANIFEST_FLAGS[*]}" "printer $PRINTER_SOURCE" \
  "arches ${ARCHES[*]}" "smem $STATIC_SMEM_LIMIT" "columns $MANIFEST_HEADER" \
  "nvcc $("$NVCC" --version | tail -n 1)" "ptxas $("$PTXAS" --version | tail -n 1)")"
# The local headers a file includes, transitively (#include "..." relative to the includer;
# conditional includes count too, which only ever adds inputs).
includes_of() {
  local -A seen=()
  local queue=("$1") f inc dir
  while [[ ${#queue[@]} -gt 0 ]]; do
    f="${queue[0]}"; queue=("${queue[@]:1}")
    dir="$(dirname "$f")"
    while IFS= read -r inc; do
      inc="$(realpath -m "$dir/$inc")"
      [[ -f "$inc" && -z "${seen[$inc]:-}" ]] || continue
      seen[$inc]=1; queue+=("$inc")
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done
  printf '%s\n' "${!seen[@]}" | sort
}
declare -A INPUTS
for m in "${modules[@]}"; do
  INPUTS[$m]="$({
    echo "$flags_text"; echo "module ${MODROW[$m]}"
    for f in "$SRC/$m.cu" $(includes_of "$SRC/$m.cu"); do
      echo "${f#"$HERE"/} $(sha < "$f")"
    done
  } | sha)"
done

# The committed stamps and each module's committed manifest rows.
declare -A OLD_INPUTS OLD_PTX OLD_ROWS OLD_RES
if [[ -f "$PTX/stamps.tsv" ]]; then
  while IFS=$'\t' read -r m i p r s; do
    [[ "$m" == module ]] && continue
    OLD_INPUTS[$m]="$i"; OLD_PTX[$m]="$p"; OLD_ROWS[$m]="$r"; OLD_RES[$m]="$s"
  done < "$PTX/stamps.tsv"
fi
manifest_header_ok=0
if [[ -f "$PTX/manifest.tsv" ]] && [[ "$(head -n 1 "$PTX/manifest.tsv")" == "$MANIFEST_HEADER" ]]; then
  manifest_header_ok=1
fi
committed_rows() {  # the committed manifest's rows of module $1
  [[ $manifest_header_ok == 1 ]] || return 0
  awk -F '\t' -v module="$1.ptx" 'NR > 1 && $1 == module' "$PTX/manifest.tsv"
}

# Which modules to build.  A module whose stamp matches its inputs is taken as committed, once its
# committed PTX and manifest rows are the ones the stamp names.
build=()
declare -A BUILD
for m in "${modules[@]}"; do
  why=""
  if [[ $full == 1 ]]; then why="--full"
  elif [[ -z "${OLD_INPUTS[$m]:-}" ]]; then why="no stamp"
  elif [[ "${OLD_INPUTS[$m]}" != "${INPUTS[$m]}" ]]; then why="inputs changed"
  elif [[ ! -f "$PTX/$m.ptx.gz" ]] || [[ "$(committed_ptx "$m" | sha)" != "${OLD_PTX[$m]}" ]]; then
    why="ptx/$m.ptx.gz is not the stamped one"
  elif [[ "$(committed_rows "$m" | sha)" != "${OLD_ROWS[$m]}" ]]; then
    why="its manifest rows are not the stamped ones"
  elif [[ "${BENCH[$m]}" == 1 && "$STRICT_BENCH" == 1 ]]; then why="STRICT_BENCH=1"
  fi
  if [[ -n "$why" ]]; then
    build+=("$m"); BUILD[$m]=1
    echo "build $m ($why)"
    [[ "$mode" == check && "$why" == *"stamped"* ]] && { echo "STALE: $m: $why (run ./generate.sh)"; fail=1; }
  else
    echo "fresh $m (stamp matches)"
  fi
done

# ---- 2. compile and ptxas the modules to build: independent jobs, $JOBS at a time, largest first.
# Relative paths keep the outputs path-free.  --check: ptxas reads the committed PTX (decompressed
# into the temporary directory first, so it need not wait for nvcc); a regenerate: the new one.
run_job() {  # kind module [arch]
  local kind="$1" m="$2" arch="${3:-}" rc=0
  case "$kind" in
    nvcc) (cd "$SRC" && "$NVCC" "${NVCC_FLAGS[@]}" -arch="${NVCC_ARCH[$m]}" -o "$tmp/ptx/$m.ptx" "$m.cu") \
            > "$tmp/log/nvcc.$m" 2>&1 || rc=$? ;;
    printer)
      printf "$PRINTER_SOURCE" "$m" > "$tmp/manifest/print_$m.cu"
      (cd "$SRC" && "$NVCC" "${MANIFEST_FLAGS[@]}" -arch="${NVCC_ARCH[$m]}" -code="${NVCC_ARCH[$m]}" -I. \
         -o "$tmp/manifest/print_$m" "$tmp/manifest/print_$m.cu" && "$tmp/manifest/print_$m" > "$tmp/manifest/$m.rows") \
        > "$tmp/log/printer.$m" 2>&1 || rc=$? ;;
    ptxas)
      local f="$tmp/committed/$m.ptx"
      [[ "$mode" == generate ]] && f="$tmp/ptx/$m.ptx"
      if [[ -f "$f" ]]; then
        "$PTXAS" -arch="$arch" -v -o "$tmp/$m.$arch.cubin" "$f" > "$tmp/log/ptxas.$m.$arch" 2>&1 || rc=$?
        rm -f "$tmp/$m.$arch.cubin"
      else
        echo "no $f" > "$tmp/log/ptxas.$m.$arch"; rc=1
      fi ;;
  esac
  echo "$rc" > "$tmp/rc/$kind.$m${arch:+.$arch}"
}
run_pool() {  # job specs "kind module [arch]", run $JOBS at a time
  local spec
  for spec in "$@"; do
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
    run_job $spec &
  done
  wait
}
if [[ ${#build[@]} -gt 0 ]]; then
  # Largest module first: its nvcc and ptxas runs are the long poles.
  mapfile -t build < <(for m in "${build[@]}"; do
    echo "$(stat -c %s "$PTX/$m.ptx.gz" 2>/dev/null || echo 0) $m"; done | sort -rn | cut -d' ' -f2)
  mkdir -p "$tmp/committed"
  if [[ "$mode" == check ]]; then
    for m in "${build[@]}"; do committed_ptx "$m" > "$tmp/committed/$m.ptx" || rm -f "$tmp/committed/$m.ptx"; done
  fi
  compile=() check=() all=()
  for m in "${build[@]}"; do
    compile+=("nvcc $m" "printer $m")
    all+=("nvcc $m")
    for arch in "${ARCHES[@]}"; do check+=("ptxas $m $arch"); all+=("ptxas $m $arch"); done
    all+=("printer $m")
  done
  echo "compiling: ${build[*]} ($JOBS jobs at a time)"
  if [[ "$mode" == check ]]; then
    run_pool "${all[@]}"
  else
    run_pool "${compile[@]}"
    run_pool "${check[@]}"
  fi
  for m in "${build[@]}"; do
    for kind in nvcc printer; do
      if [[ "$(cat "$tmp/rc/$kind.$m")" != 0 ]]; then
        cat "$tmp/log/$kind.$m" >&2
        echo "FAIL: $kind $m.cu" >&2; exit 1
      fi
    done
  done
fi

# ---- 3. the built modules' PTX against what is committed (or in place of it).
# A .gz is rewritten only when its text changed (another gzip's bytes of the same text stay).
if [[ "$mode" == generate ]]; then
  mkdir -p "$PTX"
  for m in "${build[@]}"; do
    if ! committed_ptx "$m" | cmp -s - "$tmp/ptx/$m.ptx"; then
      gzip -n -9 -c "$tmp/ptx/$m.ptx" > "$PTX/$m.ptx.gz"
    fi
  done
  shopt -s nullglob
  for f in "$PTX"/*.ptx "$PTX"/*.ptx.gz; do
    n="$(basename "$(basename "$f" .gz)" .ptx)"
    [[ "$f" == *.gz && -n "${NVCC_ARCH[$n]:-}" ]] || { echo "removing $f (no module $n, or not compressed)"; rm -f "$f"; }
  done
  shopt -u nullglob
  [[ ${#build[@]} -gt 0 ]] && echo "generated: ${build[*]/%/.ptx.gz}"
else
  for m in "${build[@]}"; do
    if [[ ! -f "$PTX/$m.ptx.gz" ]]; then
      echo "STALE: ptx/$m.ptx.gz missing (run ./generate.sh)"; fail=1
    elif ! committed_ptx "$m" | cmp -s - "$tmp/ptx/$m.ptx"; then
      echo "STALE: ptx/$m.ptx.gz differs from what src/$m.cu generates (run ./generate.sh)"; fail=1
    else
      echo "fresh: ptx/$m.ptx.gz matches the sources"
    fi
  done
  shopt -s nullglob
  for f in "$PTX"/*.ptx "$PTX"/*.ptx.gz; do
    n="$(basename "$(basename "$f" .gz)" .ptx)"
    [[ "$f" == *.gz && -n "${NVCC_ARCH[$n]:-}" ]] || { echo "STALE: ptx/$(basename "$f") is no compressed module of the table"; fail=1; }
  done
  shopt -u nullglob
fi

# ---- 4. ptxas resource check of the built modules; resources.tsv gets "module entry arch regs smem".
if [[ ${#build[@]} -gt 0 ]]; then
  printf '\n%-48s %-6s %5s %7s %9s %6s\n' "entry" "arch" "regs" "smem" "spill s/l" "stack"
fi
declare -A RES_OK
for m in "${build[@]}"; do
  : > "$tmp/resources.$m.tsv"
  RES_OK[$m]=1
  f="$tmp/committed/$m.ptx"
  [[ "$mode" == generate ]] && f="$tmp/ptx/$m.ptx"
  [[ -f "$f" ]] || { RES_OK[$m]=0; fail=1; continue; }
  bench=0
  [[ "${BENCH[$m]}" == 1 && "$STRICT_BENCH" != 1 ]] && bench=1
  dyn="$(grep -c '^\.extern \.shared' "$f" || true)"
  for arch in "${ARCHES[@]}"; do
    if [[ "$(cat "$tmp/rc/ptxas.$m.$arch")" != 0 ]]; then
      cat "$tmp/log/ptxas.$m.$arch"; echo "FAIL: ptxas -arch=$arch $m.ptx"; fail=1; RES_OK[$m]=0; continue
    fi
    if ! awk -v arch="$arch" -v limit="$STATIC_SMEM_LIMIT" -v bench="$bench" -v module="$m.ptx" -v dyn="$dyn" \
        -v resources="$tmp/resources.$m.tsv" '
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
          printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", module, name, arch, regs, smem, sst, sld, stack >> resources
        }
        END { exit bad }' "$tmp/log/ptxas.$m.$arch"; then
      fail=1; RES_OK[$m]=0
    fi
  done
done

# ---- 5. the manifest: each module's rows (in source order) joined with ptxas's numbers; the rows
# of a module not built are the committed ones (their hash is the stamp's).
for m in "${modules[@]}"; do
  if [[ -n "${BUILD[$m]:-}" ]]; then
    if ! awk -F '\t' -v OFS='\t' -v module="$m.ptx" -v first="${ARCHES[0]}" -v second="${ARCHES[1]}" '
        FILENAME == ARGV[1] {
          key = $2; regs[key, $3] = $4; if ($3 == first) smem[key] = $5
          if (!(key in seen)) { seen[key] = 1; order[++n] = key }
          next
        }
        {
          key = $1
          if (key in rowed) { print "manifest: two rows for " key > "/dev/stderr"; bad = 1; next }
          rowed[key] = 1
          if (!(key in seen)) { print "manifest: " key " (" module ") has a row but no entry in the PTX" > "/dev/stderr"; bad = 1; next }
          print module, $0, smem[key], regs[key, first], regs[key, second]
        }
        END {
          for (i = 1; i <= n; i++) if (!(order[i] in rowed)) {
            print "manifest: entry " order[i] " of ptx/" module " has no row: give its entry macro a FLASH_MANIFEST_ROW (src/flash_manifest.cuh)" > "/dev/stderr"
            bad = 1
          }
          exit bad
        }' "$tmp/resources.$m.tsv" "$tmp/manifest/$m.rows" > "$tmp/manifest/$m.tsv"; then
      fail=1; RES_OK[$m]=0
    fi
  else
    committed_rows "$m" > "$tmp/manifest/$m.tsv"
  fi
done
{
  echo "$MANIFEST_HEADER"
  for m in "${modules[@]}"; do cat "$tmp/manifest/$m.tsv"; done
} > "$tmp/manifest.tsv"
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

# ---- 6. the stamps.  A module that failed a check gets no input hash, so it is built again next
# time (a regenerate still writes its PTX and rows, for a look).
{
  echo "$STAMPS_HEADER"
  for m in "${modules[@]}"; do
    if [[ -n "${BUILD[$m]:-}" ]]; then
      ptx_file="$tmp/ptx/$m.ptx"
      inputs="${INPUTS[$m]}"
      [[ "${RES_OK[$m]}" == 1 ]] || inputs="-"
      printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$inputs" "$(sha < "$ptx_file")" "$(sha < "$tmp/manifest/$m.tsv")" \
        "$(sha < "$tmp/resources.$m.tsv")"
    else
      printf '%s\t%s\t%s\t%s\t%s\n' "$m" "${OLD_INPUTS[$m]}" "${OLD_PTX[$m]}" "${OLD_ROWS[$m]}" "${OLD_RES[$m]}"
    fi
  done
} > "$tmp/stamps.tsv"
if [[ "$mode" == generate ]]; then
  cp "$tmp/stamps.tsv" "$PTX/stamps.tsv"
  echo "generated: ptx/stamps.tsv"
elif [[ ! -f "$PTX/stamps.tsv" ]] || ! cmp -s "$tmp/stamps.tsv" "$PTX/stamps.tsv"; then
  echo "STALE: ptx/stamps.tsv differs from what the sources give (run ./generate.sh)"
  diff "$PTX/stamps.tsv" "$tmp/stamps.tsv" 2>/dev/null | head -20 || true
  fail=1
else
  echo "fresh: ptx/stamps.tsv matches the sources"
fi

if [[ $fail != 0 ]]; then echo; echo "generate.sh: FAILED"; exit 1; fi
echo; echo "generate.sh: OK"
