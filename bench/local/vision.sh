#!/usr/bin/env bash
# Builds (-c opt) and runs the vision local-learning benchmark (issue 39 item 8): ppll and
# local-updates against 1F1B and sequential training on a ResNet and a ViT at 4 ranks on
# scikit-learn's digits. Prints one JSON object. Extra arguments go to the benchmark (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //bench/local:vision_local_bench >&2
source bench/digits.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Not the bazel-bin link: another build may have moved it.
"$(bazel info -c opt bazel-bin 2>/dev/null)/bench/local/vision_local_bench" --digits "$(fetch_digits "$work")" "$@"
