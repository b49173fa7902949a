#!/usr/bin/env bash
# Builds (-c opt) and runs the local-learning benchmark: alone (quality on scikit-learn's digits and
# the character GPT, throughput at p = 2 and 4 with threads) and under mpirun -np 2
# (throughput with one process per rank). Prints one JSON object. Extra arguments go to the
# benchmark (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //bench/local:local_bench >&2
source bench/digits.sh
# Not the bazel-bin link: another build may have moved it.
run_alone_and_under_mpirun "$(bazel info -c opt bazel-bin 2>/dev/null)/bench/local/local_bench" "$@"
