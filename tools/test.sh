#!/usr/bin/env bash
# The project's test command, `tools/setup.sh && bazel test //...`, plus a closing line
# "N passed, N failed[, N skipped]" counted from Bazel's per-test summary. Exits with Bazel's code.
#   tools/test.sh                          # everything (what CI runs through .ci/run)
#   tools/test.sh --test_filter=Foo.*      # extra arguments go to `bazel test`
#   BAZEL="bazel --output_base=/tmp/mine" tools/test.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

tools/setup.sh || { echo "tools/setup.sh failed" >&2; echo "0 passed, 0 failed"; exit 1; }

read -r -a bazel <<<"${BAZEL:-bazel}"
log=$(mktemp "${TMPDIR:-/tmp}/pipeforge-test.XXXXXX")
trap 'rm -f "$log"' EXIT

# --keep_going: one target that fails to build still lets every other test run and be counted.
"${bazel[@]}" test --keep_going --color=no --curses=no "$@" //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# Summary lines look like "//tests/data:foo_test   (cached) PASSED in 0.1s".
count() { grep -cE "^//[^ ]+[[:space:]]+(\\(cached\\) )?($1)" "$log" || true; }
passed=$(count 'PASSED|FLAKY')
failed=$(count 'FAILED|TIMEOUT|NO STATUS|INCOMPLETE|REMOTE FAILURE')
skipped=$(count 'SKIPPED')

if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  echo "bazel test exited with code $rc (a build failure outside the tests, or no tests found)"
fi
if [[ $skipped -gt 0 ]]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
exit "$rc"
