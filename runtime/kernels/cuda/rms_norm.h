// RMSNorm over the last dimension (runtime/layers/rms_norm.cc; formulas in element_ops.h):
// x [rows, dim] -> rstd = 1 / sqrt(mean(x^2) + eps), xhat = x * rstd, y = xhat * weight. The GPU
// keeps what the CPU layer keeps: xhat [rows, dim] and the per-row rstd [rows] (fp32).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// F: writes y and xhat [rows, dim] and rstd [rows].
template <typename T>
void rms_norm_forward(cudaStream_t stream, int64_t rows, int64_t dim, float eps, const T* x, const T* weight, T* y,
                      T* xhat, float* rstd);

// B: dx = rstd * (dy*w - xhat * mean(dy*w*xhat)), written.
template <typename T>
void rms_norm_backward_input(cudaStream_t stream, int64_t rows, int64_t dim, const T* xhat, const float* rstd,
                             const T* weight, const T* dy, T* dx);

// W: dweight[i] += sum_r dy[r,i] * xhat[r,i] (fp32), fixed-order column sums (block_reduce.cuh).
template <typename T>
void rms_norm_backward_weight(cudaStream_t stream, int64_t rows, int64_t dim, const T* xhat, const T* dy,
                              float* dweight);

}  // namespace pf::cuda
