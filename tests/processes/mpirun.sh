# Sourced by the tests: `run_mpi N BTL command...` launches N processes with mpirun as a user on
# one machine would (BTL "tcp" forces loopback TCP, as between machines; "default" lets Open MPI
# pick shared memory). Root needs Open MPI's allow-run-as-root settings; 2 cores need
# --oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No other node, no network beyond loopback: keep Open MPI from probing for them.
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

run_mpi() {
  local n=$1 btl=$2
  shift 2
  local mca=()
  [[ $btl == tcp ]] && mca=(--mca btl tcp,self)
  mpirun -np "$n" --oversubscribe --bind-to none "${mca[@]}" "$@"
}
