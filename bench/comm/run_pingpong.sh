#!/bin/bash
# Builds and runs the MPI ping-pong (2 processes), once with Open MPI's default transport (shared
# memory on one host) and once over loopback TCP (--mca btl tcp,self). One JSON line per run.
# Extra arguments go to the benchmark (e.g. --iterations 5000 --windows 40).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //bench/comm:mpi_pingpong >&2
bin=bazel-bin/bench/comm/mpi_pingpong
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none -np 2 "$bin" --label default "$@"
mpirun --oversubscribe --bind-to none --mca btl tcp,self -np 2 "$bin" --label "btl tcp,self" "$@"
