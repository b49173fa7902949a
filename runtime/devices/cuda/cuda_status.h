// CUDA, cuBLAS and NCCL status codes -> pf::Error. Every call into those libraries goes through one
// of the check_* functions, so a failure is always a thrown pf::Error carrying the library's own
// name and message for the code plus what the runtime was doing ("context"); nothing exits or
// aborts. The message functions need no GPU (cudaGetErrorString, cublasGetStatusString and
// ncclGetErrorString are pure look-ups), so they are tested on machines without one.
//
// Code mapping:
//   cudaErrorMemoryAllocation            -> ErrorCode::kOutOfMemory
//   any other cudaError_t                -> ErrorCode::kCudaError
//   CUBLAS_STATUS_ALLOC_FAILED           -> ErrorCode::kOutOfMemory
//   any other cublasStatus_t             -> ErrorCode::kCublasError
//   ncclSystemError with an out-of-memory cause cannot be told apart reliably, so
//   any ncclResult_t other than success  -> ErrorCode::kNcclError
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "runtime/core/error.h"

namespace pf::cuda {

// "<context>: CUDA error cudaErrorInvalidValue (invalid argument)"; context may be empty.
std::string cuda_error_message(cudaError_t err, const std::string& context);
ErrorCode cuda_error_code(cudaError_t err);
// "<context>: cuBLAS error CUBLAS_STATUS_NOT_INITIALIZED (the library was not initialized)"
std::string cublas_error_message(cublasStatus_t status, const std::string& context);
ErrorCode cublas_error_code(cublasStatus_t status);
// "<context>: NCCL error ncclInvalidArgument (invalid argument)[: <ncclGetLastError detail>]"
std::string nccl_error_message(ncclResult_t result, const std::string& context);

// Throw the error (never return). throw_cuda_error also clears the calling thread's last-error
// state (cudaGetLastError) so a later, unrelated check does not see a stale non-sticky error.
[[noreturn]] void throw_cuda_error(cudaError_t err, const std::string& context);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const std::string& context);
[[noreturn]] void throw_nccl_error(ncclResult_t result, const std::string& context);

// check_cuda(cudaMalloc(&p, n), "allocating ", n, " bytes on cuda:", device);
// The context parts are only formatted on failure.
template <typename... Parts>
inline void check_cuda(cudaError_t err, const Parts&... context) {
  if (err != cudaSuccess) throw_cuda_error(err, detail::concat(context...));
}

template <typename... Parts>
inline void check_cublas(cublasStatus_t status, const Parts&... context) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, detail::concat(context...));
}

template <typename... Parts>
inline void check_nccl(ncclResult_t result, const Parts&... context) {
  if (result != ncclSuccess) throw_nccl_error(result, detail::concat(context...));
}

}  // namespace pf::cuda
