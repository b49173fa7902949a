#!/bin/bash
# Runs the Go binding's tests: a `go test -c` binary built by //tests/bindings:go_test_binary.
# Usage: run_go_test.sh TEST_BINARY REFERENCE_LOSS
set -euo pipefail
exec "$1" -test.v -test.count=1 -reference="$2"
