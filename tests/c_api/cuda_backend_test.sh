#!/bin/bash
# CUDA is a backend loaded at run time (docs/BACKENDS.md):
# - libpipeforge.so.<abi> needs no CUDA library (ELF NEEDED); libpipeforge_cuda.so.<abi> does;
# - asking for cuda:0 without a usable GPU is a clear INVALID_ARGUMENT, never a crash: with the
#   CUDA libraries present (this machine) the backend loads and says why there is no device; with
#   them hidden (tools/hide_cuda.sh sets PF_CUDA_HIDDEN=1) it names the library it lacks;
#   with $PIPEFORGE_CUDA_BACKEND pointing nowhere it names that path.
# Usage: cuda_backend_test.sh LIBPIPEFORGE CUDA_BACKEND CUDA_REQUEST
set -euo pipefail
lib=$1 backend=$2 request=$3
fail() { echo "FAIL: $*"; exit 1; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
if needed "$lib" | grep -E 'cuda|cublas|nccl'; then fail "$(basename "$lib") needs CUDA libraries"; fi
grep -qx 'libcudart.so.[0-9]*' <<<"$(needed "$backend")" || fail "$(basename "$backend") does not need libcudart"

out=$("$request")
echo "default: $out"
grep -q '^INVALID_ARGUMENT: .*cuda:0 is not available' <<<"$out" || [[ $out == ok ]] || fail "unexpected: $out"
if [[ ${PF_CUDA_HIDDEN:-} == 1 ]]; then
  grep -qE 'libpipeforge_cuda.so.[0-9]+ could not be loaded.*lib(cudart|cublas|cublasLt|nccl)\.so' <<<"$out" ||
    fail "with CUDA hidden, the error does not name the missing CUDA library"
elif [[ $out != ok ]] && grep -q 'could not be loaded' <<<"$out"; then
  fail "the CUDA libraries are installed, yet the backend did not load"
fi

out=$(PIPEFORGE_CUDA_BACKEND=/nonexistent/libpipeforge_cuda.so.1 "$request")
echo "nowhere: $out"
grep -q 'could not be loaded from $PIPEFORGE_CUDA_BACKEND: /nonexistent/libpipeforge_cuda.so.1' <<<"$out" ||
  fail "a backend path that does not exist is not named"
echo "PASS"
