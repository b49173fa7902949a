#!/usr/bin/env bash
# The CPU test suite as on a machine without CUDA: every test except those tagged "cuda" (the GPU
# tests, which link the CUDA libraries; docs/BACKENDS.md), each run under tools/hide_cuda.sh, which
# makes the CUDA toolkit's folder empty for it. Ends with "N passed, N failed" like tools/test.sh.
#   tools/test_without_cuda.sh [bazel test arguments]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source tools/test_summary.sh
read -r -a bazel <<<"${BAZEL:-bazel}"
log=$(mktemp "${TMPDIR:-/tmp}/pipeforge-test.XXXXXX")
trap 'rm -f "$log"' EXIT
pf_run_logged "$log" "${bazel[@]}" test --keep_going --color=no --curses=no --test_tag_filters=-cuda \
  --run_under="$PWD/tools/hide_cuda.sh" "$@" //...
rc=$?
pf_count_tests "$log"
pf_print_summary "$rc"
exit "$rc"
