#!/usr/bin/env bash
# mpirun_gtest.sh N BINARY [ARGS...]: runs a googletest binary on N mpirun processes; passes when
# every process passes (mpirun exits non-zero when any process does). Rank 0's output goes to the
# test log, the others' only when the run fails.
set -euo pipefail
n=$1 binary=$2
shift 2
source "$(dirname "$0")/mpirun.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: run tools/setup.sh"; exit 1; }
# Under tools/sanitize.sh asan the binary is instrumented: Open MPI's allocations that live until
# exit are not leaks of ours (the single-process C API tests do the leak checking).
[[ -n ${ASAN_OPTIONS:-} ]] && export ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0
# Bazel's per-test files would be written by every process at once.
unset TEST_PREMATURE_EXIT_FILE XML_OUTPUT_FILE GTEST_OUTPUT TEST_SHARD_STATUS_FILE
out=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
set +e
timeout 900 bash -c "source '$(dirname "$0")/mpirun.sh'; run_mpi $n --output-filename '$out/ranks' '$binary' $*"
rc=$?
set -e
for f in "$out"/ranks/1/rank.*/stdout; do
  [[ -f $f ]] || continue
  rank=$(basename "$(dirname "$f")")
  if [[ $rank == rank.0 || $rc -ne 0 ]]; then
    echo "===== $rank ====="
    cat "$f"
    cat "$(dirname "$f")/stderr" 2>/dev/null || true
  fi
done
echo "mpirun -np $n: exit $rc"
exit $rc
