# shellcheck shell=bash
# Sourced by tools/test.sh and tools/sanitize.sh: run `bazel test` with its output shown and kept,
# then count the results from Bazel's per-test summary for the closing "N passed, N failed" line.
#
#   pf_run_logged LOG COMMAND...   runs COMMAND, output to the terminal and to LOG; returns its code
#   pf_count_tests LOG [TESTLOGS]  sets passed, failed, skipped from the summary lines in LOG; with
#                                  Bazel's testlogs folder, a target whose every test case skipped
#                                  itself (GTEST_SKIP: a GPU test without a GPU) counts as skipped,
#                                  and skipped_cases counts the skipped cases of passing targets
#   pf_print_summary RC            prints "N passed, N failed[, N skipped][; N test cases skipped
#                                  themselves]" (and a note when RC says Bazel failed although no
#                                  test did)

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
  skipped_cases=0
  [[ -n ${2:-} ]] || return 0
  local label xml cases skipped_here
  while read -r label; do
    xml=$2/${label#//}
    xml=${xml/://}/test.xml
    [[ -f $xml ]] || continue
    cases=$(grep -c '<testcase ' "$xml" || true)
    skipped_here=$(grep -c '<testcase [^>]*result="skipped"' "$xml" || true)
    skipped_cases=$((skipped_cases + skipped_here))
    if ((cases > 0 && cases == skipped_here)); then
      passed=$((passed - 1)) skipped=$((skipped + 1))
    fi
  done < <(grep -oE '^//[^ ]+[[:space:]]+(\(cached\) )?(PASSED|FLAKY)' "$1" | awk '{ print $1 }')
}

pf_print_summary() {
  local rc=$1
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    echo "bazel test exited with code $rc (a build failure outside the tests, or no tests found)"
  fi
  local line="$passed passed, $failed failed"
  [[ $skipped -gt 0 ]] && line+=", $skipped skipped"
  [[ ${skipped_cases:-0} -gt 0 ]] && line+="; $skipped_cases test cases skipped themselves"
  echo "$line"
}
