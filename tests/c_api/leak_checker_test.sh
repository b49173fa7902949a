#!/bin/bash
# The leak checker must catch a deliberate leak (leak_canary), or the leak-checked tests prove nothing.
set -uo pipefail
canary=$1
output=$(ASAN_OPTIONS=detect_leaks=1 "$canary" 2>&1)
rc=$?
if [[ $rc -eq 0 ]]; then
  echo "FAIL: the leak canary exited 0: LeakSanitizer is not active"
  echo "$output"
  exit 1
fi
if ! grep -q "ERROR: LeakSanitizer: detected memory leaks" <<<"$output" ||
   ! grep -q "pf_status_create" <<<"$output"; then
  echo "FAIL: the canary failed (rc $rc) without the expected leak report"
  echo "$output"
  exit 1
fi
echo "PASS: LeakSanitizer reported the deliberate leak in pf_status_create"
