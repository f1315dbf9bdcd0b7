# Sourced by the GPU report scripts, from the repository root with OUT and PHASES set: the runtime (the packed
# JDK 25 + TornadoVM SDK unless JAVA_HOME and TORNADOVM_HOME are set), the GPU's name into $OUT/gpu.txt, and helpers.
if [ -z "${TORNADOVM_HOME:-}" ]; then
  [ -d /opt/gpu-bundle ] || tar -xJf "${BUNDLE:-.gpu/gpu-bundle.tar.xz}" -C /opt || { echo "cannot unpack the bundle" >&2; exit 2; }
  source /opt/gpu-bundle/env.sh
fi
# want PHASE: whether PHASES names it.
want() { [[ " $PHASES " == *" $1 "* ]]; }
# One CLI call under TornadoVM (ta), or on ptx-cuda without TornadoVM, as its users run it (cuda).
ta() { timeout "${CALL_TIMEOUT:-300}" bin/tornado-attention "$@"; }
cuda() { TORNADOVM_HOME= timeout "${CALL_TIMEOUT:-300}" bin/tornado-attention "$@"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
