#include "runtime/kernels/cuda/check.h"

#include <cublas_api.h>

#include "runtime/core/error.h"

namespace pf::cuda {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  fail(ErrorCode::kCudaError, "CUDA error ", static_cast<int>(err), " (", cudaGetErrorName(err), ": ",
       cudaGetErrorString(err), ") in ", what, " at ", file, ":", line);
}

void throw_cublas_error(int status, const char* what, const char* file, int line) {
  fail(ErrorCode::kCublasError, "cuBLAS error ", status, " (",
       cublasGetStatusString(static_cast<cublasStatus_t>(status)), ") in ", what, " at ", file, ":",
       line);
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, kernel, file, line);
}

}  // namespace pf::cuda
