# shellcheck shell=bash
# Sourced by tools/test.sh and tools/sanitize.sh: run `bazel test` with its output shown and kept,
# then count the results from Bazel's per-test summary for the closing "N passed, N failed" line.
#
#   pf_run_logged LOG COMMAND...   runs COMMAND, output to the terminal and to LOG; returns its code
#   pf_count_tests LOG             sets passed, failed, skipped from the summary lines in LOG
#   pf_print_summary RC            prints "N passed, N failed[, N skipped]" (and a note when RC says
#                                  Bazel failed although no test did)

pf_run_logged() {
  local log=$1
  shift
  "$@" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

# Summary lines look like "//tests/data:foo_test   (cached) PASSED in 0.1s".
pf_count_status() { grep -cE "^//[^ ]+[[:space:]]+(\\(cached\\) )?($2)" "$1" || true; }

pf_count_tests() {
  passed=$(pf_count_status "$1" 'PASSED|FLAKY')
  failed=$(pf_count_status "$1" 'FAILED|TIMEOUT|NO STATUS|INCOMPLETE|REMOTE FAILURE')
  skipped=$(pf_count_status "$1" 'SKIPPED')
}

pf_print_summary() {
  local rc=$1
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    echo "bazel test exited with code $rc (a build failure outside the tests, or no tests found)"
  fi
  if [[ $skipped -gt 0 ]]; then
    echo "$passed passed, $failed failed, $skipped skipped"
  else
    echo "$passed passed, $failed failed"
  fi
}
