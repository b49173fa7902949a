#!/bin/bash
# Runs the Java sample: java with pipeforge.jar and the sample's jar, the JNI library named by
# -Dpipeforge.jni.library. Relative --text-dir/--checkpoint paths are the caller's (bazel run).
# Usage (Bazel passes the first three): train_char_gpt.sh PIPEFORGE_JAR SAMPLE_JAR JNI_LIBRARY [args]
set -euo pipefail
pipeforge_jar=$(realpath "$1") sample_jar=$(realpath "$2") jni_library=$(realpath "$3")
shift 3
cd "${BUILD_WORKING_DIRECTORY:-.}"
exec java -Dpipeforge.jni.library="$jni_library" -cp "$pipeforge_jar:$sample_jar" TrainCharGpt "$@"
