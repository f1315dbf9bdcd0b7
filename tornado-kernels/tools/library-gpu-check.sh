#!/usr/bin/env bash
# The attention library task (tornado/library; docs/tornadovm.md, "As a TornadoVM library task") on a GPU through
# TornadoVM's CUDA backend: runs io.github.tornadoattention.tornado.library.LibraryGpuCheck (tornado-kernels test
# sources: the shape-by-scalars decode, then CacheLibraryTasks' paged decode, chunked prefill, GQA/MQA, lse, bf16,
# window/softcap/sinks and CUDA-graph cases, each against the CPU reference) and exits 0 only when every check passed.
# Builds nothing. Run from the repository root on a machine with an NVIDIA driver (libcuda.so.1) and NVRTC
# (libnvrtc.so.13), with these prepared elsewhere:
#   .gpu/libcheck/tvm-cuda.tar.xz   jdk/ (JDK 25 with JVMCI and Graal) + tornadovm-cuda/ (a TornadoVM
#                                   5.2.0-jdk25 SDK with the CUDA backend: jars, libtornado-cuda.so,
#                                   tornado-argfile.template)
#   .gpu/libcheck/libcheck.jar      the compiled check: after a build with the CUDA SDK,
#                                   jar cf .gpu/libcheck/libcheck.jar -C tornado-kernels/target/test-classes io/github/tornadoattention/tornado/library
#   src/target/tornado-attention.jar, src/cli/target/lib/*.jar (its dependencies), tornado-kernels/target/tornado-kernels.jar
# Arguments go to LibraryGpuCheck ([--steps N] [--seed S] [--timing N] [--case NAME]...). With --llama-demo first,
# the script runs the Llama-shaped decoder of examples/ instead (the rest of the arguments are the demo's, e.g.
# --attention library,ours --backend tornado-simt; needs examples/target/tornado-attention-examples.jar) and prints its
# report.
# Logs under $OUT (default out/libcheck): libcheck.log (everything), env.txt.
# Environment: LIBCHECK_DIR (.gpu/libcheck), LIBCHECK_WORK (unpack folder, /tmp/libcheck),
# NVRTC_DIR (folder of libnvrtc.so.13 when the loader does not find it), LIBCHECK_TIMEOUT (seconds, 540),
# LIBCHECK_JAVA_OPTS (extra JVM options, e.g. -Dtornado.print.kernel=True).
set -uo pipefail
root=$(pwd)
out=${OUT:-$root/out/libcheck}
dir=${LIBCHECK_DIR:-$root/.gpu/libcheck}
work=${LIBCHECK_WORK:-/tmp/libcheck}
mkdir -p "$out"
log=$out/libcheck.log
say() { echo "$*" | tee -a "$log"; }
: > "$log"

main=io.github.tornadoattention.tornado.library.LibraryGpuCheck
extra=$dir/libcheck.jar
if [ "${1:-}" = --llama-demo ]; then
  shift
  main=io.github.tornadoattention.examples.llama.LlamaDecoderDemo
  extra=$root/examples/target/tornado-attention-examples.jar:$root/src/cli/target/tornado-attention-cli.jar
fi
for f in "$dir/tvm-cuda.tar.xz" "${extra%%:*}" src/target/tornado-attention.jar src/cli/target/tornado-attention-cli.jar tornado-kernels/target/tornado-kernels.jar; do
  [ -f "$f" ] || { say "FAIL setup: $f is missing (run from the repository root with the carried files)"; exit 2; }
done

{
  echo "== nvidia-smi"; nvidia-smi 2>&1 | head -15
  echo "== loader"; ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc' || echo "(no libcuda/libnvrtc in ldconfig)"
  echo "== toolkit"; ls -l /usr/local/cuda*/lib64/libnvrtc* /usr/local/cuda*/targets/*/lib/libnvrtc* 2>&1 | head
} > "$out/env.txt" 2>&1

# libnvrtc.so.13: the loader's, else NVRTC_DIR, else a CUDA toolkit's lib64.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.13 '; then
  for d in ${NVRTC_DIR:-} /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if [ -n "$d" ] && [ -e "$d/libnvrtc.so.13" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break
    fi
  done
fi
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

rm -rf "$work" && mkdir -p "$work" && tar -xJf "$dir/tvm-cuda.tar.xz" -C "$work" \
  || { say "FAIL setup: cannot unpack $dir/tvm-cuda.tar.xz into $work"; exit 2; }
export JAVA_HOME="$work/jdk" TORNADOVM_HOME="$work/tornadovm-cuda"
sed "s|\${TORNADOVM_HOME}|$TORNADOVM_HOME|g" "$TORNADOVM_HOME/tornado-argfile.template" > "$TORNADOVM_HOME/tornado-argfile"
{ echo "== ldd libtornado-cuda.so"; ldd "$TORNADOVM_HOME/lib/libtornado-cuda.so"; } >> "$out/env.txt" 2>&1
if ldd "$TORNADOVM_HOME/lib/libtornado-cuda.so" | grep -q 'not found'; then
  say "FAIL setup: libtornado-cuda.so has unresolved libraries: $(ldd "$TORNADOVM_HOME/lib/libtornado-cuda.so" | grep 'not found' | tr -s ' \t' ' ')"
  exit 2
fi

cp=$root/src/target/tornado-attention.jar
for j in "$root"/src/cli/target/lib/*.jar; do cp=$cp:$j; done
cp=$cp:$root/tornado-kernels/target/tornado-kernels.jar:$extra
# TornadoVM's argfile puts "." on the module path: run from an empty folder.
cwd=$work/cwd && mkdir -p "$cwd" && cd "$cwd"
say "java: $("$JAVA_HOME/bin/java" -version 2>&1 | head -1); TORNADOVM_HOME=$TORNADOVM_HOME"
start=$(date +%s)
# shellcheck disable=SC2086
timeout "${LIBCHECK_TIMEOUT:-540}" "$JAVA_HOME/bin/java" @"$TORNADOVM_HOME/tornado-argfile" \
  --enable-native-access=ALL-UNNAMED -Dtornado.recover.bailout=False -Dtornado.max.events=1024 ${LIBCHECK_JAVA_OPTS:-} \
  -cp "$cp" "$main" "$@" >> "$log" 2>&1
rc=$?
cd "$root"
if [ "$main" != io.github.tornadoattention.tornado.library.LibraryGpuCheck ]; then
  grep -v 'Unknown module' "$log" | tail -60
  echo "rc=$rc in $(( $(date +%s) - start )) s; log: $log"
  exit $rc
fi
# The summary (the full log, with TornadoVM's output and stack traces, stays in $log).
grep -E '^(PASS|FAIL|RESULT|device|case |  step|  timing)' "$log"
echo "rc=$rc in $(( $(date +%s) - start )) s; log: $log"
if [ $rc -ne 0 ] && ! grep -q '^RESULT' "$log"; then
  echo "--- last lines of the log"; grep -v 'Unknown module' "$log" | tail -40
fi
exit $rc
