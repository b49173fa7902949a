# Sourced by the tests that start real processes: `run_mpi N command...` launches N processes with
# mpirun on this machine, with the settings of the process tests (tests/processes): root needs Open
# MPI's allow-run-as-root variables, 2 cores need --oversubscribe and no binding, no network beyond
# loopback; and a short TMPDIR (removed at exit), since Open MPI's session sockets must fit a
# 108-byte Unix socket path and Bazel's test temp folder can be longer.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
if [[ -z ${PF_MPI_TMP:-} ]]; then
  PF_MPI_TMP=$(mktemp -d /tmp/pf-mpi.XXXXXX)
  export PF_MPI_TMP TMPDIR=$PF_MPI_TMP
  trap 'rm -rf "$PF_MPI_TMP"' EXIT
fi

run_mpi() {
  local n=$1
  shift
  mpirun -np "$n" --oversubscribe --bind-to none "$@"
}
