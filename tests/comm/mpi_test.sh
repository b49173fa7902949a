#!/bin/bash
# Runs the MPI tests under mpirun: mpi_world_test with 2 and 4 processes, then the dead-rank check
# (mpi_kill_helper: rank 1 SIGKILLs itself; mpirun must fail within a bound and leave no process).
# Usage: mpi_test.sh <mpi_world_test> <mpi_kill_helper> [default|tcp]
#   default: Open MPI picks the transport (shared memory here); tcp: --mca btl tcp,self.
set -u

find_binary() {  # a runfiles-relative path, or one relative to the current directory
  if [[ -e "$1" ]]; then echo "$1"; else echo "${TEST_SRCDIR:-.}/pipeforge/$1"; fi
}
test_bin=$(find_binary "$1")
kill_bin=$(find_binary "$2")
mode=${3:-default}
source "$(dirname "$0")/../util/mpirun.sh"

work=$PF_MPI_TMP

mpirun_args=(--oversubscribe --bind-to none)
if [[ $mode == tcp ]]; then mpirun_args+=(--mca btl tcp,self); fi

failed=0
for np in 2 4; do
  echo "=== mpi_world_test, $np processes, btl $mode"
  start=$(date +%s%N)
  timeout 120 mpirun "${mpirun_args[@]}" -np "$np" "$test_bin"
  rc=$?
  echo "=== rc $rc after $(( ($(date +%s%N) - start) / 1000000 )) ms"
  if [[ $rc -ne 0 ]]; then failed=1; fi
done

echo "=== mpi_kill_helper, 3 processes, btl $mode: rank 1 is killed"
pids=$work/pids
mkdir -p "$pids"
start=$(date +%s)
PF_PID_DIR=$pids timeout -k 5 30 mpirun "${mpirun_args[@]}" -x PF_PID_DIR -np 3 "$kill_bin"
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "=== rc $rc after $elapsed s"
if [[ $rc -eq 0 ]]; then echo "FAIL: mpirun exited 0 although rank 1 was killed"; failed=1; fi
# mpirun itself exits 137 when a rank dies of SIGKILL; timeout's own code is 124.
if [[ $rc -eq 124 || $elapsed -ge 30 ]]; then echo "FAIL: mpirun did not end within 30 s"; failed=1; fi
count=$(ls "$pids" | wc -l)
if [[ $count -ne 3 ]]; then echo "FAIL: $count of 3 ranks wrote their pid"; failed=1; fi
for f in "$pids"/*.pid; do
  [[ -e $f ]] || continue
  pid=$(cat "$f")
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: rank $(basename "$f" .pid) (pid $pid) is still running after mpirun ended"
    kill -9 "$pid"
    failed=1
  fi
done

if [[ $failed -ne 0 ]]; then echo "FAILED"; exit 1; fi
echo "PASSED"
