#!/usr/bin/env bash
# Builds (-c opt) and runs the neuron-group benchmark on scikit-learn's digits: quality and
# throughput of neuron groups against ppll, 1F1B and sequential training. Prints one JSON object.
# Extra arguments go to the benchmark (e.g. --steps 100 --throughput-steps 20).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //bench/local:neuron_groups_bench >&2
source bench/digits.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Not the bazel-bin link: another build may have moved it.
"$(bazel info -c opt bazel-bin 2>/dev/null)/bench/local/neuron_groups_bench" --digits "$(fetch_digits "$work")" "$@"
