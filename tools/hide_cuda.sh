#!/bin/bash
# Runs a command as on a machine without CUDA: in a private mount namespace where the CUDA toolkit's
# folder is empty, so libcudart, cuBLAS and NCCL cannot be found (tools/test_without_cuda.sh runs
# the CPU tests under it). Needs root (or an unprivileged user namespace).
#   tools/hide_cuda.sh COMMAND [ARGS...]
set -euo pipefail
cuda=$(readlink -f "${PF_CUDA_HOME:-/usr/local/cuda}")
if [[ ${PF_CUDA_HIDDEN:-} != 1 ]]; then
  export PF_CUDA_HIDDEN=1
  unshare_args=(--mount)
  [[ $(id -u) != 0 ]] && unshare_args+=(--map-root-user)
  exec unshare "${unshare_args[@]}" "$0" "$@"
fi
empty=$(mktemp -d)
[[ -d $cuda ]] && mount --bind "$empty" "$cuda"
# Nothing of CUDA's may be loadable from anywhere else either.
found=
for lib in $(ldconfig -p | grep -E 'lib(cudart|cublas|cublasLt|nccl)\.so' | awk '{ print $NF }'); do
  [[ -e $lib ]] && found+=" $lib"
done
if [[ -n $found ]]; then
  echo "hide_cuda.sh: CUDA libraries still reachable:$found" >&2
  exit 1
fi
exec "$@"
