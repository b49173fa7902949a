#!/usr/bin/env bash
# The project's test command, `tools/setup.sh && bazel test //...`, plus a closing line
# "N passed, N failed[, N skipped]" counted from Bazel's per-test summary; a test whose every case
# skipped itself (the GPU tests without a GPU) counts as skipped. Exits with Bazel's code.
#   tools/test.sh                          # everything (what CI runs through .ci/run)
#   tools/test.sh --test_filter=Foo.*      # extra arguments go to `bazel test`
#   BAZEL="bazel --output_base=/tmp/mine" tools/test.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

tools/setup.sh || { echo "tools/setup.sh failed" >&2; echo "0 passed, 0 failed"; exit 1; }

# The Transformers comparison's Python (tests/interop:transformers_test, which skips itself without
# it): PIPEFORGE_HF_TESTS=0 leaves it out.
hf_python=""
if [[ ${PIPEFORGE_HF_TESTS:-1} != 0 ]]; then
  hf_python=$(tools/hf_venv.sh) || hf_python=""
fi

source tools/test_summary.sh
read -r -a bazel <<<"${BAZEL:-bazel}"
log=$(mktemp "${TMPDIR:-/tmp}/pipeforge-test.XXXXXX")
trap 'rm -f "$log"' EXIT

# --keep_going: one target that fails to build still lets every other test run and be counted.
pf_run_logged "$log" "${bazel[@]}" test --keep_going --color=no --curses=no \
  --test_env=PIPEFORGE_HF_PYTHON="$hf_python" "$@" //...
rc=$?
pf_count_tests "$log" "$("${bazel[@]}" info bazel-testlogs 2>/dev/null)"
pf_print_summary "$rc"
exit "$rc"
