#!/usr/bin/env bash
# run_gtest_under_mpirun.sh N BTL BINARY [ARGS...]: runs a googletest binary on N mpirun processes;
# passes when every process passes (mpirun exits non-zero when any process does).
set -euo pipefail
n=$1 btl=$2 binary=$3
shift 3
# This script runs from the test's package (Bazel links it there): mpirun.sh is in tests/util.
util=${TEST_SRCDIR:+$TEST_SRCDIR/pipeforge/tests/util}
util=${util:-$(dirname "$0")}
source "$util/mpirun.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: run tools/setup.sh"; exit 1; }
# Each process writes its own log; rank 0's goes to the test log, the others' only when they fail.
out=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
set +e
timeout 1200 bash -c "source '$util/mpirun.sh'; run_mpi $n $btl --output-filename '$out/ranks' '$binary' $*"
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
echo "mpirun -np $n ($btl): exit $rc"
exit $rc
