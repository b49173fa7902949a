#!/bin/bash
# The jar alone trains: copied into an empty folder with one user class, compiled and run with
# `java -cp pipeforge.jar:. TrainInstalled` and no LD_LIBRARY_PATH or -D option; the JNI library
# and libpipeforge.so.<abi> come out of the jar, and so does the CUDA backend beside them. Its
# manifest carries the version and the licence (Apache-2.0, META-INF/LICENSE).
# Usage: java_jar_test.sh PIPEFORGE_JAR VERSION_FILE TrainInstalled.java
set -euo pipefail
source "$(dirname "$0")/user_program.sh"
jar_file=$(realpath "$1") version_file=$(realpath "$2") source=$(realpath "$3")
version=$(sed -n 's/^version *= *//p' "$version_file")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/java_jar.XXXXXX")
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/user" "$work/tmp"
cp "$jar_file" "$work/user/pipeforge.jar" && cp "$source" "$work/user/"
cd "$work/user"
unset LD_LIBRARY_PATH CLASSPATH
manifest=$(unzip -p pipeforge.jar META-INF/MANIFEST.MF | tr -d '\r')
grep -qx "Implementation-Version: $version" <<<"$manifest" ||
  fail "the manifest does not say Implementation-Version: $version"
grep -qx "Bundle-License: Apache-2.0" <<<"$manifest" || fail "the manifest does not say Bundle-License: Apache-2.0"
licence=$(unzip -p pipeforge.jar META-INF/LICENSE)
grep -q "Apache License" <<<"$licence" || fail "the jar has no META-INF/LICENSE"
javac -cp pipeforge.jar TrainInstalled.java
output=$(as_user_program java -XX:TieredStopAtLevel=1 -Djava.io.tmpdir="$work/tmp" -cp pipeforge.jar:. TrainInstalled) ||
  fail "the program failed: $output"
echo "$output"
grep -q "^pipeforge $version: loss " <<<"$output" || fail "unexpected output"
if grep '^cuda: .*is not next to' <<<"$output"; then fail "the CUDA backend inside the jar was not found"; fi
[[ -z $(ls -A "$work/tmp") ]] || fail "the extracted libraries were not deleted at exit: $(ls -A "$work/tmp")"
echo "PASS: java -cp pipeforge.jar:. trains from an empty folder; the extracted libraries are gone at exit"
