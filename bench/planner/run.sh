#!/usr/bin/env bash
# Builds pipeforge (-c opt) and validates the planner on this machine: one JSON object with the
# predicted and measured step time of the plan's top 3 and a spread of other candidates, the
# prediction error and the regret (bench/planner/validate.py; arguments go to it).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //:pipeforge >&2
exec python3 bench/planner/validate.py --pipeforge bazel-bin/pipeforge "$@"
