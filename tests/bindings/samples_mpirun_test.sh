#!/bin/bash
# The Python sample under `mpirun -np 2 ... --schedule 1f1b --stages 2` (one process per rank) prints
# what the C sample prints, from rank 0 only: the same losses and parameter checksum (1F1B keeps the
# parameters bitwise equal to the sequential run's). So does the same pipeline on threads, without
# mpirun.
# Usage: samples_mpirun_test.sh MPIRUN_SH C_SAMPLE PYTHON_SAMPLE
set -euo pipefail
mpirun_sh=$1 c_sample=$2 python_sample=$3
source "$mpirun_sh"
command -v mpirun >/dev/null || { echo "mpirun not found: run tools/setup.sh"; exit 1; }
preload=()
if [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; then  # tools/sanitize.sh asan (docs/SANITIZERS.md)
  export LD_PRELOAD=$PF_SANITIZER_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
  preload=(-x LD_PRELOAD -x ASAN_OPTIONS)
fi

results() { grep -E '^(step|loss)' <<<"$1" | sed 's/  *[0-9]* tok\/s$//'; }

run() {
  local what=$1 out
  shift
  out=$("$@" --steps 3 2>&1) || { echo "FAIL: $what failed:" >&2; echo "$out" >&2; exit 1; }
  echo "--- $what" >&2
  echo "$out" >&2
  printf '%s\n' "$out"
}

expected=$(results "$(run "the C sample" "$c_sample")")
grep -q 'parameter checksum [0-9a-f]\{64\}$' <<<"$expected" || { echo "FAIL: no checksum from the C sample"; exit 1; }

threads=$(run "the Python sample on threads" "$python_sample" --schedule 1f1b --stages 2)
processes=$(run "the Python sample on 2 processes" timeout 600 bash -c \
  "source '$mpirun_sh'; run_mpi 2 default ${preload[*]} '$python_sample' --schedule 1f1b --stages 2 \"\$@\"" _)
for case in threads processes; do
  got=$(results "${!case}")
  if [[ $got != "$expected" ]]; then
    echo "FAIL: the Python sample ($case) differs from the C sample"
    diff <(echo "$expected") <(echo "$got") || true
    exit 1
  fi
done
if [[ $(grep -c 'parameter checksum' <<<"$processes") -ne 1 || $(grep -c '^PipeForge' <<<"$processes") -ne 1 ]]; then
  echo "FAIL: under mpirun more than rank 0 printed:"
  echo "$processes"
  exit 1
fi
grep -q '1f1b on 2 ranks, 2 processes' <<<"$processes" || { echo "FAIL: the sample did not run one process per rank"; exit 1; }
echo "PASS: the Python sample on 2 processes and on 2 threads prints the C sample's losses and checksum:"
echo "$expected"
