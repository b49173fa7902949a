#!/bin/bash
# Runs the Java binding's JUnit 4 tests, then checks that the jar also finds its JNI library without
# being told (the copy inside the jar; //tests/packaging:java_jar_test checks that from an empty folder).
# Usage: run_junit.sh PIPEFORGE_JAR TEST_JAR JNI_LIBRARY REFERENCE_LOSS
set -euo pipefail
pipeforge_jar=$1 test_jar=$2 jni_library=$3 reference=$4
junit=/usr/share/java/junit4.jar
hamcrest=/usr/share/java/hamcrest-core.jar
for jar in "$junit" "$hamcrest"; do
  [[ -f $jar ]] || { echo "missing $jar: install junit4 (tools/setup.sh)"; exit 1; }
done
classpath="$pipeforge_jar:$test_jar:$junit:$hamcrest"
# Under tools/sanitize.sh asan the libraries are instrumented and java is not: preload the sanitizer
# runtime (PF_SANITIZER_PRELOAD, docs/SANITIZERS.md); the JVM's by-design leaks are not ours.
if [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; then
  export LD_PRELOAD=$PF_SANITIZER_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
fi
# Short-lived JVMs: skip the optimising compiler.
jvm=(java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$classpath")

"${jvm[@]}" -Dpipeforge.jni.library="$jni_library" -Dpipeforge.reference="$reference" \
  org.junit.runner.JUnitCore org.pipeforge.test.PipeForgeTest

echo "--- loading libpipeforge_jni.so from inside the jar"
out=$("${jvm[@]}" org.pipeforge.test.PipeForgeTest)
echo "$out"
grep -q '^PipeForge [0-9]' <<<"$out"

echo "--- Ctrl-C during Trainer.run: the run ends after the step in progress, its checkpoint written"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A non-interactive shell starts background jobs with SIGINT ignored, and the JVM keeps an ignored
# signal ignored: give it the default disposition, as a terminal's Ctrl-C finds it.
env --default-signal=INT,TERM "${jvm[@]}" -Dpipeforge.jni.library="$jni_library" org.pipeforge.test.PipeForgeTest \
  interrupted-run "$work/checkpoints" >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 1200); do
  grep -q '^step 3$' "$work/out" && break
  sleep 0.1
done
grep -q '^step 3$' "$work/out" || { cat "$work/out"; kill -9 "$pid"; echo "the run did not reach step 3"; exit 1; }
kill -INT "$pid"
code=0
wait "$pid" || code=$?
tail -n 3 "$work/out"
[[ $code == 130 ]] || { echo "the JVM exited $code after SIGINT (expected 130)"; exit 1; }
saved=$(ls "$work/checkpoints")
echo "saved: $saved"
# The step in progress when the signal came: the last one the listener saw, or the next (once the
# interrupt is noticed the listener is not called again).
last=$(grep '^step ' "$work/out" | tail -n 1 | cut -d' ' -f2)
[[ $saved == "$(printf 'step-%08d.pfckpt' "$last")" || $saved == "$(printf 'step-%08d.pfckpt' $((last + 1)))" ]] ||
  { echo "expected one checkpoint, of step $last or $((last + 1)), found: $saved"; exit 1; }
