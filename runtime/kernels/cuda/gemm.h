// Matrix products through cuBLAS / cuBLASLt, row-major like runtime/kernels/cpu/blas.h.
//
//   C[m, n] = alpha * op(A) * op(B) + beta * C,  op = transpose when the flag is set;
//   A is [m, k] (or [k, m] when trans_a), B is [k, n] (or [n, k] when trans_b).
//
// Precision: fp32 inputs use CUBLAS_COMPUTE_32F (true fp32; TF32 tensor cores only when
// GemmOptions::allow_tf32); bf16 inputs accumulate in fp32 (CUBLAS_COMPUTE_32F) and write bf16 or
// fp32 (the fp32 output is how bf16 activations accumulate weight gradients into fp32 grads).
// Every failure throws pf::Error (kCublasError / kCudaError / kInvalidArgument for sizes that do not
// fit cuBLAS's int arguments).
#pragma once

#include <cstdint>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct GemmOptions {
  bool allow_tf32 = false;  // fp32 inputs only: CUBLAS_COMPUTE_32F_FAST_TF32
};

// The cuBLAS handle bound to (current device, stream), created on first use with its own workspace
// (kCublasWorkspaceBytes, cudaMalloc'd once and kept for the process) and the default (non-atomic,
// deterministic) modes. Thread-safe. cuBLAS results are bitwise reproducible run to run for a given
// stream/handle, GPU model and library version.
cublasHandle_t cublas_handle(cudaStream_t stream);
// The cuBLASLt handle of the current device, and the workspace registered for (device, stream).
cublasLtHandle_t cublaslt_handle();
void* cublas_workspace(cudaStream_t stream);
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// Row-major products on contiguous matrices (leading dimensions k/m/n as the shapes say).
// TA = float with TC = float; TA = bf16 with TC = bf16 or float.
template <typename TA, typename TC>
void gemm(cudaStream_t stream, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const TA* a, const TA* b, float beta, TC* c, const GemmOptions& options = {});

// Row-major matrices with explicit leading dimensions (elements between consecutive rows) and a
// batch of `batch` products whose operands start `stride_*` elements apart:
//   C_i = alpha op(A_i) op(B_i) + beta C_i,  X_i = X + i * stride_x.
// Attention uses it on column slices of qkv (lda = 3 * dim, stride = head_dim).
template <typename TA, typename TC>
void gemm_strided_batched(cudaStream_t stream, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, float alpha, const TA* a, int64_t lda, int64_t stride_a,
                          const TA* b, int64_t ldb, int64_t stride_b, float beta, TC* c, int64_t ldc,
                          int64_t stride_c, int64_t batch, const GemmOptions& options = {});

// cuBLASLt Linear forward with a fused epilogue, row-major:
//   kBias:     y = x W^T + bias
//   kBiasGelu: pre = x W^T + bias (written to `pre_activation`), y = GELU(pre) — cuBLASLt's GELU.
// x [rows, in], W [out, in], bias [out] (same type as W), y and pre [rows, out].
// Returns false, having done nothing, when cuBLASLt offers no algorithm for the case (or alignment
// rules are not met: out % 8 for the GELU aux matrix, 16-byte aligned pointers); callers then use
// the plain path (linear.h). Throws on real errors.
enum class LtEpilogue { kBias, kBiasGelu };
template <typename T>
bool linear_forward_lt(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x,
                       const T* weight, const T* bias, T* y, T* pre_activation, LtEpilogue epilogue,
                       const GemmOptions& options = {});

}  // namespace pf::cuda
