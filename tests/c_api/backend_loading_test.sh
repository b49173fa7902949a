#!/bin/bash
# CUDA and Open MPI are backends loaded at run time (docs/BACKENDS.md):
# - libpipeforge.so.<abi> needs neither CUDA nor MPI libraries (ELF NEEDED); each backend needs its own;
# - asking for cuda:0 without a usable GPU is a clear INVALID_ARGUMENT, never a crash: with the CUDA
#   libraries present (this machine) the backend loads and says why there is no device; hidden
#   (tools/hide_cuda_and_mpi.sh sets PF_LIBRARIES_HIDDEN=1) it names the library it lacks;
# - one process per rank without Open MPI (hidden) is a clear MPI_ERROR naming libmpi;
# - either backend's $PIPEFORGE_<NAME>_BACKEND pointing nowhere is an error naming that path.
# Usage: backend_loading_test.sh LIBPIPEFORGE CUDA_BACKEND MPI_BACKEND BACKEND_REQUEST
set -euo pipefail
lib=$1 cuda_backend=$2 mpi_backend=$3 request=$4
fail() { echo "FAIL: $*"; exit 1; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
core_needs=$(needed "$lib")
if grep -E 'cuda|cublas|nccl|mpi' <<<"$core_needs"; then fail "$(basename "$lib") needs CUDA or MPI libraries"; fi
grep -qx 'libcudart.so.[0-9]*' <<<"$(needed "$cuda_backend")" || fail "$(basename "$cuda_backend") does not need libcudart"
grep -qx 'libmpi.so.[0-9]*' <<<"$(needed "$mpi_backend")" || fail "$(basename "$mpi_backend") does not need libmpi"

out=$("$request" cuda)
echo "cuda: $out"
grep -q '^INVALID_ARGUMENT: .*cuda:0 is not available' <<<"$out" || [[ $out == ok ]] || fail "unexpected: $out"
if [[ ${PF_LIBRARIES_HIDDEN:-} == 1 ]]; then
  grep -qE 'libpipeforge_cuda.so.[0-9]+ could not be loaded.*lib(cudart|cublas|cublasLt|nccl)\.so' <<<"$out" ||
    fail "with CUDA hidden, the error does not name the missing CUDA library"
elif [[ $out != ok ]] && grep -q 'could not be loaded' <<<"$out"; then
  fail "the CUDA libraries are installed, yet the backend did not load"
fi
out=$(PIPEFORGE_CUDA_BACKEND=/nonexistent/libpipeforge_cuda.so.1 "$request" cuda)
echo "cuda, backend nowhere: $out"
grep -q 'could not be loaded from $PIPEFORGE_CUDA_BACKEND: /nonexistent/libpipeforge_cuda.so.1' <<<"$out" ||
  fail "a CUDA backend path that does not exist is not named"

# One process per rank, as if under mpirun (the launcher's variable set): only where loading must fail,
# since MPI_Init without a real launcher is not what this test is about.
if [[ ${PF_LIBRARIES_HIDDEN:-} == 1 ]]; then
  out=$(OMPI_COMM_WORLD_SIZE=2 "$request" mpi)
  echo "mpi, Open MPI hidden: $out"
  grep -qE '^MPI_ERROR: .*one process per rank needs Open MPI: libpipeforge_mpi.so.[0-9]+ could not be loaded.*libmpi\.so' <<<"$out" ||
    fail "with Open MPI hidden, the error does not name libmpi"
fi
out=$(OMPI_COMM_WORLD_SIZE=2 PIPEFORGE_MPI_BACKEND=/nonexistent/libpipeforge_mpi.so.1 "$request" mpi)
echo "mpi, backend nowhere: $out"
grep -q '^MPI_ERROR: .*could not be loaded from $PIPEFORGE_MPI_BACKEND: /nonexistent/libpipeforge_mpi.so.1' <<<"$out" ||
  fail "an MPI backend path that does not exist is not named"
echo "PASS"
