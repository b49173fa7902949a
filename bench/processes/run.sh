#!/usr/bin/env bash
# Builds (-c opt) and runs the process-per-rank benchmark on 2 mpirun processes, once over Open
# MPI's default transport (shared memory) and once forced over loopback TCP. One JSON line each.
# Extra arguments go to the benchmark (e.g. --steps 8).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //bench/processes:process_efficiency >&2
bin=bazel-bin/bench/processes/process_efficiency
source tests/util/mpirun.sh
for btl in default tcp; do
  printf '{"btl": "%s", "result": ' "$btl"
  run_mpi 2 "$btl" "$bin" "$@" | tr -d '\n'
  printf '}\n'
done
