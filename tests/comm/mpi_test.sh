#!/bin/bash
# Runs the MPI tests under mpirun: mpi_world_test with 2 and 4 processes, then the dead-rank check
# (mpi_kill_helper: rank 1 SIGKILLs itself; mpirun must fail within a bound and leave no process).
# Usage: mpi_test.sh <mpi_world_test> <mpi_kill_helper> <lsan suppressions> [default|tcp]
#   default: Open MPI picks the transport (shared memory here); tcp: --mca btl tcp,self.
set -u

find_binary() {  # a runfiles-relative path, or one relative to the current directory
  if [[ -e "$1" ]]; then echo "$1"; else echo "${TEST_SRCDIR:-.}/pipeforge/$1"; fi
}
test_bin=$(find_binary "$1")
kill_bin=$(find_binary "$2")
supp=$(find_binary "$3")
mode=${4:-default}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Every rank is a gtest binary: they must not share Bazel's XML and premature-exit files.
unset XML_OUTPUT_FILE TEST_PREMATURE_EXIT_FILE GTEST_OUTPUT
# Under ASan (tools/sanitize.sh asan): Open MPI's own allocations at exit are not ours to report.
# Its libraries have no frame pointers, so allocation stacks are unwound fully to reach a frame
# in libmpi (or in a component, kept loaded at exit) that the suppressions match.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export LSAN_OPTIONS="suppressions=$supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
# A short temp dir of our own: Open MPI's session sockets must fit a 108-byte Unix socket path,
# and Bazel's TEST_TMPDIR is longer than that.
work=$(mktemp -d /tmp/pf-mpi.XXXXXX)
export TMPDIR=$work
trap 'rm -rf "$work"' EXIT

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
