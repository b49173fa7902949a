#!/bin/bash
# Runs a command as on a machine with neither CUDA nor Open MPI installed: in a private mount
# namespace where the CUDA toolkit's folder is empty and Open MPI's libmpi is an empty file, so
# neither backend's libraries can be loaded (tools/test_without_cuda_and_mpi.sh runs the tests that
# need neither under it; docs/BACKENDS.md). Sets PF_LIBRARIES_HIDDEN=1 for the command. Needs root
# (or unprivileged user namespaces).
#   tools/hide_cuda_and_mpi.sh COMMAND [ARGS...]
set -euo pipefail
cuda=$(readlink -f "${PF_CUDA_HOME:-/usr/local/cuda}")
if [[ ${PF_LIBRARIES_HIDDEN:-} != 1 ]]; then
  export PF_LIBRARIES_HIDDEN=1
  unshare_args=(--mount)
  [[ $(id -u) != 0 ]] && unshare_args+=(--map-root-user)
  exec unshare "${unshare_args[@]}" "$0" "$@"
fi
empty=$(mktemp -d)
[[ -d $cuda ]] && mount --bind "$empty" "$cuda"
for lib in $(ldconfig -p | grep -E 'libmpi\.so' | awk '{ print $NF }'); do
  real=$(readlink -f "$lib")
  [[ -f $real ]] && mount --bind /dev/null "$real"
done
# Nothing of CUDA's or Open MPI's may be loadable from anywhere else either.
found=
for lib in $(ldconfig -p | grep -E 'lib(cudart|cublas|cublasLt|nccl|mpi)\.so' | awk '{ print $NF }'); do
  [[ -s $lib ]] && found+=" $lib"
done
if [[ -n $found ]]; then
  echo "hide_cuda_and_mpi.sh: libraries still reachable:$found" >&2
  exit 1
fi
exec "$@"
