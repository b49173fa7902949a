#!/bin/bash
# Runs the Go sample (a binary built by //samples/go:train_char_gpt_bin, which finds libpipeforge.so
# through its run path). Usage (Bazel passes the first): train_char_gpt.sh BINARY [args]
set -euo pipefail
binary=$1
shift
exec "$binary" "$@"
