# Sourced by the tests that launch real processes: `run_mpi N BTL command...` runs N processes
# with mpirun as a user on one machine would (BTL "tcp" forces loopback TCP, as between machines;
# "default" lets Open MPI pick shared memory). It sets up:
# * root: Open MPI's allow-run-as-root variables; 2 cores: --oversubscribe, no binding;
# * loopback only: no probing for other networks;
# * gtest binaries as ranks: they must not share Bazel's XML and premature-exit files;
# * ASan (tools/sanitize.sh asan): Open MPI's own allocations at exit are not ours to report
#   (mpi_lsan.supp, third-party libraries only). Its libraries have no frame pointers, so
#   allocation stacks are unwound fully to reach a frame in libmpi (or in a component, kept loaded
#   at exit) that the suppressions match;
# * a short temp dir (PF_MPI_TMP, removed by pf_mpi_cleanup): Open MPI's session sockets must fit
#   a 108-byte Unix socket path, and Bazel's TEST_TMPDIR is longer than that.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
unset XML_OUTPUT_FILE TEST_PREMATURE_EXIT_FILE GTEST_OUTPUT TEST_SHARD_STATUS_FILE
export OMPI_MCA_mca_base_component_disable_dlclose=1
pf_mpi_supp="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mpi_lsan.supp"
export LSAN_OPTIONS="suppressions=$pf_mpi_supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
PF_MPI_TMP=$(mktemp -d /tmp/pf-mpi.XXXXXX)
export TMPDIR=$PF_MPI_TMP
pf_mpi_cleanup() { rm -rf "$PF_MPI_TMP"; }
trap pf_mpi_cleanup EXIT

run_mpi() {
  local n=$1 btl=$2
  shift 2
  local mca=()
  [[ $btl == tcp ]] && mca=(--mca btl tcp,self)
  mpirun -np "$n" --oversubscribe --bind-to none "${mca[@]}" "$@"
}
