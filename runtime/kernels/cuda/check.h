// CUDA / cuBLAS status checks that throw pf::Error (kCudaError / kCublasError) with the library's
// message, the failing expression and its source location. Nothing here exits or aborts.
#pragma once

#include <cuda_runtime_api.h>

namespace pf::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);
// `status` is a cublasStatus_t (int here, so this header does not need cuBLAS).
[[noreturn]] void throw_cublas_error(int status, const char* what, const char* file, int line);

// After a kernel launch: throws on a launch error (bad configuration, no device, ...). Does not
// synchronise, so errors raised while the kernel runs surface at the next synchronising call.
void check_launch(const char* kernel, const char* file, int line);

}  // namespace pf::cuda

#define PF_CUDA_CHECK(expr)                                                      \
  do {                                                                           \
    const cudaError_t pf_cuda_err_ = (expr);                                     \
    if (pf_cuda_err_ != cudaSuccess)                                             \
      ::pf::cuda::throw_cuda_error(pf_cuda_err_, #expr, __FILE__, __LINE__);     \
  } while (0)

#define PF_CUBLAS_CHECK(expr)                                                    \
  do {                                                                           \
    const int pf_cublas_status_ = static_cast<int>(expr);                        \
    if (pf_cublas_status_ != 0)                                                  \
      ::pf::cuda::throw_cublas_error(pf_cublas_status_, #expr, __FILE__, __LINE__); \
  } while (0)

#define PF_CHECK_LAUNCH(name) ::pf::cuda::check_launch(name, __FILE__, __LINE__)
