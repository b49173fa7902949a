#!/usr/bin/env bash
# The tests as on a machine with neither CUDA nor Open MPI: every test except those tagged "cuda"
# (the GPU tests, which link the CUDA libraries) and "mpi" (real mpirun processes, or the MPI
# backend linked in), each run under tools/hide_cuda_and_mpi.sh (docs/BACKENDS.md). Ends with
# "N passed, N failed" like tools/test.sh.
#   tools/test_without_cuda_and_mpi.sh [bazel test arguments]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source tools/test_summary.sh
read -r -a bazel <<<"${BAZEL:-bazel}"
log=$(mktemp "${TMPDIR:-/tmp}/pipeforge-test.XXXXXX")
trap 'rm -f "$log"' EXIT
pf_run_logged "$log" "${bazel[@]}" test --keep_going --color=no --curses=no --test_tag_filters=-cuda,-mpi \
  --run_under="$PWD/tools/hide_cuda_and_mpi.sh" "$@" //...
rc=$?
pf_count_tests "$log" "$("${bazel[@]}" info bazel-testlogs 2>/dev/null)"
pf_print_summary "$rc"
exit "$rc"
