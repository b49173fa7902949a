#!/bin/bash
# The character-GPT samples in Python, Java and Go train the same model on the same data as the C
# sample (samples/train_char_gpt.c), the reference: each runs 3 steps, and all four must print the
# same losses and parameter checksum (bitwise-equal parameters), which also shows that each runs.
# Usage: samples_test.sh C_SAMPLE PYTHON_SAMPLE JAVA_SCRIPT PIPEFORGE_JAR SAMPLE_JAR JNI_LIBRARY GO_SAMPLE
set -euo pipefail
c_sample=$1 python_sample=$2 java_script=$3 pipeforge_jar=$4 sample_jar=$5 jni_library=$6 go_sample=$7

run() {
  local language=$1
  shift
  local out
  out=$("$@" --steps 3 2>&1) || { echo "FAIL: the $language sample failed:" >&2; echo "$out" >&2; exit 1; }
  echo "--- $language" >&2
  echo "$out" >&2
  grep -E '^(step|loss)' <<<"$out" | sed 's/  *[0-9]* tok\/s$//'
}

# Under tools/sanitize.sh asan the libraries are instrumented and python, java and the Go program are
# not: they run with the sanitizer runtime preloaded (PF_SANITIZER_PRELOAD, docs/SANITIZERS.md) and
# without leak checking (their by-design leaks, and Go's heap, which LeakSanitizer cannot see).
interpreted() {
  if [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; then
    LD_PRELOAD=$PF_SANITIZER_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 "$@"
  else
    "$@"
  fi
}

expected=$(run C "$c_sample")
if ! grep -q 'parameter checksum [0-9a-f]\{64\}$' <<<"$expected"; then
  echo "FAIL: the C sample printed no parameter checksum"
  exit 1
fi
for language in Python Java Go; do
  case $language in
    Python) got=$(run Python interpreted "$python_sample") ;;
    Java) got=$(run Java interpreted "$java_script" "$pipeforge_jar" "$sample_jar" "$jni_library") ;;
    Go) got=$(run Go interpreted "$go_sample") ;;
  esac
  if [[ $got != "$expected" ]]; then
    echo "FAIL: the $language sample differs from the C sample"
    diff <(echo "$expected") <(echo "$got") || true
    exit 1
  fi
done
echo "PASS: the C, Python, Java and Go samples agree:"
echo "$expected"
