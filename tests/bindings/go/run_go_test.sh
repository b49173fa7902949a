#!/bin/bash
# Runs the Go binding's tests: a `go test -c` binary built by //tests/bindings:go_test_binary.
# Usage: run_go_test.sh TEST_BINARY REFERENCE_LOSS
set -euo pipefail
# Under tools/sanitize.sh asan libpipeforge.so is instrumented and the Go program is not: preload the
# sanitizer runtime (PF_SANITIZER_PRELOAD, docs/SANITIZERS.md). LeakSanitizer cannot see pointers
# held in Go's heap, so it would report them as leaks: off here.
if [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; then
  export LD_PRELOAD=$PF_SANITIZER_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
fi
exec "$1" -test.v -test.count=1 -reference="$2"
