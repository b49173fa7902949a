#!/bin/bash
# The character-GPT samples in Python, Java and Go train the same model on the same data as the C
# sample (samples/train_char_gpt.c): each runs 3 steps, and all must print the same losses and
# parameter checksum (bitwise-equal parameters), which also shows that each sample runs.
# Usage: samples_test.sh PYTHON_SAMPLE JAVA_SCRIPT PIPEFORGE_JAR SAMPLE_JAR JNI_LIBRARY GO_SAMPLE
set -euo pipefail
python_sample=$1 java_script=$2 pipeforge_jar=$3 sample_jar=$4 jni_library=$5 go_sample=$6

run() {
  local language=$1
  shift
  local out
  out=$("$@" --steps 3 2>&1) || { echo "FAIL: the $language sample failed:" >&2; echo "$out" >&2; exit 1; }
  echo "--- $language" >&2
  echo "$out" >&2
  grep -E '^(step|loss)' <<<"$out" | sed 's/  *[0-9]* tok\/s$//'
}

expected=$(run Python "$python_sample")
for language in Java Go; do
  case $language in
    Java) got=$(run Java "$java_script" "$pipeforge_jar" "$sample_jar" "$jni_library") ;;
    Go) got=$(run Go "$go_sample") ;;
  esac
  if [[ $got != "$expected" ]]; then
    echo "FAIL: the $language sample differs from the Python sample"
    diff <(echo "$expected") <(echo "$got") || true
    exit 1
  fi
done
echo "PASS: the Python, Java and Go samples agree:"
echo "$expected"
