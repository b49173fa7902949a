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
