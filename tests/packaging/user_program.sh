# Sourced by the packaging tests: as_user_program CMD... runs a program the way a user's machine runs
# it. Under tools/sanitize.sh asan, libpipeforge.so.<abi> is instrumented and the user's program is
# not, so the sanitizer runtime is preloaded for it (PF_SANITIZER_PRELOAD, docs/SANITIZERS.md), with
# LeakSanitizer off: it cannot see the pointers held by a JVM's, Go's or Python's heap.
as_user_program() {
  if [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; then
    LD_PRELOAD=$PF_SANITIZER_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 "$@"
  else
    "$@"
  fi
}

# check_installed_command BIN_DIR VERSION: with BIN_DIR first on PATH, `pipeforge` is the one in it,
# says VERSION, trains, and (when mpirun is there) trains as two processes, its MPI backend found
# beside its real path; with Open MPI hidden (PF_LIBRARIES_HIDDEN) it refuses them, saying why. Prints what failed; returns non-zero then. Leaves BIN_DIR on PATH.
check_installed_command() {
  local bin=$1 version=$2 out
  export PATH=$bin:$PATH
  [[ $(command -v pipeforge) == "$bin/pipeforge" ]] || { echo "pipeforge on PATH is '$(command -v pipeforge)'"; return 1; }
  out=$(as_user_program pipeforge --version 2>&1)
  [[ $out == "pipeforge $version"* ]] || { echo "pipeforge --version says: $out"; return 1; }
  out=$(as_user_program pipeforge train --model mlp --steps 2 --quiet 2>&1) || { echo "pipeforge train failed: $out"; return 1; }
  grep -q "^final loss " <<<"$out" || { echo "pipeforge train printed: $out"; return 1; }
  command -v mpirun >/dev/null || return 0
  if [[ ${PF_LIBRARIES_HIDDEN:-} == 1 ]]; then
    # tools/hide_cuda_and_mpi.sh: libmpi is hidden, so one process per rank is refused, clearly.
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo \
      OMPI_MCA_oob_tcp_if_include=lo as_user_program mpirun -np 2 --oversubscribe --bind-to none pipeforge train \
      --model mlp --schedule 1f1b --stages 2 --steps 2 --quiet 2>&1) && { echo "mpirun ran with Open MPI hidden"; return 1; }
    grep -q "one process per rank needs Open MPI" <<<"$out" || { echo "with Open MPI hidden: $out"; return 1; }
    return 0
  fi
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo \
    OMPI_MCA_oob_tcp_if_include=lo XML_OUTPUT_FILE= TEST_PREMATURE_EXIT_FILE= as_user_program mpirun -np 2 \
    --oversubscribe --bind-to none pipeforge train --model mlp --schedule 1f1b --stages 2 --steps 2 --quiet 2>&1) ||
    { echo "mpirun -np 2 pipeforge train failed: $out"; return 1; }
  grep -q "one process each" <<<"$out" || { echo "mpirun -np 2 pipeforge train did not run as processes: $out"; return 1; }
}
