#!/usr/bin/env bash
# run_gtest_under_mpirun.sh N BTL BINARY [ARGS...]: runs a googletest binary on N mpirun processes;
# passes when every process passes (mpirun exits non-zero when any process does). A binary built on
# //tests/util:mpi_gtest_main writes one XML report per rank; when the run passed and every rank
# reports the same cases with the same results, rank 0's becomes the test's report, so that cases
# that skipped themselves (a GPU test without GPUs) are reported as skipped, and a test whose every
# case skipped counts as skipped (tools/test.sh), not passed.
set -euo pipefail
n=$1 btl=$2 binary=$3
shift 3
bazel_xml=${XML_OUTPUT_FILE:-}  # mpirun.sh unsets it: the ranks must not share it
# This script runs from the test's package (Bazel links it there): mpirun.sh is in tests/util.
util=${TEST_SRCDIR:+$TEST_SRCDIR/pipeforge/tests/util}
util=${util:-$(dirname "$0")}
source "$util/mpirun.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: run tools/setup.sh"; exit 1; }
# Each process writes its own log; rank 0's goes to the test log, the others' only when they fail.
out=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
mkdir -p "$out/xml"
export PF_GTEST_RANK_OUTPUT="xml:$out/xml"
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
# Each case of a rank's report and its result, one a line.
case_results() { grep -o '<testcase name="[^"]*"[^>]*result="[a-z]*"' "$1" | sed 's/ .*result=/ /' | sort; }
same_reports() {
  local r first
  [[ -f $out/xml/rank0.xml ]] || return 1
  first=$(case_results "$out/xml/rank0.xml")
  [[ -n $first ]] || return 1
  for ((r = 1; r < n; r++)); do
    [[ -f $out/xml/rank$r.xml && $(case_results "$out/xml/rank$r.xml") == "$first" ]] || return 1
  done
}
if [[ $rc -eq 0 && -n $bazel_xml ]] && same_reports; then
  cp "$out/xml/rank0.xml" "$bazel_xml"
  skipped=$(grep -c '<testcase [^>]*result="skipped"' "$bazel_xml" || true)
  [[ $skipped == 0 ]] || echo "$skipped test case(s) skipped themselves on every rank (in the test's report)"
fi
exit $rc
