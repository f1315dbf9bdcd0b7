# Sourced by the scripts in bin/: sets JAVA_HOME to a JDK 25 without the user exporting anything.
# Order: $JAVA_HOME if it is 25, then /usr/lib/jvm/*25*, then the java on PATH if it is 25.
is_jdk25() { [ -x "$1/bin/java" ] && "$1/bin/java" -version 2>&1 | head -n 1 | grep -q '"25[."]'; }
find_jdk25() {
  if [ -n "${JAVA_HOME:-}" ] && is_jdk25 "$JAVA_HOME"; then echo "$JAVA_HOME"; return; fi
  for candidate in /usr/lib/jvm/*25* /usr/lib/jvm/*-25-* /opt/*jdk*25* "$HOME"/.sdkman/candidates/java/25*; do
    if is_jdk25 "$candidate"; then echo "$candidate"; return; fi
  done
  if command -v java >/dev/null; then
    local home; home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
    if is_jdk25 "$home"; then echo "$home"; return; fi
  fi
  return 1
}
JAVA_HOME=$(find_jdk25) || {
  echo "error: tornado-attention needs JDK 25; none found (set JAVA_HOME or install one under /usr/lib/jvm)" >&2
  exit 2
}
export JAVA_HOME
